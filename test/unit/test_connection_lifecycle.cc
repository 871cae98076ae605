/*
 * xqp - unit tests of the wireup state machine (wireup::Connection): a
 * connection's life around the handshake. Disconnects and device removal,
 * the loopback (a QP connected to itself without the CM), the QP's and the
 * id's lifetime, close, events that do not fit the state, destruction in
 * every state, and the attempt timeout.
 *
 * The connection talks to rdma_cm/verbs only through CmOps and to the ECE
 * verbs only through EceProvider; here both are recorders (fake_cm.h) that
 * write every call, in order, into one shared log (the owner's callbacks go
 * there too), so each test asserts the exact sequence of calls the state
 * machine makes. The rdma_cm_id / ibv_qp objects are plain structs owned by
 * the fake and never reach a real library. One connection with its fakes is
 * a Rig (connection_rig.h); the state machine's other concerns are in the
 * other test_connection_*.cc.
 */
#include "connection_rig.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <string>
#include <vector>

using namespace xqp::wireup;
using namespace xqp::test;

/* ================================================================== disconnect, removal */

TEST(WireupConnection, ActiveConnectedThenDisconnected)
{
    Rig r;
    r.ece.rxe();
    r.to_connected_active();
    r.take();
    r.feed(RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(r.take(), (Calls{"disconnect", "error_qp", "on_closed"}));
    EXPECT_EQ(ConnState::Closed, r.conn->state());
    EXPECT_EQ(1, r.owner.closed);
    EXPECT_EQ(0, r.owner.failed);
    EXPECT_EQ(UCS_OK, r.conn->status());

    r.feed(RDMA_CM_EVENT_DISCONNECTED); /* again: nothing */
    r.conn->disconnect();
    EXPECT_EQ(r.take(), Calls{});
    r.conn.reset();
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
    EXPECT_EQ(1, r.owner.closed);
}

/* A passive peer that destroys its id before its ESTABLISHED arrives sends
 * a REJ, not a DREQ; the kernel CM delivers it to the active side's
 * established id as REJECTED, and no DISCONNECTED ever follows. */
TEST(WireupConnection, ActiveConnectedThenRejectedIsClosed)
{
    Rig r;
    r.ece.rxe();
    r.to_connected_active();
    r.take();
    r.feed(RDMA_CM_EVENT_REJECTED, 28);
    EXPECT_EQ(r.take(), (Calls{"error_qp", "on_closed"})); /* no DREQ to answer */
    EXPECT_EQ(ConnState::Closed, r.conn->state());
    EXPECT_EQ(1, r.owner.closed);
    EXPECT_EQ(0, r.owner.failed);

    r.feed(RDMA_CM_EVENT_REJECTED, 28); /* again: nothing */
    r.feed(RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(r.take(), Calls{});
    r.conn.reset();
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
    EXPECT_EQ(1, r.owner.closed);
}

/* ================================================================== loopback */

TEST(WireupConnection, LoopbackConnectsTheQpToItselfWithoutTheCm)
{
    Rig r;
    r.ece.mlx5(0x3); /* even where ECE exists: there is no peer to agree with */
    r.make();
    r.conn->connect(Rig::dst(), 0, true);
    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "connect_self qp=257", "on_established"}));
    EXPECT_EQ(ConnState::Connected, r.conn->state());
    EXPECT_TRUE(r.conn->loopback());
    EXPECT_TRUE(r.conn->qp_published());
    EXPECT_EQ(QpRole::Active, r.cm.qp_roles.at(0)); /* it sends: a full send queue */
    EXPECT_FALSE(r.conn->ece_result().sent.present());
    EXPECT_FALSE(r.conn->shared());
    EXPECT_TRUE(r.owner.logged("loopback: the QP is connected to itself (no peer, no ece)"));
    /* what the data path reads from the peer's hello is this side's own */
    EXPECT_EQ(r.cfg.credits, r.conn->peer_hello().credits);
    EXPECT_EQ(r.cfg.max_am_size, r.conn->peer_hello().max_am_size);
    /* no CM connection to take down, but the device may still go */
    r.conn->disconnect();
    EXPECT_EQ(r.take(), Calls{});
    EXPECT_EQ(ConnState::Closed, r.conn->state());
    r.conn.reset();
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
}

