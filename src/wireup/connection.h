/*
 * xqp - the wireup state machine of one RC connection (active or passive).
 *
 * It drives rdma_cm and the ECE negotiation in the order of
 * rdma_set_local_ece(3) / rdma_get_remote_ece(3), through the CmOps and
 * EceProvider seams. The owner (an endpoint for the active side, the
 * interface for the passive side) feeds it the rdma_cm events of its id and
 * hears about the outcome through ConnectionOwner.
 *
 *   active:  Idle [-> Queued] -> ResolvingAddr -> ResolvingRoute -> Connecting
 *            -> Connected (Queued: the owner starts it when one of its other
 *             attempts in flight ends, see in_flight())
 *            (each failure before Connected retries with a fresh cm_id and QP,
 *             at most max_retries times; an ECE reject is final)
 *            sharing: Connecting -> Awaiting when the peer, connecting to
 *            us at the same time, keeps its own connection (a yield reject);
 *            the interface then binds the endpoint to the peer's, or, after
 *            connect_timeout_s without it, the attempt is retried
 *   passive: Accepting -> Connected      (or Failed after a reject)
 *   both:    Connected -> Closed on DISCONNECTED (or, active, on a REJ
 *            from a peer that closed before its ESTABLISHED); Failed on errors
 *
 * The data QP and threads: once a connection is established its QP belongs
 * to the data path, which posts to it and polls its completions on the
 * application's thread without the wireup lock. From then on nothing but
 * the destructor destroys the QP: a failure, a disconnect or close() only
 * moves it to the error state (retire), so that a request posted at that
 * very moment fails with a flush error instead of touching freed memory.
 * Before it is established the data path never sees the QP, and a failed
 * attempt destroys it at once. doc/threads.md has the whole table.
 */
#ifndef XQP_WIREUP_CONNECTION_H
#define XQP_WIREUP_CONNECTION_H

#include "wireup/cm_ops.h"
#include "wireup/ece.h"
#include "wireup/private_data.h"

