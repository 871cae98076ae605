#include "wireup/connection.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace xqp::wireup {

const char *to_string(ConnState state)
{
    switch (state) {
    case ConnState::Idle:           return "idle";
    case ConnState::ResolvingAddr:  return "resolving address";
    case ConnState::ResolvingRoute: return "resolving route";
    case ConnState::Connecting:     return "connecting";
    case ConnState::Accepting:      return "accepting";
    case ConnState::Connected:      return "connected";
    case ConnState::Failed:         return "failed";
    case ConnState::Closed:         return "closed";
    case ConnState::Awaiting:       return "awaiting the peer's connection";
    case ConnState::Queued:         return "queued behind other attempts";
    }
    return "?";
}

static std::string errstr(const char *what, int err)
{
    return std::string(what) + ": " + std::strerror(err);
}

Connection::Connection(CmOps &cm, EceProvider &ece_provider, const WireupConfig &config,
                       ConnectionOwner &owner, uint32_t conn_id)
    : cm_(cm), ece_provider_(ece_provider), config_(config), owner_(&owner),
      ece_(config.ece, ece_provider), conn_id_(conn_id)
{
}

Connection::~Connection()
{
    disconnect();
    teardown(true);
}

void Connection::teardown(bool final)
{
    if (qp_ != nullptr) {
        if (final || !qp_published_) {
            cm_.destroy_qp(qp_);
            qp_ = nullptr;
        } else {
            retire_qp();
        }
    }
    if (id_ != nullptr) {
        cm_.destroy_id(id_);
        id_ = nullptr;
    }
}

void Connection::retire_qp()
{
    if ((qp_ == nullptr) || !qp_published_ || qp_retired_) {
        return;
    }
    qp_retired_     = true;
    const int err   = cm_.error_qp(qp_);
    retire_failed_  = (err != 0);
    if (err != 0) {
        owner_->on_log(*this, errstr("ibv_modify_qp(ERR)", err) +
                             ": no completions expected from the QP any more");
    }
}

void Connection::inject_failure(ucs_status_t status, const std::string &reason,
                                unsigned hold_us)
{
    if ((state_ != ConnState::Failed) && (state_ != ConnState::Closed)) {
        fail(status, reason, hold_us);
    }
}

void Connection::disconnect()
{
    if ((state_ == ConnState::Connected) && (id_ != nullptr)) {
        if (!self_) { /* a loopback has no CM connection */
            cm_.disconnect(id_);
        }
        state_ = ConnState::Closed;
    }
}

void Connection::close()
{
    disconnect();
    if (id_ != nullptr) {
        cm_.destroy_id(id_);
        id_ = nullptr;
    }
    if (state_ != ConnState::Failed) {
        state_ = ConnState::Closed;
    }
}

void Connection::fail(ucs_status_t status, const std::string &reason, unsigned hold_us)
{
    status_ = status;
    error_  = reason;
    state_  = ConnState::Failed;
    teardown();
    if (hold_us > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(hold_us));
    }
    owner_->on_failed(*this);
}

void Connection::attempt_failed(const std::string &reason)
{
    teardown();
    if (attempts_ <= config_.max_retries) {
        owner_->on_log(*this, "attempt " + std::to_string(attempts_) + " failed: " + reason +
                             "; retrying with a new cm_id");
        start_attempt();
        return;
    }
    fail(UCS_ERR_UNREACHABLE, reason + " (after " + std::to_string(attempts_) + " attempts)");
}

/* ------------------------------------------------------------------ active */

void Connection::aim(const sockaddr_storage &dst, uint32_t pair_sn, bool self)
{
    active_   = true;
    self_     = self;
    dst_      = dst;
    pair_sn_  = pair_sn;
    attempts_ = 0;
}

void Connection::connect(const sockaddr_storage &dst, uint32_t pair_sn, bool self)
{
    aim(dst, pair_sn, self);
    start_attempt();
}

void Connection::queue(const sockaddr_storage &dst, uint32_t pair_sn)
{
    aim(dst, pair_sn, false);
    state_ = ConnState::Queued;
}

void Connection::start()
{
    if (state_ == ConnState::Queued) {
        start_attempt();
    }
}

void Connection::check_timeout(double now, uint64_t peer_heard)
{
    if (!attempting() || (state_ == ConnState::Queued) || (config_.connect_timeout_s <= 0)) {
        return; /* a queued attempt has not started: its wait is the others' */
    }
    if ((attempt_start_ < 0) || (peer_heard != peer_heard_)) {
        attempt_start_ = now;
        peer_heard_    = peer_heard;
        return;
    }
    if (now - attempt_start_ > config_.connect_timeout_s) {
        char text[64];
        std::snprintf(text, sizeof(text), "no connection after %.1f s (%s)",
                      config_.connect_timeout_s, to_string(state_));
        attempt_failed(text);
    }
}