TEST(WireupConnection, LoopbackFailsWithItsDevice)
{
    Rig r;
    r.ece.rxe();
    r.make();
    r.conn->connect(Rig::dst(), 0, true);
    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
    ASSERT_EQ(ConnState::Connected, r.conn->state());
    r.take();
    r.feed(RDMA_CM_EVENT_DEVICE_REMOVAL);
    EXPECT_EQ(r.take(), (Calls{"error_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, r.conn->status());
}

TEST(WireupConnection, LoopbackThatCannotConnectGoesThroughTheCm)
{
    Rig r;
    r.ece.rxe();
    r.cfg.max_retries = 0; /* the fallback is not a retry */
    r.cm.inject("connect_self", ENOENT, 1);
    r.make();
    r.conn->connect(Rig::dst(), 0, true);
    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "connect_self qp=257", "destroy_qp", "destroy_id", "create_id",
                               "resolve_addr"}));
    EXPECT_TRUE(r.owner.logged("loopback QP: " + strerr(ENOENT) + ": connecting through rdma_cm"));
    EXPECT_FALSE(r.conn->loopback());
    EXPECT_EQ(1u, r.conn->attempts());
    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
    ASSERT_EQ(ConnState::Connecting, r.conn->state());
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    EXPECT_EQ(ConnState::Connected, r.conn->state());
    EXPECT_EQ(1, r.owner.established);
}

TEST(WireupConnection, PassiveConnectedThenDisconnected)
{
    Rig r;
    r.ece.rxe();
    r.to_connected_passive();
    r.take();
    r.feed(RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(r.take(), (Calls{"disconnect", "error_qp", "on_closed"}));
    EXPECT_EQ(ConnState::Closed, r.conn->state());
    r.conn.reset();
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
}

TEST(WireupConnection, DeviceRemovalInEveryLiveState)
{
    const struct {
        ConnState state;
        Calls     teardown;
    } cases[] = {
        {ConnState::ResolvingAddr, {"destroy_id", "on_failed"}},
        {ConnState::ResolvingRoute, {"destroy_id", "on_failed"}},
        {ConnState::Connecting, {"destroy_qp", "destroy_id", "on_failed"}},
        {ConnState::Accepting, {"destroy_qp", "destroy_id", "on_failed"}},
        /* established: the data path has the QP, only ~Connection frees it */
        {ConnState::Connected, {"error_qp", "destroy_id", "on_failed"}},
    };
    for (const auto &tc : cases) {
        SCOPED_TRACE(to_string(tc.state));
        Rig r;
        r.ece.rxe();
        if (tc.state == ConnState::Accepting) {
            r.request(request_bytes(5));
        } else if (tc.state == ConnState::Connected) {
            r.to_connected_active();
        } else {
            r.make();
            r.conn->connect(Rig::dst());
            advance_to(r, tc.state);
        }
        ASSERT_EQ(tc.state, r.conn->state());
        r.take();
        r.feed(RDMA_CM_EVENT_DEVICE_REMOVAL);
        EXPECT_EQ(r.take(), tc.teardown);
        EXPECT_EQ(ConnState::Failed, r.conn->state());
        EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, r.conn->status());
        EXPECT_EQ("rdma device removed", r.conn->error());
        EXPECT_EQ(1, r.owner.failed);
        EXPECT_EQ(1u, r.conn->attempts()); /* never retried */

        r.feed(RDMA_CM_EVENT_DEVICE_REMOVAL); /* once only */
        r.conn.reset();
        EXPECT_EQ(r.take(), (tc.state == ConnState::Connected) ? Calls{"destroy_qp"} : Calls{});
        EXPECT_EQ(1, r.owner.failed);
    }
}

