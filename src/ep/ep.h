/*
 * xqp - an endpoint: the active side of one RC connection to a peer
 * interface.
 *
 * uct_ep_create returns at once; the connection proceeds asynchronously
 * (wireup/connection.h, driven by the interface's rdma_cm events). Until it
 * is established, operations are accepted as they would be on the wire
 * (same send queue and TxOp limits, UCS_ERR_NO_RESOURCE beyond them) and
 * kept in order, with copies of their inline data (ep_deferred.cc); they
 * are posted, before anything newer, as soon as the connection is up, or
 * end with the endpoint's status when it fails. Pending requests queue up
 * behind them and are dispatched from the worker's progress once the
 * connection is up, the way uct_tcp behaves. While requests are queued, nothing overtakes
 * them: new operations return UCS_ERR_NO_RESOURCE, a flush waits for them
 * (UCS_ERR_NO_RESOURCE, then pending_add) and pending_add queues behind
 * them. A connection that fails for good makes every
 * operation return its status and is reported to the interface's error
 * handler.
 */
#ifndef XQP_EP_EP_H
#define XQP_EP_EP_H

#include "compat/ucx.h"
#include "iface/iface.h"
#include "wireup/connection.h"

#include <atomic>
#include <deque>
#include <memory>
#include <vector>

namespace xqp::ep {

class Endpoint final : public iface::ConnUser {
public:
    struct Handle {
        uct_base_ep_t super;
        Endpoint     *owner;
    };

    enum class State { Connecting, Connected, Failed };

    Endpoint(iface::Iface *iface, const sockaddr_storage &dst);
    ~Endpoint() override;
    Endpoint(const Endpoint &) = delete;
    Endpoint &operator=(const Endpoint &) = delete;

    /* nullptr when ep is not an xqp endpoint */
    static Endpoint *from(uct_ep_h ep);
    static Endpoint *from_unchecked(uct_ep_h ep)
    {
        return reinterpret_cast<Handle *>(ep)->owner;
    }

    uct_ep_h handle() { return &handle_.super.super; }
    State state() const { return state_.load(std::memory_order_acquire); }

    ucs_status_t flush(unsigned flags, uct_completion_t *comp);
    /* flush with UCT_FLUSH_FLAG_CANCEL on a connected endpoint */
    ucs_status_t cancel(uct_completion_t *comp);
    void fence() { slow_ |= kFence; }
    /* requests posted and not yet known to be complete */
    unsigned outstanding() const { return static_cast<unsigned>(posted_sn_ - completed_sn_); }
    uint64_t completed_sn() const { return completed_sn_; }
    /* the requests in flight are no longer counted (Iface::abandon has
     * taken them over); returns the sequence number of the last one */
    uint64_t forget_in_flight()
    {
        completed_sn_ = posted_sn_;
        return posted_sn_;
    }
    /* completions may still come for what was posted (main thread, after
     * conn_->close(): the connection no longer changes under it) */
    bool qp_completes() const { return conn_->qp_completes(); }
    /* wireup lock held: its connection is being attempted */
    bool attempting() const { return conn_->attempting(); }

    /* data operations (main thread) */
    ucs_status_t put_short(const void *buffer, unsigned length, uint64_t remote_addr,
                           uct_rkey_t rkey);
    ssize_t put_bcopy(uct_pack_callback_t pack_cb, void *arg, uint64_t remote_addr,
                      uct_rkey_t rkey);
    ucs_status_t put_zcopy(const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                           uct_rkey_t rkey, uct_completion_t *comp);
    ucs_status_t get_bcopy(uct_unpack_callback_t unpack_cb, void *arg, size_t length,
                           uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp);
    ucs_status_t get_zcopy(const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                           uct_rkey_t rkey, uct_completion_t *comp);
    ucs_status_t am_short(uint8_t id, uint64_t header, const void *payload, unsigned length);
    ucs_status_t am_short_iov(uint8_t id, const uct_iov_t *iov, size_t iovcnt);
    ssize_t am_bcopy(uint8_t id, uct_pack_callback_t pack_cb, void *arg);
    ucs_status_t am_zcopy(uint8_t id, const void *header, unsigned header_length,
                          const uct_iov_t *iov, size_t iovcnt, uct_completion_t *comp);
    ucs_status_t atomic64(ibv_wr_opcode opcode, uint64_t compare_add, uint64_t swap,
                          uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                          uct_completion_t *comp);

