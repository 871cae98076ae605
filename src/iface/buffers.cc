#include "iface/buffers.h"

#include "common/error.h"
#include "topology/membind.h"
#include "topology/topology.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace xqp::iface {

BufferPool::BufferPool(ibv_pd *pd, size_t count, size_t size,
                       const std::vector<unsigned> &numa_nodes, const std::string &name)
    : count_(count), size_((size + 63) & ~size_t(63))
{
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    length_           = ((count_ * size_) + page - 1) / page * page;
    void *mem = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        throw_errno("mmap(" + std::to_string(length_) + ") for " + name, errno);
    }
    base_ = static_cast<uint8_t *>(mem);

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
        munmap(base_, length_);
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
    munmap(base_, length_);
}

} // namespace xqp::iface