/* The QP of an established connection is posted to by the data path on
 * another thread without the wireup lock: whatever ends the connection on
 * the async thread only retires it (error state), and ~Connection frees it. */
TEST(WireupConnection, EstablishedQpIsFreedOnlyByTheDestructor)
{
    const struct {
        const char *name;
        std::function<void(Rig &)> end;
        Calls calls;      /* when it ends */
        Calls destroyed;  /* at ~Connection */
    } cases[] = {
        {"injected failure", [](Rig &r) { r.conn->inject_failure(UCS_ERR_IO_ERROR, "hook"); },
         {"error_qp", "destroy_id", "on_failed"}, {"destroy_qp"}},
        {"device removal", [](Rig &r) { r.feed(RDMA_CM_EVENT_DEVICE_REMOVAL); },
         {"error_qp", "destroy_id", "on_failed"}, {"destroy_qp"}},
        {"peer disconnect", [](Rig &r) { r.feed(RDMA_CM_EVENT_DISCONNECTED); },
         {"disconnect", "error_qp", "on_closed"}, {"destroy_qp", "destroy_id"}},
        /* the owner retires it itself when requests are in flight */
        {"close", [](Rig &r) { r.conn->close(); }, {"disconnect", "destroy_id"}, {"destroy_qp"}},
    };
    for (const auto &tc : cases) {
        for (const bool active : {true, false}) {
            SCOPED_TRACE(std::string(tc.name) + (active ? ", active" : ", passive"));
            Rig r;
            r.ece.rxe();
            active ? r.to_connected_active() : r.to_connected_passive();
            ibv_qp *qp = r.conn->qp();
            ASSERT_NE(nullptr, qp);
            EXPECT_TRUE(r.conn->qp_published());
            r.take();
            tc.end(r);
            EXPECT_EQ(r.take(), tc.calls);
            EXPECT_EQ(qp, r.conn->qp()) << "the QP must stay for the data path";
            EXPECT_EQ(1u, r.cm.live_qps.count(qp));
            EXPECT_TRUE(r.conn->qp_completes()) << "a retired QP flushes what was posted";
            r.conn->retire_qp();
            r.conn->retire_qp(); /* once */
            r.conn->inject_failure(UCS_ERR_IO_ERROR, "again"); /* ended already: nothing */
            const Calls after = r.take();
            EXPECT_LE(count(after, "error_qp"), 1u);
            EXPECT_EQ(0u, count(after, "on_failed"));
            r.conn.reset();
            EXPECT_EQ(r.take(), tc.destroyed);
            EXPECT_EQ(0u, r.cm.live_qps.count(qp));
        }
    }
}

TEST(WireupConnection, RetireFailureMeansNoCompletionsExpected)
{
    Rig r;
    r.ece.rxe();
    r.to_connected_active();
    r.cm.inject("error_qp", EIO);
    r.take();
    r.feed(RDMA_CM_EVENT_DEVICE_REMOVAL);
    EXPECT_EQ(r.take(), (Calls{"error_qp", "destroy_id", "on_failed"}));
    EXPECT_NE(nullptr, r.conn->qp());
    EXPECT_FALSE(r.conn->qp_completes()) << "a QP the provider could not move to ERR";
    EXPECT_TRUE(r.owner.logged("ibv_modify_qp(ERR): " + strerr(EIO)));
}

TEST(WireupConnection, InjectedFailureBeforeEstablishedDestroysTheQp)
{
    Rig r;
    r.ece.rxe();
    r.make();
    r.conn->connect(Rig::dst());
    advance_to(r, ConnState::Connecting);
    r.take();
    r.conn->inject_failure(UCS_ERR_ENDPOINT_TIMEOUT, "hook");
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_FALSE(r.conn->qp_published());
    EXPECT_EQ(nullptr, r.conn->qp());
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, r.conn->status());
    EXPECT_EQ("hook", r.conn->error());
}