    /* the request with sequence number sn completed, and with it every
     * request posted before it */
    void on_send_completion(uint64_t sn)
    {
        if (sn <= completed_sn_) {
            /* retired already by a later completion (cannot happen: in
             * order); its TxOp and buffer came back all the same */
            iface_->tx_completed(0);
            return;
        }
        iface_->tx_completed(sn - completed_sn_);
        completed_sn_ = sn; /* returns the send queue slots of those up to sn */
        if (ucs_unlikely(!flushes_.empty())) {
            complete_flushes();
        }
    }
    /* a request of this endpoint completed with an error: fails the
     * endpoint unless it failed already; returns the status to report */
    ucs_status_t completion_error(ucs_status_t status, ibv_wc_status wc_status);
    /* the data path's QP: nullptr until the connection is established, then
     * fixed until the endpoint is destroyed (wireup::Connection never frees
     * a published QP before that), unless the endpoint connects again with
     * nothing in flight (after_peer_closed) */
    ibv_qp *qp() const { return (state() != State::Connecting) ? qp_ : nullptr; }
    /* whether this endpoint's data QP has number qp_num */
    bool has_qp(uint32_t qp_num) const
    {
        const ibv_qp *q = qp();
        return (q != nullptr) && (q->qp_num == qp_num);
    }
    /* the status a request that completed with status ends with: a flush
     * error of a failed endpoint reports why the endpoint failed */
    ucs_status_t completion_status(ucs_status_t status) const
    {
        return ((status == UCS_ERR_CANCELED) && (state() == State::Failed)) ? fail_status_ :
                                                                              status;
    }
    /* the connection the endpoint sends on (wireup lock held) */
    wireup::Connection &connection() { return *conn_; }
    /* test hook (xqp_ep_inject_failure): fails the connection as an rdma_cm
     * error on the async thread would; callable from any thread */
    void inject_failure(ucs_status_t status, unsigned hold_us);
    bool has_pending() const { return !compat::queue_is_empty(&pending_); }
    /* runs pending requests while resources last; returns how many ran */
    unsigned dispatch();
    /* uct_ep_check: the status when known, otherwise a probe on the wire */
    ucs_status_t check(uct_completion_t *comp);
    ucs_status_t pending_add(uct_pending_req_t *req, unsigned flags);
    void pending_purge(uct_pending_purge_callback_t cb, void *arg);

    void wireup_info(xqp_wireup_info_t *info) const;
    /* whether this endpoint connects to the listener at dst */
    bool connects_to(const sockaddr_storage &dst) const;
    /* from the interface's timer (async thread, wireup lock held) */
    void check_timeout(double now);
    /* the peer deadline (Iface::watch_peers, main thread): requests in
     * flight that saw no completion for timeout fail the endpoint with
     * UCS_ERR_ENDPOINT_TIMEOUT; restart: the interface was not progressed
     * for a while, the count begins again at now */
    void watch(ucs_time_t now, ucs_time_t timeout, bool restart);

