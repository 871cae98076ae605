#include "iface/buffers.h"

#include "common/error.h"
#include "topology/membind.h"
#include "topology/topology.h"

#include <ucs/debug/log_def.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace xqp::iface {

BufferPool::BufferPool(ibv_pd *pd, size_t count, size_t size,
                       const std::vector<unsigned> &numa_nodes, const std::string &name,
                       size_t align)
    : pd_(pd), align_(align), numa_nodes_(numa_nodes), name_(name)
{
    const size_t stride = std::max<size_t>(align, 64);
    size_               = (size + stride - 1) & ~(stride - 1);
    add_slab(count);
}

void BufferPool::add_slab(size_t count)
{
    Slab s;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    s.length          = ((count * size_) + page - 1) / page * page;
    /* mmap aligns to a page; a larger alignment takes slack */
    s.map_length = s.length + ((align_ > page) ? align_ : 0);
    s.map = mmap(nullptr, s.map_length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s.map == MAP_FAILED) {
        throw_errno("mmap(" + std::to_string(s.map_length) + ") for " + name_, errno);
    }
    s.base = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(s.map) + align_ - 1) &
                                         ~(uintptr_t(align_) - 1));

    /* bind before the first touch (ibv_reg_mr pins, i.e. faults the pages in) */
    std::string why;
    const bool bound = topo::bind_to_numa_nodes(s.base, s.length, numa_nodes_, &why);
    if (slabs_.empty()) {
        placement_ = bound ? "numa " + topo::format_list(numa_nodes_) : "not bound: " + why;
    }

    s.mr = ibv_reg_mr(pd_, s.base, s.length, IBV_ACCESS_LOCAL_WRITE);
    if (s.mr == nullptr) {
        const int err = errno;
        munmap(s.map, s.map_length);
        throw_errno("ibv_reg_mr for " + name_, err);
    }
    slabs_.push_back(s);
    first_lkey_ = slabs_.front().mr->lkey;
    grown_      = slabs_.size() > 1;
    const size_t nfree = available();
    count_ += count;
    free_.resize(count_);
    top_ = free_.data() + nfree;
    for (size_t i = count; i > 0; --i) {
        *top_++ = s.base + (i - 1) * size_;
    }
}

bool BufferPool::grow(size_t count)
{
    try {
        add_slab(count);
        ucs_debug("xqp: %s: %zu more buffers, %zu in all", name_.c_str(), count, count_);
        return true;
    } catch (const std::exception &e) {
        ucs_warn("xqp: %s: cannot add %zu buffers: %s", name_.c_str(), count, e.what());
        return false;
    }
}

BufferPool::~BufferPool()
{
    for (auto &s : slabs_) {
        ibv_dereg_mr(s.mr);
        munmap(s.map, s.map_length);
    }
}

} // namespace xqp::iface