TEST(WireupConnection, DeviceRemovalAfterCloseIsIgnored)
{
    Rig r;
    r.ece.rxe();
    r.to_connected_active();
    r.feed(RDMA_CM_EVENT_DISCONNECTED);
    r.take();
    r.feed(RDMA_CM_EVENT_DEVICE_REMOVAL);
    EXPECT_EQ(r.take(), Calls{});
    EXPECT_EQ(ConnState::Closed, r.conn->state());
    EXPECT_EQ(0, r.owner.failed);
}

TEST(WireupConnection, CloseDestroysTheIdAndKeepsTheQp)
{
    /* an endpoint going away: no event may reach the connection after
     * close(), while its QP drains the requests still in flight */
    Rig r;
    r.ece.rxe();
    r.to_connected_active();
    r.take();
    ibv_qp *qp = r.conn->qp();
    r.conn->close();
    EXPECT_EQ(r.take(), (Calls{"disconnect", "destroy_id"}));
    EXPECT_EQ(nullptr, r.conn->id());
    EXPECT_EQ(qp, r.conn->qp());
    EXPECT_EQ(ConnState::Closed, r.conn->state());
    EXPECT_EQ(0, r.owner.closed); /* the owner asked: no callback */
    EXPECT_EQ(0, r.owner.failed);
    r.conn->close(); /* idempotent */
    EXPECT_EQ(r.take(), Calls{});
    r.conn.reset();
    EXPECT_EQ(r.take(), (Calls{"destroy_qp"}));
    EXPECT_TRUE(r.cm.live_ids.empty());
    EXPECT_TRUE(r.cm.live_qps.empty());
}

TEST(WireupConnection, CloseWhileConnectingStopsTheAttempts)
{
    for (const auto state : {ConnState::ResolvingAddr, ConnState::ResolvingRoute,
                             ConnState::Connecting}) {
        SCOPED_TRACE(to_string(state));
        Rig r;
        r.ece.rxe();
        r.make();
        r.conn->connect(Rig::dst());
        advance_to(r, state);
        ASSERT_EQ(state, r.conn->state());
        const bool has_qp = (r.conn->qp() != nullptr);
        r.take();
        r.conn->close();
        EXPECT_EQ(r.take(), (Calls{"destroy_id"}));
        EXPECT_EQ(ConnState::Closed, r.conn->state());
        /* the connect timer must not start another attempt */
        r.conn->check_timeout(0);
        r.conn->check_timeout(1e9);
        EXPECT_EQ(r.take(), Calls{});
        EXPECT_EQ(1u, r.conn->attempts());
        r.conn.reset();
        EXPECT_EQ(r.take(), has_qp ? (Calls{"destroy_qp"}) : Calls{});
        EXPECT_EQ(0, r.owner.failed);
    }
}

/* ================================================================== events out of place */