#include <ucs/type/status.h>

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xqp::wireup {

/* The CM's reject status for "ECE options not supported" (rdma_reject_ece). */
constexpr int kRejectEceStatus = 35;

struct WireupConfig {
    EcePolicy ece;
    int       addr_timeout_ms  = 2000;
    int       route_timeout_ms = 2000;
    /* one attempt (resolve + connect) may take this long; 0: no limit */
    double    connect_timeout_s = 0;
    unsigned  max_retries      = 3;
    /* the owner's attempts in flight at once (iface/conn_table.h); 0: no limit */
    unsigned  connect_window   = 0;
    /* what this side tells the peer in its Hello */
    uint64_t  iface_uuid  = 0;
    uint16_t  credits     = 0;
    uint32_t  max_am_size = 1;
    uint8_t   responder_resources = 1;
    uint8_t   initiator_depth     = 1;
    /* connection sharing (iface/conn_table.h): hellos are version 2 and say
     * so, with the interface's listener as the peers know it */
    bool        share    = false;
    ListenerKey listener = {};
};

enum class ConnState {
    Idle, ResolvingAddr, ResolvingRoute, Connecting, Accepting, Connected, Failed, Closed,
    Awaiting, Queued
};
const char *to_string(ConnState state);

/* An rdma_cm event, copied before rdma_ack_cm_event. */
struct CmEvent {
    rdma_cm_event_type   type   = RDMA_CM_EVENT_ADDR_RESOLVED;
    int                  status = 0;
    rdma_cm_id          *id     = nullptr;
    std::vector<uint8_t> private_data;
};

class Connection;

/* Refuses a connect request (hello: its decoded private data) because the
 * two peers connected to each other at once and ours is kept: rdma_reject
 * with a Yield hello, then the request's id is destroyed. 0 or an errno. */
int yield_request(CmOps &cm, const WireupConfig &config, const CmEvent &request,
                  const Hello &hello);

class ConnectionOwner {
public:
    virtual ~ConnectionOwner() = default;
    virtual void on_established(Connection &conn) = 0;
    /* the connection failed for good (no more retries) or closed */
    virtual void on_failed(Connection &conn) = 0;
    virtual void on_closed(Connection &conn) = 0;
    /* one line for the debug log */
    virtual void on_log(Connection &conn, const std::string &line) = 0;
};

class Connection {
public:
    Connection(CmOps &cm, EceProvider &ece_provider, const WireupConfig &config,
               ConnectionOwner &owner, uint32_t conn_id);
    ~Connection();
    Connection(const Connection &) = delete;
    Connection &operator=(const Connection &) = delete;

    /* active side: start connecting to dst (an AF_INET/AF_INET6 address);
     * pair_sn: the endpoint's number toward dst, for sharing (0: none).
     * self: dst is this side's own listener (an endpoint to its own
     * interface): once the route is resolved the QP is connected to itself
     * (CmOps::connect_self), with no CM exchange and no ECE, as verbs
     * transports do; should that fail, the attempt goes through rdma_cm to
     * the listener like any other. */
    void connect(const sockaddr_storage &dst, uint32_t pair_sn = 0, bool self = false);
    /* active side: as connect(), but the first attempt waits (Queued) for
     * start(), which the owner calls when it has room for one more attempt
     * on the wire */
    void queue(const sockaddr_storage &dst, uint32_t pair_sn = 0);
    void start();

    /* passive side: take over the new cm_id of a CONNECT_REQUEST, whose
     * private data the interface decoded (hello; why: the decoder's reason
     * when it is not one). we_send: an endpoint of this side sends on the
     * connection from the start (both sides connected at once and this
     * one was kept): the reply says so (version 2) */
    void accept_request(const CmEvent &request, const std::optional<Hello> &hello,
                        const std::string &why, bool we_send = false);

    /* any later rdma_cm event of this connection's id */
    void on_event(const CmEvent &event);

    /* rdma_disconnect when connected (idempotent) */
    void disconnect();

    /* Ends all rdma_cm activity for good (idempotent): rdma_disconnect when
     * connected, then the cm_id is destroyed, which drops the events still
     * queued for it; an attempt in progress becomes Closed. No owner callback,
     * event or check_timeout acts on the connection afterwards. The QP stays
     * until the connection is destroyed, so that its completions can still be
     * drained. Call it with the owner's wireup lock held: the thread that
     * delivers rdma_cm events must not be using the id. */
    void close();

    /* Moves an established connection's QP to the error state (once):
     * requests in flight complete with flush errors. */
    void retire_qp();

    /* Fails the connection now, as an rdma_cm error would (test hook for
     * faults that cannot be staged on demand; wireup lock held). hold_us
     * widens the window a data path on another thread must survive: the
     * time between freeing or retiring what the connection holds and
     * telling the owner. */
    void inject_failure(ucs_status_t status, const std::string &reason, unsigned hold_us = 0);

    /* active side: fails the current attempt (and retries) when the peer
     * has been silent for longer than connect_timeout_s since the attempt
     * started; now is in seconds on any monotonic clock. peer_heard counts
     * what this side heard from the peer (answers to its other attempts,
     * its own requests): a change restarts the clock, since a peer that
     * answers others is alive and only busy (with a burst of our own
     * requests, for one) */
    void check_timeout(double now, uint64_t peer_heard = 0);
    /* active side, between connect() and established or failed for good:
     * what check_timeout() times */
    bool attempting() const
    {
        return in_flight() || (active_ && ((state_ == ConnState::Awaiting) ||
                                           (state_ == ConnState::Queued)));
    }
    /* an attempt that loads the CM: resolving or connecting through
     * rdma_cm (not Queued, not Awaiting, not a loopback, whose QP connects
     * to itself) */
    bool in_flight() const
    {
        return active_ && !self_ &&
               ((state_ == ConnState::ResolvingAddr) || (state_ == ConnState::ResolvingRoute) ||
                (state_ == ConnState::Connecting));
    }

    ConnState          state() const { return state_; }
    bool               active() const { return active_; }
    uint32_t           conn_id() const { return conn_id_; }
    unsigned           attempts() const { return attempts_; }
    ucs_status_t       status() const { return status_; }
    int                reject_reason() const { return reject_reason_; }
    const std::string &error() const { return error_; }
    const EceResult   &ece_result() const { return ece_.result(); }
    const Hello       &peer_hello() const { return peer_hello_; }
    /* an endpoint's connection to its own interface: one QP, no CM peer */
    bool               loopback() const { return self_; }
    /* both sides share connections: the peer may send on this one too, and
     * says when it stops using it (iface/conn_table.h) */
    bool               shared() const { return config_.share && peer_hello_.share; }
    /* the sharing pair number: the active side's, echoed by the passive */
    uint32_t           pair_sn() const { return pair_sn_; }
    ibv_qp            *qp() const { return qp_; }
    rdma_cm_id        *id() const { return id_; }
    /* the data path has seen the QP (established): only ~Connection frees it */
    bool               qp_published() const { return qp_published_; }
    bool               qp_retired() const { return qp_retired_; }
    /* completions may still come for requests posted to the QP: it exists
     * and, when retired, the provider took it to the error state (a removed
     * device does not, and completes nothing any more) */
    bool               qp_completes() const { return (qp_ != nullptr) && !retire_failed_; }

private:
    /* active side: what connect() and queue() set up before any attempt */
    void aim(const sockaddr_storage &dst, uint32_t pair_sn, bool self);
    void start_attempt();
    /* frees what the connection holds: the cm_id, and the QP unless the
     * data path has it (then it is retired; final: the destructor frees it) */
    void teardown(bool final = false);
    /* retryable failure of the current attempt */
    void attempt_failed(const std::string &reason);
    /* final failure */
    void fail(ucs_status_t status, const std::string &reason, unsigned hold_us = 0);
    /* the peer closed: Closed, QP retired, owner told; `disconnected` when
     * a DREQ came (answered with our DREP) rather than a REJ */
    void peer_closed(bool disconnected);
    void on_rejected(const CmEvent &event);
    void established();
    bool modify_to_rts(std::string *reason);
    void on_route_resolved();
    void connect_loopback();
    void on_connect_response(const CmEvent &event);
    /* a reject that says the peer keeps its own connection (sharing) */
    bool is_yield(const CmEvent &event) const;
    ConnParams conn_params(uint8_t *buf, Hello::Kind kind, uint32_t conn_id);

    CmOps             &cm_;
    EceProvider       &ece_provider_;
    WireupConfig       config_;
    ConnectionOwner   *owner_;
    EceNegotiator      ece_;
    bool               active_ = true;
    bool               self_   = false; /* loopback: the QP connects to itself */
    uint32_t           conn_id_;
    uint32_t           pair_sn_ = 0;
    ConnState          state_ = ConnState::Idle;
    sockaddr_storage   dst_   = {};
    rdma_cm_id        *id_    = nullptr;
    ibv_qp            *qp_    = nullptr;
    bool               qp_published_  = false;
    bool               qp_retired_    = false;
    bool               retire_failed_ = false;
    unsigned           attempts_ = 0;
    double             attempt_start_ = -1; /* set by the first check_timeout */
    uint64_t           peer_heard_    = 0;  /* check_timeout's peer_heard then */
    ucs_status_t       status_   = UCS_OK;
    int                reject_reason_ = 0;
    std::string        error_;
    Hello              peer_hello_ = {};
    bool               we_send_    = false; /* accept_request's, for the reply */
};

} // namespace xqp::wireup

#endif