void Connection::start_attempt()
{
    ++attempts_;
    attempt_start_ = -1;
    state_  = ConnState::ResolvingAddr;
    int err = cm_.create_id(this, &id_);
    if (err != 0) {
        id_ = nullptr;
        fail(UCS_ERR_IO_ERROR, errstr("rdma_create_id", err));
        return;
    }
    err = cm_.resolve_addr(id_, reinterpret_cast<const sockaddr *>(&dst_),
                           config_.addr_timeout_ms);
    if (err != 0) {
        attempt_failed(errstr("rdma_resolve_addr", err));
    }
}

/* the hello this side sends; version 2 (sharing) carries the pair number
 * and the listener */
static Hello local_hello(const WireupConfig &config, Hello::Kind kind, uint32_t conn_id,
                         bool v2, uint32_t pair_sn)
{
    Hello hello;
    hello.kind        = kind;
    hello.conn_id     = conn_id;
    hello.iface_uuid  = config.iface_uuid;
    hello.credits     = config.credits;
    hello.max_am_size = config.max_am_size;
    if (v2) {
        hello.version  = kHelloVersionShare;
        hello.share    = true;
        hello.pair_sn  = pair_sn;
        hello.listener = config.listener;
    }
    return hello;
}

ConnParams Connection::conn_params(uint8_t *buf, Hello::Kind kind, uint32_t conn_id)
{
    /* a reply is of the request's version: a peer that sent version 1 may
     * not read version 2 */
    const bool  v2    = config_.share && ((kind == Hello::Kind::Request) ||
                                          (peer_hello_.version == kHelloVersionShare));
    Hello hello = local_hello(config_, kind, conn_id, v2, pair_sn_);
    hello.sends = v2 && (kind == Hello::Kind::Reply) && we_send_;

    ConnParams params;
    params.qp_num              = qp_->qp_num;
    params.responder_resources = config_.responder_resources;
    params.initiator_depth     = config_.initiator_depth;
    params.private_data        = buf;
    params.private_data_len    = static_cast<uint8_t>(encode(hello, buf, kHelloSizeV2));
    return params;
}

void Connection::on_route_resolved()
{
    /* ibv_create_qp -> ibv_query_ece -> rdma_set_local_ece -> rdma_connect */
    int err = cm_.create_qp(id_, QpRole::Active, &qp_);
    if (err != 0) {
        qp_ = nullptr;
        fail(UCS_ERR_NO_RESOURCE, errstr("ibv_create_qp", err));
        return;
    }
    if (self_) {
        connect_loopback();
        return;
    }
    const Offer &offer = ece_.prepare_offer(qp_);
    if (offer.fail) {
        fail(UCS_ERR_UNSUPPORTED, "ece: " + offer.reason);
        return;
    }
    if (offer.send) {
        err = cm_.set_local_ece(id_, offer.ece);
        if (err != 0) {
            fail(UCS_ERR_IO_ERROR, errstr("rdma_set_local_ece", err));
            return;
        }
    } else if (!offer.reason.empty()) {
        owner_->on_log(*this, "no ece offered: " + offer.reason);
    }
    uint8_t buf[kHelloSizeV2];
    err = cm_.connect(id_, conn_params(buf, Hello::Kind::Request, conn_id_));
    if (err != 0) {
        attempt_failed(errstr("rdma_connect", err));
        return;
    }
    state_ = ConnState::Connecting;
}

void Connection::connect_loopback()
{
    ConnParams params;
    params.qp_num              = qp_->qp_num;
    params.responder_resources = config_.responder_resources;
    params.initiator_depth     = config_.initiator_depth;
    const int err              = cm_.connect_self(id_, qp_, params);
    if (err != 0) {
        /* connect through rdma_cm to our own listener instead (not counted
         * as an attempt of its own) */
        owner_->on_log(*this, errstr("loopback QP", err) + ": connecting through rdma_cm");
        teardown();
        self_ = false;
        --attempts_;
        start_attempt();
        return;
    }
    /* the peer is this side: it reads what it would have told a peer */
    peer_hello_ = local_hello(config_, Hello::Kind::Reply, conn_id_, false, 0);
    owner_->on_log(*this, "loopback: the QP is connected to itself (no peer, no ece)");
    established();
}

