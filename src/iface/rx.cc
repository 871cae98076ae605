/* xqp - the interface's receive side: buffer layout (AM alignment), the
 * shared receive queue and its batched reposts, and active-message delivery */
#include "iface/iface.h"

#include "iface/config.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace xqp::iface {

void Iface::rx_layout(const uct_iface_params_t *params)
{
    /* UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT: received payloads start where
     * (data + align_offset) is a multiple of the alignment (uct.h); without
     * it, at a cache line (before the parameters were honoured, payloads
     * started 8 + headroom bytes after one) */
    const bool align_set  = params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT;
    const bool offset_set = params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
    size_t align_offset   = 0;
    if (align_set) {
        rx_align_ = params->am_alignment;
        if ((rx_align_ == 0) || !ucs_is_pow2(rx_align_)) {
            throw Error(UCS_ERR_INVALID_PARAM, "AM alignment " + std::to_string(rx_align_) +
                                                       " is not a power of two");
        }
        if (offset_set) {
            align_offset = params->am_align_offset % rx_align_;
        }
    } else if (offset_set) {
        throw Error(UCS_ERR_INVALID_PARAM, "AM alignment offset " +
                                                   std::to_string(params->am_align_offset) +
                                                   " given without an AM alignment");
    }
    /* the smallest offset after descriptor pointer and headroom at which
     * buffer + offset + align_offset is aligned (buffers start aligned) */
    const size_t min_offset = sizeof(void *) + rx_headroom_;
    /* rx_align_ is a power of two (checked above); plain arithmetic, as
     * UCX's ucs_align_up_pow2 moved between headers (ptr_arith.h, 1.14) */
    rx_data_offset_ = ((min_offset + align_offset + rx_align_ - 1) & ~(rx_align_ - 1)) - align_offset;
}

uint8_t *Iface::take_rx_buffer()
{
    uint8_t *buf = rx_pool_->get();
    if (buf != nullptr) {
        /* uct_iface_release_desc finds the release descriptor just before
         * the descriptor (payload - headroom) */
        *reinterpret_cast<uct_recv_desc_t **>(rx_data(buf) - rx_headroom_ - sizeof(void *)) =
                &recv_desc_.super;
    }
    return buf;
}

void Iface::init_rx_batch()
{
    for (unsigned i = 0; i < kRxBatchMax; ++i) {
        rx_sges_[i].length = static_cast<uint32_t>(seg_size_);
        rx_wrs_[i].sg_list = &rx_sges_[i];
        rx_wrs_[i].num_sge = 1;
        rx_wrs_[i].next    = (i + 1 < kRxBatchMax) ? &rx_wrs_[i + 1] : nullptr;
    }
}

UCS_F_ALWAYS_INLINE void Iface::post_rx_inl(uint8_t *buf)
{
    if (ucs_unlikely(rx_posted_ + rx_batched_ >= rx_queue_len_)) {
        rx_pool_->put(buf); /* the queue is full: a spare for later */
        return;
    }
    repost_rx_inl(buf);
}

UCS_F_ALWAYS_INLINE void Iface::repost_rx_inl(uint8_t *buf)
{
    const unsigned i   = rx_batched_++;
    rx_wrs_[i].wr_id   = reinterpret_cast<uintptr_t>(buf);
    rx_sges_[i].addr   = reinterpret_cast<uintptr_t>(rx_data(buf));
    rx_sges_[i].lkey   = rx_pool_->lkey(buf);
    /* a queue that runs low (kept descriptors at UCX_XQP_RX_MAX_BUFS) gets
     * each buffer at once: a sender that waits on receiver-not-ready must
     * not wait for a batch to fill */
    if ((rx_batched_ >= rx_batch_len_) || ucs_unlikely(rx_posted_ < rx_batch_len_)) {
        post_rx_batch();
    }
}

void Iface::post_rx(uint8_t *buf)
{
    post_rx_inl(buf);
}

void Iface::post_rx_batch()
{
    const unsigned n = rx_batched_;
    if (n == 0) {
        return;
    }
    rx_batched_ = 0;
    /* the chain ends at the n-th request for this post */
    ibv_recv_wr *last = &rx_wrs_[n - 1];
    last->next        = nullptr;
    ibv_recv_wr *bad  = nullptr;
    const int ret     = ibv_post_srq_recv(srq_.get(), rx_wrs_, &bad);
    last->next        = (n < kRxBatchMax) ? &rx_wrs_[n] : nullptr;
    if (ucs_unlikely(ret != 0)) {
        ucs_error("xqp: %s: ibv_post_srq_recv: %s", resource_name_.c_str(), strerror(ret));
        /* those before bad are posted; bad and those after it are not */
        const unsigned first = (bad != nullptr) ? static_cast<unsigned>(bad - rx_wrs_) : 0;
        for (unsigned i = first; i < n; ++i) {
            rx_pool_->put(reinterpret_cast<uint8_t *>(rx_wrs_[i].wr_id));
        }
        rx_posted_ += first;
        return;
    }
    rx_posted_ += n;
}

