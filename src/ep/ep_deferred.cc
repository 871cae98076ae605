/*
 * xqp - requests made while an endpoint connects (and the other rare
 * states of tx_check).
 *
 * uct_ep_create returns before the connection is up, and UCT users (UCX's
 * own tests among them) send right away. Such a request is prepared exactly
 * as it would be posted (sequence number, TxOp, bounce buffer, signaling,
 * fence) and then kept here instead of going to the QP, with a copy of its
 * scatter/gather list and of its inline bytes (the caller's buffer is free
 * once the call returns). It counts against the send queue like a posted
 * one, so UCS_ERR_NO_RESOURCE comes at the same depth.
 *
 * Once the connection is established the first progress, operation or flush
 * on the main thread posts them in order, before anything newer. When the
 * connection fails they end with the endpoint's status (UCS_ERR_CANCELED when
 * the endpoint is destroyed first), the way requests in flight do.
 */
#include "ep/ep.h"

#include <algorithm>
#include <cerrno>
#include <new>

namespace xqp::ep {

ucs_status_t Endpoint::tx_check_slow(State st)
{
    switch (st) {
    case State::Connected:
        if (ucs_unlikely(deferring())) {
            /* established, with requests made while connecting still
             * here: they go first (post_deferred ends deferring, or fails
             * us) */
            post_deferred();
            return tx_check();
        }
        /* queued requests go first: a new one waits behind them */
        if ((slow_ & kQueued) || !has_tx_resources()) {
            return UCS_ERR_NO_RESOURCE;
        }
        return tx_grant();
    case State::Failed:
        /* a peer's death is found asynchronously: until the error handler
         * has run, requests are taken as before (UCX's
         * test_uct_peer_failure.peer_failure wants UCS_OK right after the
         * peer went), and the QP, in the error state, ends them with the
         * endpoint's status; after it, the status at once */
        if (!error_reported_ && (qp_ != nullptr) && has_tx_resources()) {
            return tx_grant();
        }
        return fail_status_;
    case State::Connecting:
    default:
        /* pending requests were queued before this one: it waits behind
         * them (pending_add) */
        if (!ucs_queue_is_empty(&pending_) || !has_tx_resources()) {
            return UCS_ERR_NO_RESOURCE;
        }
        slow_ |= kDeferring;
        return tx_grant();
    }
}

int Endpoint::defer(const ibv_send_wr &wr)
{
    try {
        Deferred d{};
        d.wr         = wr;
        d.wr.next    = nullptr;
        d.wr.sg_list = nullptr; /* set when posted: the entry may move */
        if (wr.send_flags & IBV_SEND_INLINE) {
            for (int i = 0; i < wr.num_sge; ++i) {
                const auto *bytes = reinterpret_cast<const uint8_t *>(wr.sg_list[i].addr);
                d.inline_data.insert(d.inline_data.end(), bytes, bytes + wr.sg_list[i].length);
            }
            d.sge[0]     = {0, static_cast<uint32_t>(d.inline_data.size()), 0};
            d.wr.num_sge = 1;
        } else {
            std::copy(wr.sg_list, wr.sg_list + std::min(wr.num_sge, 8), d.sge);
        }
        deferred_.push_back(std::move(d));
        return 0;
    } catch (const std::bad_alloc &) {
        return ENOMEM;
    }
}

unsigned Endpoint::post_deferred()
{
    unsigned count = 0;
    while (!deferred_.empty()) {
        Deferred &d   = deferred_.front();
        d.wr.sg_list  = d.sge;
        if (d.wr.send_flags & IBV_SEND_INLINE) {
            d.sge[0].addr = reinterpret_cast<uintptr_t>(d.inline_data.data());
        }
        ibv_send_wr *bad;
        const int ret = ibv_post_send(qp_, &d.wr, &bad);
        if (ret != 0) {
            /* nobody is left to tell but the error handler: the endpoint
             * fails (unless it has already) and the rest end with its status */
            fail_deferred(completion_error(UCS_ERR_IO_ERROR, IBV_WC_GENERAL_ERR));
            return count;
        }
        deferred_.pop_front();
        ++count;
    }
    slow_ &= ~kDeferring;
    return count;
}

void Endpoint::fail_deferred(ucs_status_t status)
{
    std::deque<Deferred> requests;
    requests.swap(deferred_);
    slow_ &= ~kDeferring;
    for (const auto &d : requests) {
        if (d.wr.send_flags & IBV_SEND_SIGNALED) {
            iface_->finish_op(reinterpret_cast<iface::TxOp *>(d.wr.wr_id), status);
        }
    }
    /* the unsignaled ones too: nothing after them was posted */
    on_send_completion(posted_sn_);
}

} // namespace xqp::ep