bool Connection::modify_to_rts(std::string *reason)
{
    static const struct {
        ibv_qp_state state;
        const char  *name;
    } steps[] = {{IBV_QPS_INIT, "INIT"}, {IBV_QPS_RTR, "RTR"}, {IBV_QPS_RTS, "RTS"}};
    for (const auto &step : steps) {
        const int err = cm_.modify_qp(id_, qp_, step.state);
        if (err != 0) {
            *reason = std::string("ibv_modify_qp(") + step.name + "): " + std::strerror(err);
            return false;
        }
    }
    return true;
}

void Connection::on_connect_response(const CmEvent &event)
{
    std::string why;
    auto hello = decode(event.private_data.data(), event.private_data.size(), &why);
    if (!hello || (hello->kind != Hello::Kind::Reply) || (hello->conn_id != conn_id_)) {
        if (hello) {
            why = "reply does not match: " + to_string(*hello) + ", expected reply to conn " +
                  std::to_string(conn_id_);
        }
        cm_.disconnect(id_);
        fail(UCS_ERR_INVALID_ADDR, "malformed connect response from the peer: " + why);
        return;
    }
    peer_hello_ = *hello;

    /* rdma_get_remote_ece -> ibv_set_ece -> RTR/RTS -> rdma_establish */
    Ece reply;
    if (cm_.get_remote_ece(id_, &reply) != 0) {
        reply = Ece{};
    }
    const ActiveDecision decision = ece_.on_response(qp_, reply);
    if (!decision.ok) {
        cm_.disconnect(id_);
        fail(UCS_ERR_UNSUPPORTED, "ece: " + decision.reason);
        return;
    }
    if (!modify_to_rts(&why)) {
        cm_.disconnect(id_);
        fail(UCS_ERR_IO_ERROR, why);
        return;
    }
    const int err = cm_.establish(id_);
    if (err != 0) {
        cm_.disconnect(id_);
        fail(UCS_ERR_IO_ERROR, errstr("rdma_establish", err));
        return;
    }
    established();
}

void Connection::established()
{
    state_        = ConnState::Connected;
    qp_published_ = true;
    owner_->on_log(*this, std::string(active_ ? "active" : "passive") + " connection " +
                         std::to_string(conn_id_) + " established, qp " +
                         std::to_string(qp_->qp_num) + ", ece: " + to_string(ece_.result()));
    owner_->on_established(*this);
}

/* ------------------------------------------------------------------ passive */

void Connection::accept_request(const CmEvent &request, const std::optional<Hello> &hello,
                                const std::string &why, bool we_send)
{
    active_   = false;
    we_send_  = we_send;
    attempts_   = 1;
    state_    = ConnState::Accepting;
    id_       = request.id;
    id_->context = this;

    if (!hello || (hello->kind != Hello::Kind::Request)) {
        cm_.reject(id_);
        fail(UCS_ERR_INVALID_ADDR, "rejected a malformed connect request: " +
                                           (hello ? "not a request: " + to_string(*hello) : why));
        return;
    }
    peer_hello_ = *hello;
    conn_id_    = hello->conn_id;
    pair_sn_    = hello->pair_sn;

    /* ibv_create_qp -> rdma_get_remote_ece -> ibv_set_ece -> INIT/RTR/RTS
     * -> ibv_query_ece -> rdma_set_local_ece -> rdma_accept. A shared
     * connection may carry this side's sends too: a full send queue. */
    int err = cm_.create_qp(id_, shared() ? QpRole::Active : QpRole::Passive, &qp_);
    if (err != 0) {
        qp_ = nullptr;
        cm_.reject(id_);
        fail(UCS_ERR_NO_RESOURCE, errstr("ibv_create_qp", err));
        return;
    }
    Ece remote;
    if (cm_.get_remote_ece(id_, &remote) != 0) {
        remote = Ece{};
    }
    const PassiveDecision decision = ece_.on_request(qp_, remote);
    if (!decision.accept) {
        cm_.reject_ece(id_);
        reject_reason_ = kRejectEceStatus;
        fail(UCS_ERR_REJECTED, "rejected (ece): " + decision.reason);
        return;
    }
    std::string reason;
    if (!modify_to_rts(&reason)) {
        cm_.reject(id_);
        fail(UCS_ERR_IO_ERROR, reason);
        return;
    }
    const Ece reply = ece_.reply(qp_);
    if (reply.present()) {
        err = cm_.set_local_ece(id_, reply);
        if (err != 0) {
            cm_.reject(id_);
            fail(UCS_ERR_IO_ERROR, errstr("rdma_set_local_ece", err));
            return;
        }
    }
    uint8_t buf[kHelloSizeV2];
    err = cm_.accept(id_, conn_params(buf, Hello::Kind::Reply, conn_id_));
    if (err != 0) {
        fail(UCS_ERR_IO_ERROR, errstr("rdma_accept", err));
    }
}