void Iface::replace_kept_rx()
{
    uint8_t *buf = take_rx_buffer();
    if (buf == nullptr) {
        /* at UCX_XQP_RX_MAX_BUFS the queue holds one fewer until the
         * descriptor comes back */
        const size_t room = rx_max_bufs_ - std::min(rx_max_bufs_, rx_pool_->count());
        const size_t more = std::min(room, std::max<size_t>(64, rx_queue_len_ / 4));
        if ((more > 0) && rx_pool_->grow(more)) {
            buf = take_rx_buffer();
        }
    }
    if (buf != nullptr) {
        post_rx(buf);
    }
}

void Iface::release_desc(uct_recv_desc_t *self, void *desc)
{
    /* desc = payload - rx_headroom */
    auto *iface = reinterpret_cast<RecvDesc *>(self)->iface;
    iface->post_rx(static_cast<uint8_t *>(desc) + iface->rx_headroom_ - iface->rx_data_offset_);
}

UCS_F_ALWAYS_INLINE void Iface::handle_recv_completion_inl(const ibv_wc &wc)
{
    auto *buf = reinterpret_cast<uint8_t *>(wc.wr_id);
    --rx_posted_;
    /* the AM id travels as immediate data, so the payload is all the user's */
    const uint32_t am_id = ntohl(wc.imm_data);
    if (ucs_unlikely((wc.status != IBV_WC_SUCCESS) || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
                     (am_id >= UCT_AM_ID_MAX))) {
        recv_unusual(wc, buf);
        return;
    }
    uint8_t *data             = rx_data(buf);
    const ucs_status_t status = uct_iface_invoke_am(&handle_.super, static_cast<uint8_t>(am_id),
                                                    data, wc.byte_len, UCT_CB_PARAM_FLAG_DESC);
    if (ucs_likely(status == UCS_OK)) {
        /* the buffer just left the queue: there is room for it */
        repost_rx_inl(buf);
        return;
    }
    /* UCS_INPROGRESS: the handler kept the descriptor (UCP does for every
     * unexpected message); uct_iface_release_desc gives it back. Another
     * buffer takes its place now: held descriptors must not empty the
     * queue, or every sender waits on receiver-not-ready for good. */
    replace_kept_rx();
}

void Iface::handle_recv_completion(const ibv_wc &wc)
{
    handle_recv_completion_inl(wc);
}

unsigned Iface::handle_recv_completions(const ibv_wc *wcs, int n)
{
    for (int i = 0; i < n; ++i) {
        handle_recv_completion_inl(wcs[i]);
    }
    return static_cast<unsigned>(n);
}

void Iface::recv_unusual(const ibv_wc &wc, uint8_t *buf)
{
    if (wc.status != IBV_WC_SUCCESS) {
        if (wc.status == IBV_WC_WR_FLUSH_ERR) {
            rx_pool_->put(buf);
            return;
        }
        /* the message is lost (its sender gets an error), not the buffer */
        ucs_error("xqp: %s: receive completion error: %s", resource_name_.c_str(),
                  ibv_wc_status_str(wc.status));
        post_rx(buf);
        return;
    }
    const uint32_t am_id = ntohl(wc.imm_data);
    if (((am_id == kReleaseImm) || (am_id == kBoundImm)) && (wc.wc_flags & IBV_WC_WITH_IMM) &&
        (wc.byte_len == 0)) {
        post_rx(buf);
        /* sharing: the peer sends on the connection from now on, or no more */
        on_peer_notice(wc.qp_num, am_id == kBoundImm);
        return;
    }
    ucs_error("xqp: %s: dropped a malformed message (%u bytes, %s, id %u) from qp 0x%x",
              resource_name_.c_str(), wc.byte_len,
              (wc.wc_flags & IBV_WC_WITH_IMM) ? "with immediate" : "no immediate", am_id,
              wc.src_qp);
    post_rx(buf);
}

void Iface::on_peer_notice(uint32_t qp_num, bool sends)
{
    WireupGuard guard(*this);
    conns_->on_notice(qp_num, sends);
}

} // namespace xqp::iface
