/*
 * xqp - release flags: how one side of a shared connection tells the other
 * that it stopped using it, without the other side's help.
 *
 * Every shared connection owns one byte (a slot) in memory its interface
 * registered for remote writes. Its hello tells the peer the slot and the
 * rkey; when the peer stops using the connection it writes 1 there with an
 * RDMA write (Endpoint::post_release). A write needs no receive buffer and
 * no progress of the receiving process, so releases never wait for a peer
 * that does not progress (a send would: receiver-not-ready retries, for
 * every connection). The receiving side reads its byte when it decides
 * what to do with the connection (iface/sharing.cc).
 *
 * The slots live in chunks of kChunkSlots bytes, each registered on its own
 * with the I/O virtual address chunk * kChunkSlots (ibv_reg_mr_iova), so a
 * slot's remote address is its number and fits the hello with its chunk's
 * rkey. Slot 0 is never handed out: it holds the 1 that writes send.
 *
 * A slot goes back to the pool after its connection's QP is destroyed: no
 * write through that connection can arrive any more.
 */
#ifndef XQP_WIREUP_RELEASE_FLAGS_H
#define XQP_WIREUP_RELEASE_FLAGS_H

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace xqp::wireup {

class ReleaseFlags;

/* One connection's slot (move-only; returns to its pool when destroyed). */
class ReleaseSlot {
public:
    ReleaseSlot() = default;
    ~ReleaseSlot();
    ReleaseSlot(ReleaseSlot &&other) noexcept;
    ReleaseSlot &operator=(ReleaseSlot &&other) noexcept;
    ReleaseSlot(const ReleaseSlot &)            = delete;
    ReleaseSlot &operator=(const ReleaseSlot &) = delete;

    bool     valid() const { return flag_ != nullptr; }
    uint16_t index() const { return index_; }
    uint32_t rkey() const { return rkey_; }
    /* the peer wrote its release */
    bool     set() const { return (flag_ != nullptr) && (__atomic_load_n(flag_, __ATOMIC_ACQUIRE) != 0); }

private:
    friend class ReleaseFlags;
    ReleaseFlags *pool_  = nullptr;
    uint16_t      index_ = 0;
    uint32_t      rkey_  = 0;
    uint8_t      *flag_  = nullptr;
};

class ReleaseFlags {
public:
    static constexpr size_t kChunkSlots = 4096;
    static constexpr size_t kMaxChunks  = 65536 / kChunkSlots;

    /* pd: where the chunks are registered; nullptr keeps them in memory
     * only, with rkey 0 (unit tests) */
    explicit ReleaseFlags(ibv_pd *pd) : pd_(pd) {}
    ~ReleaseFlags();
    ReleaseFlags(const ReleaseFlags &)            = delete;
    ReleaseFlags &operator=(const ReleaseFlags &) = delete;

    /* a zeroed slot; invalid when all are taken or registration failed
     * (why() tells, once) */
    ReleaseSlot alloc();
    /* what a release write sends: slot 0, by its I/O virtual address (0:
     * the chunks are registered by slot number, for local access too) and
     * the lkey of its chunk (valid while a slot is allocated) */
    static constexpr uint64_t kSourceIova = 0;
    uint32_t source_lkey() const;
    /* where slot index lives (what a peer's write changes); nullptr before
     * its chunk exists */
    uint8_t *slot_memory(uint16_t index) const;
    const std::string &why() const { return why_; }
    size_t   in_use() const;

private:
    friend class ReleaseSlot;
    void put(uint16_t index);
    bool grow(); /* pool lock held */

    struct Chunk {
        uint8_t *mem = nullptr;
        ibv_mr  *mr  = nullptr;
    };
    ibv_pd               *pd_;
    mutable std::mutex    lock_;
    std::vector<Chunk>    chunks_;
    std::vector<uint16_t> free_;
    size_t                used_ = 0;
    std::string           why_;
};

} // namespace xqp::wireup

#endif