    /* iface::ConnUser (called with the wireup lock held) */
    void on_established(wireup::Connection &conn) override;
    void on_failed(wireup::Connection &conn) override;
    void on_closed(wireup::Connection &conn) override;
    void on_log(wireup::Connection &conn, const std::string &line) override;
    void on_moved(wireup::Connection &conn) override;

private:
    void schedule_progress();
    /* a send queue slot, a TxOp and an interface credit, whatever the
     * connection's state */
    bool has_tx_resources() const
    {
        return (outstanding() < tx_queue_len_) && iface_->has_free_op() &&
               iface_->has_tx_credit();
    }
    /* UCS_OK when a request can be posted now (or deferred, while the
     * connection is being established). The common case is one test of
     * the state, of slow_ and of each resource; everything else is
     * tx_check_slow's. */
    bool tx_ready(State st) const
    {
        return (st == State::Connected) && !(slow_ & (kDeferring | kQueued)) &&
               (outstanding() < tx_queue_len_) && iface_->tx_credit_ample() &&
               iface_->has_free_op();
    }
    ucs_status_t tx_check()
    {
        const State st = state();
        return ucs_likely(tx_ready(st)) ? UCS_OK : tx_check_slow(st);
    }
    /* the rare cases: connecting, failed, deferred requests to post,
     * requests queued ahead, resources short or nearly short */
    ucs_status_t tx_check_slow(State st);
    /* tx_check_slow's answer for a request that may go now: near the
     * interface's bound it is signaled (kSignal) */
    ucs_status_t tx_grant()
    {
        if (iface_->tx_credit_low()) {
            slow_ |= kSignal;
        }
        return UCS_OK;
    }
    /* pending requests are queued ahead of new ones (kQueued) unless
     * dispatch() is running them: after every change of either */
    void update_queued()
    {
        if (!ucs_queue_is_empty(&pending_) && !dispatching_) {
            slow_ |= kQueued;
        } else {
            slow_ &= ~kQueued;
        }
    }
    /* UCS_OK when any request, buffered ones included, can be posted now */
    ucs_status_t tx_check_all();
    /* requests made while connecting (ep_deferred.cc, main thread): keeps a
     * copy of wr, its scatter/gather list and its inline data; 0 or errno */
    int defer(const ibv_send_wr &wr);
    /* the connection is up: posts them in order; returns how many */
    unsigned post_deferred();
    /* they will never be posted: each ends with status */
    void fail_deferred(ucs_status_t status);
    /* posts wr with op as its completion context (signaled); op nullptr:
     * nothing to finish, posted unsignaled unless the moderation asks for a
     * completion now. Inlined into each operation. */
    inline ucs_status_t post(ibv_send_wr *wr, iface::TxOp *op);
    /* post() with a fence, a forced signal or a deferral to apply */
    ucs_status_t post_slow(ibv_send_wr *wr, iface::TxOp *op);
    /* the flushes the requests completed so far satisfy */
    void complete_flushes();
    /* wr_id and signaling of a request numbered posted_sn_ + 1 */
    void prepare(ibv_send_wr *wr, iface::TxOp *op) const
    {
        if (op != nullptr) {
            op->ep          = const_cast<Endpoint *>(this);
            op->sn          = posted_sn_ + 1;
            wr->wr_id       = reinterpret_cast<uintptr_t>(op);
            wr->send_flags |= IBV_SEND_SIGNALED;
        } else {
            wr->wr_id = ((posted_sn_ + 1) << 1) | 1;
        }
    }
    /* the request is on the QP (or deferred): the accounting */
    void posted(const iface::TxOp *op)
    {
        sig_countdown_ = (op != nullptr) ? tx_moderation_ : (sig_countdown_ - 1);
        ++posted_sn_;
        iface_->tx_posted();
    }
    /* ibv_post_send failed: says so and returns op's resources */
    ucs_status_t post_failed(int ret, iface::TxOp *op);
    /* a signaled zero-length RDMA WRITE: completes the requests before it */
    ucs_status_t post_marker(uct_completion_t *comp);
    /* the destructor's two ways: the connection ends with the endpoint, or
     * (shared, and the peer may still send on it) it outlives it */
    void close_connection();
    void hand_over_connection();
    /* the requests in flight complete (or are flushed), so that reaping
     * returns the resources they hold */
    bool reaps_resources() const;
    /* sharing (main thread): the peer closed the connection it opened and
     * this endpoint took (on_closed). Having sent nothing but its bound
     * notice, the endpoint connects again on its own; otherwise it fails.
     * False while it waits for the notice's completion. */
    bool after_peer_closed();
    /* completion_error's answer meanwhile (wireup lock held): the notice's
     * flush loses nothing; a request of ours fails the endpoint, as the
     * peer's close would have */
    ucs_status_t peer_closed_error(ucs_status_t status, ibv_wc_status wc_status);
    /* sharing's notices to the peer (iface/conn_table.h), signaled: imm is
     * iface::kBoundImm or iface::kReleaseImm */
    ucs_status_t post_notice(uint32_t imm);
    /* the bound notice (main thread): now, or from dispatch() when there is
     * no room for it yet or the endpoint was bound on the async thread */
    void announce_bound();
    /* the inline operations after their checks; the _slow variants, out of
     * line, run tx_check_slow first, so that the common case saves no
     * registers for a call it does not make */
    inline ucs_status_t put_short_post(const void *buffer, unsigned length,
                                       uint64_t remote_addr, uct_rkey_t rkey);
    ucs_status_t put_short_slow(const void *buffer, unsigned length, uint64_t remote_addr,
                                uct_rkey_t rkey);
    inline ucs_status_t am_short_post(uint8_t id, uint64_t header, const void *payload,
                                      unsigned length);
    ucs_status_t am_short_slow(uint8_t id, uint64_t header, const void *payload,
                               unsigned length);
    /* packs into a bounce buffer and posts wr (opcode set by the caller) */
    ssize_t bcopy(uct_pack_callback_t pack_cb, void *arg, ibv_send_wr *wr);
    /* RDMA WRITE / READ of registered iov entries */
    ucs_status_t rdma_zcopy(ibv_wr_opcode opcode, const uct_iov_t *iov, size_t iovcnt,
                            uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp);
    /* one work request of the list sge (the whole request, or a piece) */
    inline ucs_status_t post_rdma(ibv_wr_opcode opcode, ibv_sge *sge, int num_sge,
                                  size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                                  uct_completion_t *comp);
    /* a long one (ep/pieces.h), from its scatter/gather list */
    ucs_status_t rdma_zcopy_pieces(ibv_wr_opcode opcode, const ibv_sge *sge, int num_sge,
                                   size_t total, uint64_t remote_addr, uct_rkey_t rkey,
                                   uct_completion_t *comp);
    /* room for two more requests on the common path: a piece and the last */
    bool has_room_for_two() const
    {
        return (outstanding() + 2 <= tx_queue_len_) && iface_->tx_credit_for(2) &&
               iface_->has_free_ops(2);
    }

