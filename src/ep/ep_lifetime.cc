/*
 * xqp - an endpoint's life and its connection, which its interface's table
 * holds (iface/conn_table.h): creation (a connection of its own, or with
 * sharing the one the peer opened), destruction (the connection closes with
 * the endpoint, or, when the peer sends on it, stays with the table after a
 * release notice), and what the connection reports (the iface::ConnUser
 * callbacks, on the async thread). The data path is in ep.cc.
 */
#include "ep/ep.h"

#include "iface/address.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace xqp::ep {

Endpoint::Endpoint(iface::Iface *iface, const sockaddr_storage &dst)
    : handle_{}, iface_(iface), dst_(dst)
{
    ucs_queue_head_init(&pending_);
    tx_queue_len_            = iface->tx_queue_len();
    tx_moderation_           = iface->tx_moderation();
    sig_countdown_           = tx_moderation_;
    max_inline_              = iface->max_inline();
    put_inl_wr_.sg_list      = &put_inl_sge_;
    put_inl_wr_.num_sge      = 1;
    am_inl_wr_.sg_list       = am_inl_sge_;
    am_inl_sge_[0].length    = sizeof(uint64_t); /* the AM header */
    handle_.owner            = this;
    ucs_status_t status = UCS_CLASS_INIT(uct_base_ep_t, &handle_.super, iface->base());
    if (status != UCS_OK) {
        throw Error(status, "cannot initialize the base endpoint");
    }
    iface::WireupGuard guard(*iface_);
    status = iface_->arm_timer(); /* it times the attempts out */
    if (status != UCS_OK) {
        UCS_CLASS_CLEANUP(uct_base_ep_t, &handle_.super);
        throw Error(status, "cannot add the connection timer");
    }
    conn_ = &iface_->conns().open(*this, dst_, iface_->next_conn_id());
    if (!conn_->active() && (conn_->state() == wireup::ConnState::Connected)) {
        /* sharing: the peer opened it, and it is up */
        qp_ = conn_->qp();
        state_.store(State::Connected, std::memory_order_release);
    } /* otherwise the table passes on_established on */
    iface_->add_ep(this); /* the interface's timer walks its endpoints */
    if (!conn_->active()) {
        /* the peer learns that we send on its connection: it must not
         * close it when its own endpoint goes (iface/conn_table.h) */
        announce_bound();
    }
}

Endpoint::~Endpoint()
{
    if (deferring()) {
        fail_deferred(UCS_ERR_CANCELED); /* never on the wire */
    }
    bool hand_over;
    {
        /* a shared connection the peer sends on outlives the endpoint
         * (iface/conn_table.h) */
        iface::WireupGuard guard(*iface_);
        hand_over = conn_->shared() && (state() == State::Connected) &&
                    (conn_->state() == wireup::ConnState::Connected) && !conn_->qp_retired() &&
                    iface_->conns().peer_sends(*conn_);
    }
    if (hand_over) {
        hand_over_connection();
    } else {
        close_connection();
    }
    if (outstanding() > 0) {
        /* what never completed (the device is gone, or the drain timed
         * out) no longer counts against the interface */
        iface_->tx_completed(outstanding());
        completed_sn_ = posted_sn_;
    }
    for (auto &[sn, comp] : flushes_) {
        uct_invoke_completion(comp, UCS_ERR_CANCELED);
    }
    flushes_.clear();
    {
        /* after the drain: the table destroys the connection, or keeps it
         * while the peer sends on it */
        iface::WireupGuard guard(*iface_);
        iface_->conns().release(*conn_);
        conn_ = nullptr;
    }
    UCS_CLASS_CLEANUP(uct_base_ep_t, &handle_.super);
}

void Endpoint::close_connection()
{
    if ((unsignaled() > 0) && (outstanding() > 0) && !has_tx_resources() && reaps_resources()) {
        /* the marker below needs a send queue slot, a TxOp and a credit:
         * signaled requests in flight (this endpoint's, or near the
         * interface's bound anybody's) return them, completed or, on a
         * failed connection's QP, flushed */
        const bool failed = (state() == State::Failed);
        iface_->reap_until([this, failed] {
            return has_tx_resources() || (outstanding() == 0) ||
                   (!failed && (state() != State::Connected));
        });
    }
    {
        iface::WireupGuard guard(*iface_);
        destroying_ = true;
        iface_->remove_ep(this); /* also from the dispatch lists */
        /* after this no rdma_cm event or timer reaches the connection: the
         * async thread may run again as soon as the lock is released */
        conn_->close();
        /* requests still in flight end with a flush error: collect them before
         * the QP (owned by the connection) is destroyed. Unsignaled ones that
         * already completed report nothing: a marker after them does. */
        if ((outstanding() > 0) && (qp() != nullptr)) {
            if ((unsignaled() > 0) && has_tx_resources()) {
                post_marker(nullptr); /* on a failed QP it completes with a flush error */
            }
            conn_->retire_qp();
        }
    }
    iface_->drain(this);
}