TEST(WireupConnection, EventsThatDoNotFitAreIgnored)
{
    /* resolving the address: only ADDR_RESOLVED / errors count */
    {
        Rig r;
        r.make();
        r.conn->connect(Rig::dst());
        r.take();
        for (auto type : {RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_ROUTE_RESOLVED,
                          RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_REJECTED,
                          RDMA_CM_EVENT_DISCONNECTED}) {
            SCOPED_TRACE(rdma_event_str(type));
            r.feed(type, 0, reply_bytes());
            EXPECT_EQ(r.take(), Calls{});
            EXPECT_EQ(ConnState::ResolvingAddr, r.conn->state());
        }
        EXPECT_EQ(1u, r.conn->attempts());
    }
    /* ROUTE_RESOLVED twice, ADDR_RESOLVED twice */
    {
        Rig r;
        r.ece.rxe();
        r.to_connecting();
        r.take();
        r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
        r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
        r.feed(RDMA_CM_EVENT_ESTABLISHED);
        r.feed(RDMA_CM_EVENT_DISCONNECTED);
        EXPECT_EQ(r.take(), Calls{});
        EXPECT_EQ(ConnState::Connecting, r.conn->state());
        EXPECT_EQ(1u, r.cm.created_qps.size());
    }
    {
        Rig r;
        r.make();
        r.conn->connect(Rig::dst());
        r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
        r.take();
        r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
        r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
        EXPECT_EQ(r.take(), Calls{});
        EXPECT_EQ(ConnState::ResolvingRoute, r.conn->state());
    }
    /* connected: errors of the connect phase are stale */
    {
        Rig r;
        r.ece.rxe();
        r.to_connected_active();
        r.take();
        for (auto type : {RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                          RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_ESTABLISHED,
                          RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR,
                          RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_CONNECT_ERROR}) {
            SCOPED_TRACE(rdma_event_str(type));
            r.feed(type, 35, reply_bytes());
            EXPECT_EQ(r.take(), Calls{});
            EXPECT_EQ(ConnState::Connected, r.conn->state());
        }
        EXPECT_EQ(1, r.owner.established);
        EXPECT_EQ(0, r.owner.failed);
        EXPECT_EQ(0, r.conn->reject_reason());
    }
    /* accepting: a CONNECT_RESPONSE is not for the passive side */
    {
        Rig r;
        r.ece.rxe();
        r.request(request_bytes(5));
        r.take();
        r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes(5));
        r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
        r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
        EXPECT_EQ(r.take(), Calls{});
        EXPECT_EQ(ConnState::Accepting, r.conn->state());
    }
    /* failed: nothing restarts it */
    {
        Rig r;
        r.ece.rxe();
        r.to_connecting();
        r.feed(RDMA_CM_EVENT_REJECTED, 35);
        r.take();
        for (auto type : {RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                          RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_ESTABLISHED,
                          RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ADDR_ERROR,
                          RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_DISCONNECTED}) {
            SCOPED_TRACE(rdma_event_str(type));
            r.feed(type, 28, reply_bytes());
            EXPECT_EQ(r.take(), Calls{});
            EXPECT_EQ(ConnState::Failed, r.conn->state());
        }
        EXPECT_EQ(1, r.owner.failed);
        EXPECT_EQ(35, r.conn->reject_reason());
    }
}

TEST(WireupConnection, IdleIgnoresEvents)
{
    /* a connection that was never started has no id: stray events must not
     * start an attempt to a zero address */
    Rig r;
    r.make();
    for (auto type : {RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                      RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_REJECTED,
                      RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR,
                      RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_CONNECT_ERROR,
                      RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_DISCONNECTED}) {
        SCOPED_TRACE(rdma_event_str(type));
        r.feed(type, 28, reply_bytes());
        EXPECT_EQ(r.take(), Calls{});
        EXPECT_EQ(ConnState::Idle, r.conn->state());
    }
    EXPECT_EQ(0u, r.conn->attempts());
    EXPECT_EQ(0, r.owner.failed);
}

TEST(WireupConnection, UnhandledEventTypesOnlyLog)
{
    Rig r;
    r.ece.rxe();
    r.to_connected_active();
    r.take();
    r.owner.lines.clear();
    r.feed(RDMA_CM_EVENT_TIMEWAIT_EXIT);
    r.feed(RDMA_CM_EVENT_ADDR_CHANGE);
    EXPECT_EQ(r.take(), Calls{});
    EXPECT_EQ(ConnState::Connected, r.conn->state());
    EXPECT_EQ(r.owner.lines,
              (Calls{std::string("ignoring ") + rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT) +
                             " in state connected",
                     std::string("ignoring ") + rdma_event_str(RDMA_CM_EVENT_ADDR_CHANGE) +
                             " in state connected"}));
}

/* ================================================================== destruction */

