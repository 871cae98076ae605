#include "iface/buffers.h"

#include "common/error.h"
#include "topology/membind.h"
#include "topology/topology.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace xqp::iface {

BufferPool::BufferPool(ibv_pd *pd, size_t count, size_t size,
                       const std::vector<unsigned> &numa_nodes, const std::string &name,
                       size_t align)
    : count_(count)
{
    const size_t stride = std::max<size_t>(align, 64);
    size_             = (size + stride - 1) & ~(stride - 1);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    length_           = ((count_ * size_) + page - 1) / page * page;
    /* mmap aligns to a page; a larger alignment takes slack */
    map_length_ = length_ + ((align > page) ? align : 0);
    map_ = mmap(nullptr, map_length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) {
        throw_errno("mmap(" + std::to_string(map_length_) + ") for " + name, errno);
    }
    base_ = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(map_) + align - 1) &
                                        ~(uintptr_t(align) - 1));

    /* bind before the first touch (ibv_reg_mr pins, i.e. faults the pages in) */
    std::string why;
    if (topo::bind_to_numa_nodes(base_, length_, numa_nodes, &why)) {
        placement_ = "numa " + topo::format_list(numa_nodes);
    } else {
        placement_ = "not bound: " + why;
    }

    mr_ = ibv_reg_mr(pd, base_, length_, IBV_ACCESS_LOCAL_WRITE);
    if (mr_ == nullptr) {
        const int err = errno;
        munmap(map_, map_length_);
        throw_errno("ibv_reg_mr for " + name, err);
    }
    free_.reserve(count_);
    for (size_t i = count_; i > 0; --i) {
        free_.push_back(buffer(i - 1));
    }
}

BufferPool::~BufferPool()
{
    ibv_dereg_mr(mr_);
    munmap(map_, map_length_);
}

} // namespace xqp::iface
