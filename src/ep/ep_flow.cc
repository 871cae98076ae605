/* xqp - an endpoint's flow: pending requests and their dispatch, flush,
 * cancel, the flushes completions satisfy, and uct_ep_check. Posting and
 * the operations are ep.cc's. */
#include "ep/ep.h"

namespace xqp::ep {

static ucs_queue_elem_t *pending_elem(uct_pending_req_t *req)
{
    static_assert(sizeof(ucs_queue_elem_t) <= UCT_PENDING_REQ_PRIV_LEN, "fits in priv");
    return reinterpret_cast<ucs_queue_elem_t *>(req->priv);
}

static uct_pending_req_t *pending_req(ucs_queue_elem_t *elem)
{
    return reinterpret_cast<uct_pending_req_t *>(reinterpret_cast<char *>(elem) -
                                                 offsetof(uct_pending_req_t, priv));
}

unsigned Endpoint::dispatch()
{
    unsigned count = 0;
    if (ucs_unlikely(peer_closed_.load(std::memory_order_acquire)) && !after_peer_closed()) {
        return 0; /* waits for the notice's completion */
    }
    if (state() == State::Connected) {
        /* requests made while connecting are older than any pending one */
        if (ucs_unlikely(deferring())) {
            count += post_deferred();
        }
        /* the requests run here may post, flush or queue again on this
         * endpoint: they are the oldest, nothing overtakes them */
        dispatching_ = true;
        update_queued();
        if (ucs_unlikely(announce_owed_)) {
            announce_bound(); /* before the pending requests */
        }
        while (!ucs_queue_is_empty(&pending_) && (tx_check_all() == UCS_OK)) {
            ucs_queue_elem_t *elem = ucs_queue_pull_non_empty(&pending_);
            uct_pending_req_t *req = pending_req(elem);
            const ucs_status_t status = req->func(req);
            ++count;
            if (status == UCS_ERR_NO_RESOURCE) {
                ucs_queue_push_head(&pending_, elem);
                break;
            }
            if (status == UCS_INPROGRESS) {
                ucs_queue_push_head(&pending_, elem);
            }
        }
        dispatching_ = false;
        update_queued();
        if (!ucs_queue_is_empty(&pending_)) {
            iface_->wait_for_resources(this);
        }
    } else if ((state() == State::Failed) && !error_reported_) {
        if (deferring()) {
            fail_deferred(fail_status_); /* before the handler, which may destroy us */
        }
        error_reported_ = true;
        uct_iface_handle_ep_err(iface_->handle(), handle(), fail_status_);
        ++count;
    }
    return count;
}

/* ------------------------------------------------------------------ flush, pending */

ucs_status_t Endpoint::flush(unsigned flags, uct_completion_t *comp)
{
    if (ucs_unlikely(deferring()) && (state() == State::Connected)) {
        post_deferred(); /* the flush covers them: on the wire first */
    }
    switch (state()) {
    case State::Connected:
        if (ucs_unlikely(flags & UCT_FLUSH_FLAG_CANCEL)) {
            return cancel(comp);
        }
        if (ucs_unlikely(!ucs_queue_is_empty(&pending_) && !dispatching_)) {
            /* queued requests are not posted yet, and the flush covers
             * them: it waits behind them (pending_add) */
            return UCS_ERR_NO_RESOURCE;
        }
        if (outstanding() == 0) {
            return UCS_OK;
        }
        /* RC completes in order: the flush is done when the request posted
         * last completes; when that one is unsignaled, a signaled marker
         * after it reports it */
        if (unsignaled() > 0) {
            if (tx_check() != UCS_OK) {
                return UCS_ERR_NO_RESOURCE;
            }
            const ucs_status_t status = post_marker(nullptr);
            if (status != UCS_OK) {
                return status;
            }
        }
        if (comp != nullptr) {
            flushes_.emplace_back(posted_sn_, comp);
        }
        return UCS_INPROGRESS;
    case State::Failed:
        /* requests still in flight end with errors (or never, when the
         * device is gone): the endpoint's status is the answer either way */
        return (flags & UCT_FLUSH_FLAG_CANCEL) ? UCS_OK : fail_status_;
    case State::Connecting:
    default:
        return UCS_ERR_NO_RESOURCE;
    }
}

/* uct_ep_flush(UCT_FLUSH_FLAG_CANCEL): the endpoint stops for good, as its
 * user asked (no error is reported); requests in flight end with
 * UCS_ERR_CANCELED as the QP in the error state flushes them, and the
 * flush completes after the last of them. Pending requests stay for the
 * user to purge. */
ucs_status_t Endpoint::cancel(uct_completion_t *comp)
{
    /* an unsignaled request that completed before the QP stops reports
     * nothing: a signaled marker after it does, whether it then completes
     * or is flushed */
    if (unsignaled() > 0) {
        if (!has_tx_resources()) {
            return UCS_ERR_NO_RESOURCE;
        }
        const ucs_status_t status = post_marker(nullptr);
        if (status != UCS_OK) {
            return status;
        }
    }
    bool completes;
    {
        iface::WireupGuard guard(*iface_);
        if (state() == State::Connected) {
            fail_status_    = UCS_ERR_CANCELED;
            error_reported_ = true;
            state_.store(State::Failed, std::memory_order_release);
            conn_->retire_qp();
            if (conn_->shared()) {
                /* the peer may send on this QP too: it learns now that the
                 * connection is gone (its requests flush), not when this
                 * endpoint is destroyed (UCP destroys a cancelled lane
                 * from a later progress) */
                conn_->disconnect();
            }
        }
        /* under the lock: while connecting, the async thread may swap the
         * connection (sharing, on_moved) */
        completes = qp_completes();
    }
    if ((outstanding() == 0) || !completes) {
        return UCS_OK;
    }
    /* the QP in the error state flushes whatever it has not completed */
    if (comp != nullptr) {
        flushes_.emplace_back(posted_sn_, comp);
    }
    return UCS_INPROGRESS;
}

ucs_status_t Endpoint::pending_add(uct_pending_req_t *req, unsigned)
{
    if (state() == State::Connected) {
        const bool queued = !ucs_queue_is_empty(&pending_) && !dispatching_;
        const bool free   = (tx_check_all() == UCS_OK);
        if (free && !queued) {
            return UCS_ERR_BUSY; /* the resources are there: retry now */
        }
        /* behind the requests queued before it, which the interface
         * dispatches as soon as there are resources */
        ucs_queue_push(&pending_, pending_elem(req));
        update_queued();
        if (free) {
            iface_->schedule_pending(this);
        } else {
            iface_->wait_for_resources(this);
        }
        return UCS_OK;
    }
    if (state() == State::Failed) {
        if (!error_reported_) {
            /* the failure is not reported yet: taken as on a live endpoint
             * (UCX's peer failure tests), for the error handler, which
             * runs next in progress, to purge */
            ucs_queue_push(&pending_, pending_elem(req));
            update_queued();
            return UCS_OK;
        }
        /* the caller retries and sees the operation's own status */
        return UCS_ERR_BUSY;
    }
    iface::WireupGuard guard(*iface_);
    const bool connecting = (state() == State::Connecting);
    if (connecting) {
        ucs_queue_push(&pending_, pending_elem(req));
        update_queued();
    }
    return connecting ? UCS_OK : UCS_ERR_BUSY;
}

void Endpoint::pending_purge(uct_pending_purge_callback_t cb, void *arg)
{
    while (!ucs_queue_is_empty(&pending_)) {
        uct_pending_req_t *req = pending_req(ucs_queue_pull_non_empty(&pending_));
        if (cb != nullptr) {
            cb(req, arg);
        }
    }
    update_queued();
}

void Endpoint::complete_flushes()
{
    while (!flushes_.empty() && (flushes_.front().first <= completed_sn_)) {
        uct_completion_t *comp = flushes_.front().second;
        flushes_.erase(flushes_.begin());
        uct_invoke_completion(comp, (state() == State::Failed) ? fail_status_ : UCS_OK);
    }
}

ucs_status_t Endpoint::check(uct_completion_t *comp)
{
    const State st = state();
    if (st == State::Failed) {
        /* known: the error handler reports it (once); the check itself
         * succeeded, as UCX's transports answer */
        return UCS_OK;
    }
    /* with a completion while connecting, the probe is kept like any
     * request made then and goes first once connected (UCX 1.22's
     * test_uct_ep_check_async.comp_during_wireup) */
    if ((st != State::Connected) && (comp == nullptr)) {
        return UCS_ERR_NO_RESOURCE; /* the connect timeout bounds this phase */
    }
    if ((outstanding() > 0) && (comp == nullptr)) {
        /* requests in flight: a dead peer fails them (RC retry timeout, or
         * UCX_XQP_PEER_TIMEOUT where the NIC never reports it) and the
         * error handler runs; a probe would say nothing more */
        return UCS_OK;
    }
    ucs_status_t status = tx_check();
    if (status != UCS_OK) {
        return status;
    }
    /* the probe: a zero-length RDMA WRITE, which the peer's HCA
     * acknowledges; a peer that is gone makes it fail with a retry error
     * after the QP's timeout, or the peer deadline, and the endpoint with
     * it */
    status = post_marker(comp);
    if (status != UCS_OK) {
        return status;
    }
    return (comp != nullptr) ? UCS_INPROGRESS : UCS_OK;
}

} // namespace xqp::ep