TEST(WireupConnection, DestructorOfConnectedConnection)
{
    for (bool active : {true, false}) {
        SCOPED_TRACE(active ? "active" : "passive");
        Rig r;
        r.ece.rxe();
        if (active) {
            r.to_connected_active();
        } else {
            r.to_connected_passive();
        }
        r.take();
        rdma_cm_id *id = r.conn->id();
        ibv_qp     *qp = r.conn->qp();
        r.conn.reset();
        EXPECT_EQ(r.take(), (Calls{"disconnect", "destroy_qp", "destroy_id"}));
        EXPECT_EQ((std::vector<rdma_cm_id *>{id}), r.cm.destroyed_ids);
        EXPECT_EQ(0u, r.cm.live_qps.count(qp));
        EXPECT_TRUE(r.cm.live_ids.empty());
        EXPECT_EQ(0, r.owner.closed); /* the owner is tearing down: no callback */
        EXPECT_EQ(0, r.owner.failed);
    }
}

TEST(WireupConnection, ExplicitDisconnectThenDestructor)
{
    Rig r;
    r.ece.rxe();
    r.to_connected_active();
    r.take();
    r.conn->disconnect();
    r.conn->disconnect(); /* idempotent */
    EXPECT_EQ(r.take(), (Calls{"disconnect"}));
    EXPECT_EQ(ConnState::Closed, r.conn->state());
    r.conn.reset();
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
}

TEST(WireupConnection, DestructorWhileConnectingOrAccepting)
{
    {
        Rig r;
        r.ece.rxe();
        r.to_connecting();
        r.take();
        r.conn.reset();
        EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
        EXPECT_EQ(0, r.owner.failed);
    }
    {
        Rig r;
        r.ece.rxe();
        r.request(request_bytes(5));
        r.take();
        r.conn.reset();
        EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
    }
    {
        Rig r;
        r.make();
        r.conn.reset();
        EXPECT_EQ(r.take(), Calls{});
    }
}

/* ================================================================== attempt timeout */

TEST(WireupConnection, ActiveAttemptTimesOutAndRetriesWithFreshId)
{
    Rig r;
    r.cfg.connect_timeout_s = 2.0;
    r.cfg.max_retries       = 1;
    r.to_connecting();
    r.take();
    r.conn->check_timeout(100.0); /* starts the clock of this attempt */
    r.conn->check_timeout(101.9); /* not yet */
    EXPECT_TRUE(r.take().empty());
    EXPECT_EQ(ConnState::Connecting, r.conn->state());

    r.conn->check_timeout(102.1); /* the silent peer: abandon, retry */
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id", "create_id", "resolve_addr"}));
    EXPECT_EQ(2u, r.conn->attempts());
    EXPECT_TRUE(r.owner.logged("attempt 1 failed: no connection after 2.0 s (connecting); "
                               "retrying with a new cm_id"));

    /* the retry's clock starts afresh; when it expires too, it is final */
    r.conn->check_timeout(200.0);
    r.conn->check_timeout(203.0);
    EXPECT_EQ(r.take(), (Calls{"destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_UNREACHABLE, r.conn->status());
    EXPECT_TRUE(contains(r.conn->error(), "no connection after 2.0 s (resolving address) "
                                          "(after 2 attempts)")) << r.conn->error();
}

TEST(WireupConnection, TimeoutDoesNothingWhenConnectedPassiveOrDisabled)
{
    {
        Rig r;
        r.cfg.connect_timeout_s = 1.0;
        r.to_connected_active();
        r.take();
        r.conn->check_timeout(0.0);
        r.conn->check_timeout(100.0);
        EXPECT_TRUE(r.take().empty());
        EXPECT_EQ(ConnState::Connected, r.conn->state());
    }
    {
        Rig r;
        r.cfg.connect_timeout_s = 1.0;
        r.request(request_bytes(kConnId));
        r.take();
        r.conn->check_timeout(0.0);
        r.conn->check_timeout(100.0);
        EXPECT_TRUE(r.take().empty());
        EXPECT_EQ(ConnState::Accepting, r.conn->state());
    }
    {
        Rig r;
        r.cfg.connect_timeout_s = 0; /* no limit */
        r.to_connecting();
        r.take();
        r.conn->check_timeout(0.0);
        r.conn->check_timeout(1e6);
        EXPECT_TRUE(r.take().empty());
        EXPECT_EQ(ConnState::Connecting, r.conn->state());
    }
}
