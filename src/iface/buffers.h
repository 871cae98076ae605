/*
 * xqp - a pool of equally sized, registered buffers the interface owns
 * (bounce buffers for bcopy and atomics, receive buffers of the shared
 * receive queue). One slab, one memory region, placed on the device's NUMA
 * node(s) when they are known (UCX_XQP_LOCALITY).
 */
#ifndef XQP_IFACE_BUFFERS_H
#define XQP_IFACE_BUFFERS_H

#include "verbs/handles.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xqp::iface {

class BufferPool {
public:
    /* count buffers of size bytes, each starting at a multiple of align (a
     * power of two; the size is rounded up to a multiple of it and of 64);
     * throws Error */
    BufferPool(ibv_pd *pd, size_t count, size_t size, const std::vector<unsigned> &numa_nodes,
               const std::string &name, size_t align = 64);
    ~BufferPool();
    BufferPool(const BufferPool &) = delete;
    BufferPool &operator=(const BufferPool &) = delete;

    uint8_t *get()
    {
        if (free_.empty()) {
            return nullptr;
        }
        uint8_t *buf = free_.back();
        free_.pop_back();
        return buf;
    }
    void put(uint8_t *buf) { free_.push_back(buf); }

    uint32_t lkey() const { return mr_->lkey; }
    size_t buffer_size() const { return size_; }
    size_t count() const { return count_; }
    size_t available() const { return free_.size(); }
    uint8_t *buffer(size_t index) const { return base_ + index * size_; }
    /* "numa 1" or "not bound: <reason>" */
    const std::string &placement() const { return placement_; }

private:
    size_t                count_;
    size_t                size_;
    size_t                length_;
    size_t                map_length_; /* length_, and the slack to align base_ */
    void                 *map_  = nullptr;
    uint8_t              *base_ = nullptr;
    ibv_mr               *mr_   = nullptr;
    std::vector<uint8_t *> free_;
    std::string           placement_;
};

} // namespace xqp::iface

#endif