bool Endpoint::reaps_resources() const
{
    switch (state()) {
    case State::Connected:
        return true;
    case State::Failed: {
        /* the peer went first, or the connection failed: its QP flushes
         * every request, unless the device is gone */
        iface::WireupGuard guard(*iface_);
        return qp_completes();
    }
    default:
        return false;
    }
}

void Endpoint::hand_over_connection()
{
    /* the release notice after the requests in flight tells the peer (RC
     * keeps the order) */
    if (!has_tx_resources()) {
        iface_->reap_until([this] { return has_tx_resources() || (state() != State::Connected); });
    }
    {
        iface::WireupGuard guard(*iface_);
        destroying_ = true;
        iface_->remove_ep(this);
    }
    if ((state() == State::Connected) && has_tx_resources()) {
        post_notice(iface::kReleaseImm);
    }
    /* the connection stays up, and its requests complete when the peer
     * takes them: a peer that does not progress now (UCX's
     * test_uct_pending.pending_ucs_ok_dc_arbiter_bug) is not waited for */
    iface_->abandon(this);
}

Endpoint *Endpoint::from(uct_ep_h ep)
{
    if ((ep == nullptr) || (iface::Iface::from(ep->iface) == nullptr)) {
        return nullptr;
    }
    return from_unchecked(ep);
}

/* The endpoint's identity is its destination, whatever the state of its
 * connection: UCP asks to find the lane that leads to an address. */
bool Endpoint::connects_to(const sockaddr_storage &dst) const
{
    if (dst.ss_family != dst_.ss_family) {
        return false;
    }
    if (dst.ss_family == AF_INET) {
        const auto &a = reinterpret_cast<const sockaddr_in &>(dst);
        const auto &b = reinterpret_cast<const sockaddr_in &>(dst_);
        return (a.sin_port == b.sin_port) && (a.sin_addr.s_addr == b.sin_addr.s_addr);
    }
    const auto &a = reinterpret_cast<const sockaddr_in6 &>(dst);
    const auto &b = reinterpret_cast<const sockaddr_in6 &>(dst_);
    return (a.sin6_port == b.sin6_port) &&
           (std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof(a.sin6_addr)) == 0);
}

/* ------------------------------------------------------------------ wireup */

void Endpoint::on_established(wireup::Connection &conn)
{
    reconnecting_ = false;
    qp_ = conn.qp();
    state_.store(State::Connected, std::memory_order_release);
    schedule_progress();
}

void Endpoint::on_failed(wireup::Connection &conn)
{
    /* a peer that refuses us again after it closed: it is gone */
    fail_status_ = reconnecting_ ? UCS_ERR_ENDPOINT_TIMEOUT : conn.status();
    state_.store(State::Failed, std::memory_order_release);
    ucs_debug("xqp: ep %p to %s failed: %s", this, iface::to_string(dst_).c_str(),
              conn.error().c_str());
    schedule_progress();
}

void Endpoint::on_closed(wireup::Connection &conn)
{
    if (!conn.active() && (state() == State::Connected)) {
        /* sharing: the peer closed the connection it opened and we took,
         * maybe before it read our bound notice (the race of
         * iface/conn_table.h). The main thread decides, from what this
         * endpoint posted (after_peer_closed). */
        peer_closed_.store(true, std::memory_order_release);
        schedule_progress();
        return;
    }
    /* the peer disconnected (or died: the kernel disconnects for it); the
     * connection retired the QP, so requests in flight end now. A peer
     * that is gone is UCS_ERR_ENDPOINT_TIMEOUT, as uct_tcp and rc_verbs
     * report it: UCP's failed lanes answer every later request with that
     * status, and the error handler must have seen the same one. */
    fail_status_ = UCS_ERR_ENDPOINT_TIMEOUT;
    state_.store(State::Failed, std::memory_order_release);
    schedule_progress();
}

bool Endpoint::after_peer_closed()
{
    iface::WireupGuard guard(*iface_);
    if (destroying_ || (state() != State::Connected)) {
        peer_closed_.store(false, std::memory_order_relaxed);
        return true;
    }
    const bool only_notice = (posted_sn_ == notice_sn_);
    if (only_notice && (outstanding() > 0) && conn_->qp_completes()) {
        /* the notice is in flight: the retired QP flushes it, and its
         * completion returns resources, after which dispatch() comes back */
        iface_->wait_for_resources(this);
        return false;
    }
    peer_closed_.store(false, std::memory_order_relaxed);
    if (!only_notice || (outstanding() > 0)) {
        /* our requests went on it (they reached the peer's interface, or
         * end with the endpoint's status): the peer's close ends it */
        fail_status_ = UCS_ERR_ENDPOINT_TIMEOUT;
        state_.store(State::Failed, std::memory_order_release);
        return true;
    }
    /* nothing but the notice went: the peer may have closed before it read
     * that we send. The endpoint connects again, with a connection of its
     * own (nothing of the user's is lost or repeated); a peer that is gone
     * refuses it, and the endpoint fails then. */
    ucs_debug("xqp: ep %p to %s: the peer closed the connection we shared before it knew "
              "we send on it: connecting again", this, iface::to_string(dst_).c_str());
    wireup::Connection &old = *conn_;
    state_.store(State::Connecting, std::memory_order_release);
    qp_            = nullptr;
    announce_owed_ = false;
    reconnecting_  = true;
    if (iface_->arm_timer() != UCS_OK) {
        ucs_warn("xqp: ep %p to %s: cannot add the connection timer", this,
                 iface::to_string(dst_).c_str());
    }
    conn_ = &iface_->conns().open(*this, dst_, iface_->next_conn_id(), false);
    iface_->conns().release(old);
    return true;
}