    Handle              handle_;
    iface::Iface       *iface_;
    sockaddr_storage    dst_;
    /* the connection the endpoint sends on, in its interface's table: its
     * own, or (sharing) one the peer opened (!conn_->active()) */
    wireup::Connection *conn_  = nullptr;
    /* the bound notice is still to be sent: set under the wireup lock
     * while connecting, read by dispatch() once connected */
    bool                announce_owed_ = false;
    /* the bound notice's sequence number (main thread; 0: none posted) */
    uint64_t            notice_sn_ = 0;
    /* the peer closed the connection it opened and we took: set by the
     * async thread (on_closed), cleared by after_peer_closed() */
    std::atomic<bool>   peer_closed_{false};
    /* the endpoint connects again after that (wireup lock) */
    bool                reconnecting_ = false;
    /* written once per connection, under the wireup lock, before state_
     * leaves Connecting (release); read by the data path after it sees that
     * (acquire) */
    ibv_qp             *qp_ = nullptr;
    std::atomic<State>  state_{State::Connecting};
    ucs_status_t        fail_status_ = UCS_OK;
    bool                error_reported_ = false;
    ucs_queue_head_t    pending_;
    /* send queue accounting (main thread): requests are numbered 1, 2, ...
     * as posted; the send queue holds those after completed_sn_ */
    uint64_t            posted_sn_   = 0;
    uint64_t            completed_sn_ = 0;
    /* requests until the next one that is signaled unasked: tx_moderation_
     * right after a signaled one */
    unsigned            sig_countdown_ = 1;
    /* requests posted since the last signaled one */
    unsigned unsignaled() const { return tx_moderation_ - sig_countdown_; }
    /* the peer deadline's last look (watch): completed_sn_ then, and since
     * when no request completed (0: nothing was in flight) */
    uint64_t            watch_sn_    = 0;
    ucs_time_t          watch_since_ = 0;
    /* copies of the interface's limits, read on every request */
    uint32_t            tx_queue_len_  = 0;
    unsigned            tx_moderation_ = 1;
    size_t              max_inline_    = 0;
    /* why a request cannot take the common path (main thread): tx_check
     * tests kDeferring and kQueued, post() all of them */
    enum : uint32_t {
        kDeferring = 1u << 0, /* requests made while connecting are kept */
        kQueued    = 1u << 1, /* pending requests wait ahead of new ones */
        kFence     = 1u << 2, /* the next request is fenced */
        kSignal    = 1u << 3, /* the next request is signaled (credits low) */
    };
    uint32_t            slow_ = 0;
    /* the inline operations post prebuilt requests, as UCX's rc_verbs does:
     * per call only the data, the remote address and the AM id are set */
    ibv_sge             put_inl_sge_    = {};
    ibv_send_wr         put_inl_wr_     = {};
    ibv_sge             am_inl_sge_[2]  = {};
    ibv_send_wr         am_inl_wr_      = {};
    /* a request made while connecting, kept until the QP can take it */
    struct Deferred {
        ibv_send_wr          wr;
        ibv_sge              sge[8];
        std::vector<uint8_t> inline_data; /* the bytes of an inline request */
    };
    /* requests are deferred (kDeferring, main thread) from the first one
     * made while connecting until all of them are posted or failed */
    bool deferring() const { return (slow_ & kDeferring) != 0; }
    std::deque<Deferred> deferred_;
    bool                destroying_  = false;
    /* dispatch() is running this endpoint's pending requests */
    bool                dispatching_ = false;
    /* flush completions, in posting order: (sequence to reach, completion) */
    std::vector<std::pair<uint64_t, uct_completion_t *>> flushes_;
};

/* uct_iface_ops_t entries */
ucs_status_t ep_create(const uct_ep_params_t *params, uct_ep_h *ep_p);
void ep_destroy(uct_ep_h ep);
/* for UCX's uct_ep_is_connected (compat::iface_internal_ops) */
int ep_is_connected(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                    const uct_iface_addr_t *iface_addr);
ucs_status_t ep_flush(uct_ep_h ep, unsigned flags, uct_completion_t *comp);
ucs_status_t ep_fence(uct_ep_h ep, unsigned flags);
ucs_status_t ep_check(uct_ep_h ep, unsigned flags, uct_completion_t *comp);
ucs_status_t ep_pending_add(uct_ep_h ep, uct_pending_req_t *req, unsigned flags);
void ep_pending_purge(uct_ep_h ep, uct_pending_purge_callback_t cb, void *arg);
ucs_status_t ep_put_short(uct_ep_h ep, const void *buffer, unsigned length,
                          uint64_t remote_addr, uct_rkey_t rkey);
ssize_t ep_put_bcopy(uct_ep_h ep, uct_pack_callback_t pack_cb, void *arg,
                     uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t ep_put_zcopy(uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                          uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t ep_get_bcopy(uct_ep_h ep, uct_unpack_callback_t unpack_cb, void *arg,
                          size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                          uct_completion_t *comp);
ucs_status_t ep_get_zcopy(uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                          uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t ep_am_short(uct_ep_h ep, uint8_t id, uint64_t header, const void *payload,
                         unsigned length);
ucs_status_t ep_am_short_iov(uct_ep_h ep, uint8_t id, const uct_iov_t *iov, size_t iovcnt);
ssize_t ep_am_bcopy(uct_ep_h ep, uint8_t id, uct_pack_callback_t pack_cb, void *arg,
                    unsigned flags);
ucs_status_t ep_am_zcopy(uct_ep_h ep, uint8_t id, const void *header, unsigned header_length,
                         const uct_iov_t *iov, size_t iovcnt, unsigned flags,
                         uct_completion_t *comp);
ucs_status_t ep_atomic_cswap64(uct_ep_h ep, uint64_t compare, uint64_t swap,
                               uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                               uct_completion_t *comp);
ucs_status_t ep_atomic64_post(uct_ep_h ep, unsigned opcode, uint64_t value,
                              uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t ep_atomic64_fetch(uct_ep_h ep, unsigned opcode, uint64_t value, uint64_t *result,
                               uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp);

} // namespace xqp::ep

#endif
