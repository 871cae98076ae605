/*
 * xqp - release flags (see release_flags.h).
 */
#include "wireup/release_flags.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace xqp::wireup {

ReleaseSlot::~ReleaseSlot()
{
    if (pool_ != nullptr) {
        pool_->put(index_);
    }
}

ReleaseSlot::ReleaseSlot(ReleaseSlot &&other) noexcept
    : pool_(other.pool_), index_(other.index_), rkey_(other.rkey_), flag_(other.flag_)
{
    other.pool_ = nullptr;
    other.flag_ = nullptr;
}

ReleaseSlot &ReleaseSlot::operator=(ReleaseSlot &&other) noexcept
{
    if (this != &other) {
        if (pool_ != nullptr) {
            pool_->put(index_);
        }
        pool_       = other.pool_;
        index_      = other.index_;
        rkey_       = other.rkey_;
        flag_       = other.flag_;
        other.pool_ = nullptr;
        other.flag_ = nullptr;
    }
    return *this;
}

ReleaseFlags::~ReleaseFlags()
{
    for (auto &chunk : chunks_) {
        if (chunk.mr != nullptr) {
            ibv_dereg_mr(chunk.mr);
        }
        std::free(chunk.mem);
    }
}

bool ReleaseFlags::grow()
{
    if (!why_.empty() || (chunks_.size() == kMaxChunks)) {
        return false;
    }
    Chunk chunk;
    if (posix_memalign(reinterpret_cast<void **>(&chunk.mem), kChunkSlots, kChunkSlots) != 0) {
        why_ = "no memory for release flags";
        return false;
    }
    std::memset(chunk.mem, 0, kChunkSlots);
    const size_t first = chunks_.size() * kChunkSlots;
    if (pd_ != nullptr) {
        chunk.mr = ibv_reg_mr_iova(pd_, chunk.mem, kChunkSlots, first,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (chunk.mr == nullptr) {
            why_ = std::string("ibv_reg_mr_iova of the release flags: ") + std::strerror(errno);
            std::free(chunk.mem);
            return false;
        }
    }
    if (first == 0) {
        chunk.mem[0] = 1; /* slot 0: what release writes send */
    }
    chunks_.push_back(chunk);
    for (size_t i = kChunkSlots; i-- > ((first == 0) ? 1 : 0);) {
        free_.push_back(static_cast<uint16_t>(first + i));
    }
    return true;
}

ReleaseSlot ReleaseFlags::alloc()
{
    std::lock_guard<std::mutex> guard(lock_);
    ReleaseSlot slot;
    if (free_.empty() && !grow()) {
        return slot;
    }
    const uint16_t index = free_.back();
    free_.pop_back();
    const Chunk &chunk = chunks_[index / kChunkSlots];
    slot.pool_         = this;
    slot.index_        = index;
    slot.rkey_         = (chunk.mr != nullptr) ? chunk.mr->rkey : 0;
    slot.flag_         = chunk.mem + (index % kChunkSlots);
    __atomic_store_n(slot.flag_, 0, __ATOMIC_RELAXED);
    ++used_;
    return slot;
}

void ReleaseFlags::put(uint16_t index)
{
    std::lock_guard<std::mutex> guard(lock_);
    free_.push_back(index);
    --used_;
}

uint8_t *ReleaseFlags::slot_memory(uint16_t index) const
{
    std::lock_guard<std::mutex> guard(lock_);
    const size_t chunk = index / kChunkSlots;
    return (chunk < chunks_.size()) ? chunks_[chunk].mem + (index % kChunkSlots) : nullptr;
}

uint32_t ReleaseFlags::source_lkey() const
{
    std::lock_guard<std::mutex> guard(lock_);
    return (chunks_.empty() || (chunks_[0].mr == nullptr)) ? 0 : chunks_[0].mr->lkey;
}

size_t ReleaseFlags::in_use() const
{
    std::lock_guard<std::mutex> guard(lock_);
    return used_;
}

} // namespace xqp::wireup