ucs_status_t Endpoint::peer_closed_error(ucs_status_t status, ibv_wc_status wc_status)
{
    ucs_debug("xqp: ep %p: a request ended with %s after the peer closed the connection", this,
              ibv_wc_status_str(wc_status));
    if (posted_sn_ == notice_sn_) {
        return status; /* the bound notice: after_peer_closed() decides */
    }
    if (state() != State::Failed) {
        fail_status_ = UCS_ERR_ENDPOINT_TIMEOUT;
        state_.store(State::Failed, std::memory_order_release);
        schedule_progress();
    }
    return fail_status_;
}

/* the peer deadline's floor on a live link's rate, in bytes per second */
constexpr double kMinPeerRate = 1024.0 * 1024.0;

void Endpoint::watch(ucs_time_t now, ucs_time_t timeout, bool restart)
{
    if ((state() != State::Connected) || (outstanding() == 0)) {
        watch_since_ = 0;
        return;
    }
    if ((watch_since_ == 0) || (completed_sn_ != watch_sn_) || restart) {
        watch_sn_    = completed_sn_; /* a completion since the last look */
        watch_since_ = now;
        return;
    }
    const ucs_time_t quiet = now - watch_since_;
    if (quiet < timeout) {
        /* requests that need no completion complete with the next one that
         * does: a probe behind them, so that a live peer always answers */
        if ((unsignaled() > 0) && (tx_check() == UCS_OK)) {
            (void)post_marker(nullptr);
        }
        return;
    }
    /* a large request takes time of its own: one second more per MiB in
     * flight (a live link moves at least kMinPeerRate). Counted only once
     * the deadline has passed: it walks every TxOp. */
    const double bytes = static_cast<double>(iface_->bytes_in_flight(this, completed_sn_));
    if (quiet < timeout + ucs_time_from_sec(bytes / kMinPeerRate)) {
        return;
    }
    char why[192];
    std::snprintf(why, sizeof(why),
                  "%u requests in flight (%.0f bytes) and none completed for %.1f s "
                  "(UCX_XQP_PEER_TIMEOUT): the peer is gone or takes no messages",
                  outstanding(), bytes, ucs_time_to_sec(quiet));
    iface::WireupGuard guard(*iface_);
    if (!destroying_ && (state() == State::Connected)) {
        ucs_diag("xqp: ep %p to %s: %s", this, iface::to_string(dst_).c_str(), why);
        /* the QP goes to the error state: its requests are flushed and
         * end with the endpoint's status; the error handler runs once */
        conn_->inject_failure(UCS_ERR_ENDPOINT_TIMEOUT, why, 0);
    }
}

void Endpoint::inject_failure(ucs_status_t status, unsigned hold_us)
{
    iface::WireupGuard guard(*iface_);
    if (!destroying_) {
        conn_->inject_failure(status, "failure injected (test hook)", hold_us);
    }
}

void Endpoint::on_moved(wireup::Connection &conn)
{
    /* the data path never saw the attempt's QP (the endpoint is still
     * connecting): the table destroyed it with its cm_id */
    ucs_debug("xqp: ep %p to %s: the peer connects to us at the same time: using its "
              "connection", this, iface::to_string(dst_).c_str());
    conn_          = &conn;
    announce_owed_ = true; /* dispatch() sends it once connected */
}

void Endpoint::check_timeout(double now)
{
    /* wireup lock held (the interface's timer) */
    iface_->conns().check_timeout(*conn_, now);
}

void Endpoint::on_log(wireup::Connection &, const std::string &line)
{
    ucs_debug("xqp: ep %p to %s: %s", this, iface::to_string(dst_).c_str(), line.c_str());
}

void Endpoint::schedule_progress()
{
    /* wireup lock held (async thread, or completion_error): pending requests
     * and error handlers run in the application's progress, where the
     * interface dispatches the endpoints listed here. A dying endpoint
     * schedules nothing. */
    if (!destroying_) {
        iface_->schedule_dispatch(this);
    }
}

void Endpoint::wireup_info(xqp_wireup_info_t *info) const
{
    iface::WireupGuard guard(*iface_);
    iface::fill_wireup_info(*conn_, info);
}

} // namespace xqp::ep