/* ------------------------------------------------------------------ sharing */

bool Connection::is_yield(const CmEvent &event) const
{
    if (!config_.share || (event.status == kRejectEceStatus)) {
        return false;
    }
    const auto hello = decode(event.private_data.data(), event.private_data.size(), nullptr);
    return hello && (hello->kind == Hello::Kind::Yield) && (hello->pair_sn == pair_sn_);
}

int yield_request(CmOps &cm, const WireupConfig &config, const CmEvent &request,
                  const Hello &hello)
{
    const Hello yield = local_hello(config, Hello::Kind::Yield, hello.conn_id, true,
                                    hello.pair_sn);
    uint8_t buf[kHelloSizeV2];
    const int err = cm.reject_yield(request.id, buf,
                                    static_cast<uint8_t>(encode(yield, buf, sizeof(buf))));
    cm.destroy_id(request.id);
    return err;
}

/* ------------------------------------------------------------------ events */

void Connection::peer_closed(bool disconnected)
{
    if (disconnected) {
        cm_.disconnect(id_); /* completes the disconnect handshake */
    }
    state_ = ConnState::Closed;
    /* the peer closed (or died: the kernel disconnects for it): requests
     * in flight complete now, with an error, instead of after the
     * transport's retry timeout */
    retire_qp();
    owner_->on_closed(*this);
}

void Connection::on_rejected(const CmEvent &event)
{
    if (state_ == ConnState::Connected) {
        /* the passive peer destroyed its id before its ESTABLISHED came
         * (a REJ, not a DREQ): the kernel CM hands the REJ to our
         * established id, and no DISCONNECTED follows */
        peer_closed(false);
    } else if (state_ == ConnState::Accepting) {
        /* the active side rejected our REP (or destroyed its id, which
         * sends a REJ): this connection will never be established */
        reject_reason_ = event.status;
        fail(UCS_ERR_CONNECTION_RESET,
             "the peer rejected the connection while it was being accepted "
             "(reject reason " + std::to_string(event.status) + ")");
    } else if (state_ == ConnState::Connecting) {
        reject_reason_ = event.status;
        if (is_yield(event)) {
            /* the peer connects to us too, and keeps its connection:
             * ours goes, and the interface binds the endpoint to the
             * peer's when its request comes */
            teardown();
            state_         = ConnState::Awaiting;
            attempt_start_ = -1;
            owner_->on_log(*this, "the peer keeps its own connection to us: waiting for it");
        } else if (event.status == kRejectEceStatus) {
            fail(UCS_ERR_REJECTED, "the peer rejected the connection: its ece options "
                                   "cannot be met (reject reason 35)");
        } else {
            attempt_failed("the peer rejected the connection (reject reason " +
                           std::to_string(event.status) + ")");
        }
    }
}

void Connection::on_event(const CmEvent &event)
{
    switch (event.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (state_ == ConnState::ResolvingAddr) {
            state_        = ConnState::ResolvingRoute;
            const int err = cm_.resolve_route(id_, config_.route_timeout_ms);
            if (err != 0) {
                attempt_failed(errstr("rdma_resolve_route", err));
            }
        }
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (state_ == ConnState::ResolvingRoute) {
            on_route_resolved();
        }
        return;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        if (state_ == ConnState::Connecting) {
            on_connect_response(event);
        }
        return;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (state_ == ConnState::Accepting) {
            established();
        }
        return;
    case RDMA_CM_EVENT_REJECTED:
        on_rejected(event);
        return;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        if (state_ == ConnState::Accepting) {
            fail(UCS_ERR_IO_ERROR, std::string("passive connection failed: ") +
                                   rdma_event_str(event.type));
        } else if ((state_ == ConnState::ResolvingAddr) ||
                   (state_ == ConnState::ResolvingRoute) || (state_ == ConnState::Connecting)) {
            attempt_failed(std::string(rdma_event_str(event.type)) + " (status " +
                           std::to_string(event.status) + ")");
        }
        return;
    case RDMA_CM_EVENT_DISCONNECTED:
        if ((state_ == ConnState::Connected) || (state_ == ConnState::Accepting)) {
            peer_closed(true);
        }
        return;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if ((state_ != ConnState::Failed) && (state_ != ConnState::Closed)) {
            fail(UCS_ERR_ENDPOINT_TIMEOUT, "rdma device removed");
        }
        return;
    default:
        owner_->on_log(*this, std::string("ignoring ") + rdma_event_str(event.type) +
                             " in state " + to_string(state_));
        return;
    }
}

} // namespace xqp::wireup
