/*
 * xqp - a pool of equally sized, registered buffers the interface owns
 * (bounce buffers for bcopy and atomics, receive buffers of the shared
 * receive queue). Slabs of buffers, one memory region each, placed on the
 * device's NUMA node(s) when they are known (UCX_XQP_LOCALITY). The first
 * slab is made with the pool; grow() adds one (the receive buffers grow
 * while the application keeps descriptors).
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
        if (top_ == free_.data()) {
            return nullptr;
        }
        return *--top_;
    }
    /* a buffer of this pool that get() gave out, once: the stack has room
     * for every buffer, so the completion path stores it without a check
     * (UCX's ucs_assert is on in Debian's build and would cost the
     * completion path 5 instructions) */
    void put(uint8_t *buf) { *top_++ = buf; }
    /* another slab of count buffers; false (and a warning) when it cannot
     * be had */
    bool grow(size_t count);

    /* the first slab's key (a pool that never grows has only that one) */
    uint32_t lkey() const { return first_lkey_; }
    /* the key of the slab that holds buf (a buffer of this pool): the first
     * slab's until the pool grows, then looked up */
    uint32_t lkey(const uint8_t *buf) const
    {
        if (__builtin_expect(!grown_, 1)) {
            return first_lkey_;
        }
        for (const auto &s : slabs_) {
            if ((buf >= s.base) && (buf < s.base + s.length)) {
                return s.mr->lkey;
            }
        }
        return 0;
    }
    size_t buffer_size() const { return size_; }
    size_t count() const { return count_; }
    size_t available() const { return static_cast<size_t>(top_ - free_.data()); }
    /* "numa 1" or "not bound: <reason>" (of the first slab) */
    const std::string &placement() const { return placement_; }

private:
    struct Slab {
        void    *map        = nullptr;
        size_t   map_length = 0; /* length, and the slack to align base */
        uint8_t *base       = nullptr;
        size_t   length     = 0;
        ibv_mr  *mr         = nullptr;
    };
    /* maps, binds and registers a slab of count buffers; throws Error */
    void add_slab(size_t count);

    ibv_pd               *pd_;
    size_t                count_ = 0;
    size_t                size_;
    size_t                align_;
    std::vector<unsigned> numa_nodes_;
    std::string           name_;
    std::vector<Slab>     slabs_;
    /* slabs_.front().mr->lkey, and whether slabs_ holds more than one (set
     * by add_slab: lkey(buf)'s test on the receive path) */
    uint32_t              first_lkey_ = 0;
    bool                  grown_      = false;
    /* the free buffers: a stack of room count_ (free_), top_ above the
     * last one; the last one put is the next one got */
    std::vector<uint8_t *> free_;
    uint8_t              **top_ = nullptr;
    std::string           placement_;
};

} // namespace xqp::iface

#endif
