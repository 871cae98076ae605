/*
 * xqp - unit tests of the wireup state machine (wireup::Connection): the
 * active side's failures. Those retried (address, route, unreachable,
 * connect errors, rejects) until max_retries, and the final ones (an ECE
 * reject, creating the id or the QP, setting the local ECE, a malformed
 * response or one without the required ECE, modify and establish failures,
 * the ECE offer).
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
#include <string>
#include <vector>

using namespace xqp::wireup;
using namespace xqp::test;

/* ================================================================== active failures */

TEST(WireupConnection, ActiveEceRejectIsFinal)
{
    Rig r;
    r.ece.mlx5(0x3);
    r.to_connecting();
    r.take();
    r.feed(RDMA_CM_EVENT_REJECTED, 35);
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(1u, r.conn->attempts());
    EXPECT_EQ(UCS_ERR_REJECTED, r.conn->status());
    EXPECT_EQ(35, r.conn->reject_reason());
    EXPECT_TRUE(contains(r.conn->error(), "reject reason 35")) << r.conn->error();
    EXPECT_EQ(1u, r.cm.created_ids.size());
    EXPECT_EQ(1, r.owner.failed);
    EXPECT_TRUE(r.cm.live_ids.empty());
    EXPECT_TRUE(r.cm.live_qps.empty());
}

struct RetryCase {
    const char        *name;
    rdma_cm_event_type type;
    int                status;
    ConnState          at; /* the state the event arrives in */
    bool               had_qp;
    std::string        reason;
};

std::vector<RetryCase> retry_cases()
{
    return {
        {"addr error", RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH, ConnState::ResolvingAddr, false,
         std::string(rdma_event_str(RDMA_CM_EVENT_ADDR_ERROR)) + " (status " +
                 std::to_string(-ENETUNREACH) + ")"},
        {"route error", RDMA_CM_EVENT_ROUTE_ERROR, -ETIMEDOUT, ConnState::ResolvingRoute, false,
         std::string(rdma_event_str(RDMA_CM_EVENT_ROUTE_ERROR)) + " (status " +
                 std::to_string(-ETIMEDOUT) + ")"},
        {"unreachable", RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, ConnState::Connecting, true,
         std::string(rdma_event_str(RDMA_CM_EVENT_UNREACHABLE)) + " (status " +
                 std::to_string(-ETIMEDOUT) + ")"},
        {"connect error", RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET, ConnState::Connecting, true,
         std::string(rdma_event_str(RDMA_CM_EVENT_CONNECT_ERROR)) + " (status " +
                 std::to_string(-ECONNRESET) + ")"},
        {"rejected 28", RDMA_CM_EVENT_REJECTED, 28, ConnState::Connecting, true,
         "the peer rejected the connection (reject reason 28)"},
    };
}

TEST(WireupConnection, ActiveRetriesThenFails)
{
    for (const auto &tc : retry_cases()) {
        SCOPED_TRACE(tc.name);
        Rig r;
        r.ece.rxe();
        ASSERT_EQ(2u, r.cfg.max_retries);
        r.make();
        r.conn->connect(Rig::dst());
        Calls teardown;
        if (tc.had_qp) {
            teardown.push_back("destroy_qp");
        }
        teardown.push_back("destroy_id");

        for (unsigned attempt = 1; attempt <= 3; ++attempt) {
            SCOPED_TRACE("attempt " + std::to_string(attempt));
            EXPECT_EQ(attempt, r.conn->attempts());
            advance_to(r, tc.at);
            ASSERT_EQ(tc.at, r.conn->state());
            rdma_cm_id *id = r.conn->id();
            ibv_qp     *qp = r.conn->qp();
            EXPECT_EQ(tc.had_qp, qp != nullptr);
            r.take();

            r.feed(tc.type, tc.status);
            Calls expected = teardown;
            if (attempt < 3) {
                expected.insert(expected.end(), {"create_id", "resolve_addr"});
                EXPECT_EQ(r.take(), expected);
                EXPECT_EQ(ConnState::ResolvingAddr, r.conn->state());
                EXPECT_NE(id, r.conn->id()) << "a retry must use a fresh cm_id";
                EXPECT_EQ(nullptr, r.conn->qp());
                EXPECT_EQ(0, r.owner.failed);
                EXPECT_TRUE(r.owner.logged("attempt " + std::to_string(attempt) +
                                           " failed: " + tc.reason +
                                           "; retrying with a new cm_id"));
            } else {
                expected.push_back("on_failed");
                EXPECT_EQ(r.take(), expected);
            }
            EXPECT_EQ(0u, r.cm.live_ids.count(id));
            EXPECT_EQ(0u, r.cm.live_qps.count(qp));
        }
        EXPECT_EQ(ConnState::Failed, r.conn->state());
        EXPECT_EQ(3u, r.conn->attempts());
        EXPECT_EQ(UCS_ERR_UNREACHABLE, r.conn->status());
        EXPECT_EQ(tc.reason + " (after 3 attempts)", r.conn->error());
        EXPECT_EQ(1, r.owner.failed);
        EXPECT_EQ(0, r.owner.established);
        EXPECT_EQ(3u, r.cm.created_ids.size());
        EXPECT_EQ(tc.had_qp ? 3u : 0u, r.cm.created_qps.size());
        if (tc.had_qp) {
            /* every attempt had its own QP, and connected with it */
            ASSERT_EQ(3u, r.cm.connects.size());
            for (size_t i = 0; i < 3; ++i) {
                EXPECT_EQ(0x101u + i, r.cm.created_qps[i]->qp_num);
                EXPECT_EQ(0x101u + i, r.cm.connects[i].params.qp_num);
                EXPECT_EQ(r.cm.created_ids[i], r.cm.connects[i].id);
                EXPECT_EQ(kConnId, decoded(r.cm.connects[i].pdata).conn_id);
            }
        }
        EXPECT_TRUE(r.cm.live_ids.empty());
        EXPECT_TRUE(r.cm.live_qps.empty());

        /* a late event after the final failure does nothing */
        r.feed(tc.type, tc.status);
        EXPECT_EQ(r.take(), Calls{});
        EXPECT_EQ(1, r.owner.failed);
    }
}

TEST(WireupConnection, ActiveRetryThenSucceeds)
{
    Rig r;
    r.ece.mlx5(0x3);
    r.cm.remote_ece = {kMlx, 0x3};
    r.to_connecting();
    r.feed(RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
    r.take();
    ASSERT_EQ(ConnState::ResolvingAddr, r.conn->state());

    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    EXPECT_EQ(r.take(), (Calls{"resolve_route", "create_qp", "ibv_query_ece",
                               "set_local_ece 0x15b3:0x3", "connect qp=258 pdata=28",
                               "get_remote_ece", "ibv_set_ece 0x15b3:0x3", "modify INIT",
                               "modify RTR", "modify RTS", "establish", "on_established"}));
    EXPECT_EQ(ConnState::Connected, r.conn->state());
    EXPECT_EQ(2u, r.conn->attempts());
    EXPECT_EQ(UCS_OK, r.conn->status());
    EXPECT_EQ(258u, r.conn->qp()->qp_num);
    EXPECT_EQ(r.cm.created_ids[1], r.conn->id());
    EXPECT_EQ(1, r.owner.established);
    EXPECT_EQ(0, r.owner.failed);
}

TEST(WireupConnection, ActiveMixedFailuresCountTogether)
{
    Rig r;
    r.ece.rxe();
    r.make();
    r.conn->connect(Rig::dst());
    r.feed(RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH);
    advance_to(r, ConnState::ResolvingRoute);
    r.feed(RDMA_CM_EVENT_ROUTE_ERROR, -ETIMEDOUT);
    advance_to(r, ConnState::Connecting);
    EXPECT_EQ(0, r.owner.failed);
    r.feed(RDMA_CM_EVENT_REJECTED, 28);
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(3u, r.conn->attempts());
    EXPECT_EQ(UCS_ERR_UNREACHABLE, r.conn->status());
    EXPECT_EQ("the peer rejected the connection (reject reason 28) (after 3 attempts)",
              r.conn->error());
    EXPECT_EQ(28, r.conn->reject_reason());
    EXPECT_EQ(1, r.owner.failed);
    EXPECT_EQ(3, static_cast<int>(count(r.log, "create_id")));
}

TEST(WireupConnection, ActiveNoRetriesWhenMaxRetriesIsZero)
{
    Rig r;
    r.cfg.max_retries = 0;
    r.make();
    r.conn->connect(Rig::dst());
    r.feed(RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH);
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "destroy_id", "on_failed"}));
    EXPECT_EQ(1u, r.conn->attempts());
    EXPECT_EQ(UCS_ERR_UNREACHABLE, r.conn->status());
    EXPECT_TRUE(contains(r.conn->error(), "(after 1 attempts)")) << r.conn->error();
}

TEST(WireupConnection, ActiveImmediateResolveAddrFailureCountsAsAttempt)
{
    Rig r;
    r.cm.inject("resolve_addr", ENODEV, 2);
    r.make();
    r.conn->connect(Rig::dst());
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "destroy_id", "create_id",
                               "resolve_addr", "destroy_id", "create_id", "resolve_addr"}));
    EXPECT_EQ(ConnState::ResolvingAddr, r.conn->state());
    EXPECT_EQ(3u, r.conn->attempts());
    EXPECT_EQ(r.cm.created_ids[2], r.conn->id());
    EXPECT_EQ(0, r.owner.failed);
    EXPECT_TRUE(r.owner.logged("attempt 2 failed: rdma_resolve_addr: " + strerr(ENODEV) +
                               "; retrying with a new cm_id"));
}

TEST(WireupConnection, ActiveResolveAddrAlwaysFailing)
{
    Rig r;
    r.cm.inject("resolve_addr", ENODEV);
    r.make();
    r.conn->connect(Rig::dst());
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "destroy_id", "create_id",
                               "resolve_addr", "destroy_id", "create_id", "resolve_addr",
                               "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(3u, r.conn->attempts());
    EXPECT_EQ(UCS_ERR_UNREACHABLE, r.conn->status());
    EXPECT_EQ("rdma_resolve_addr: " + strerr(ENODEV) + " (after 3 attempts)", r.conn->error());
    EXPECT_EQ(1, r.owner.failed);
}

TEST(WireupConnection, ActiveResolveRouteAndConnectFailuresRetry)
{
    Rig r;
    r.ece.rxe();
    r.cm.inject("resolve_route", EHOSTUNREACH, 1);
    r.cm.inject("connect", ECONNREFUSED, 1);
    r.make();
    r.conn->connect(Rig::dst());
    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "destroy_id",
                               "create_id", "resolve_addr"}));
    advance_to(r, ConnState::Connecting);
    EXPECT_EQ(r.take(), (Calls{"resolve_route", "create_qp", "ibv_query_ece",
                               "connect qp=257 pdata=28", "destroy_qp", "destroy_id",
                               "create_id", "resolve_addr"}));
    EXPECT_EQ(3u, r.conn->attempts());
    EXPECT_EQ(ConnState::ResolvingAddr, r.conn->state());
    EXPECT_TRUE(r.owner.logged("attempt 2 failed: rdma_connect: " + strerr(ECONNREFUSED)));
}

TEST(WireupConnection, ActiveCreateIdFailureIsFinal)
{
    Rig r;
    r.cm.inject("create_id", ENOMEM);
    r.make();
    r.conn->connect(Rig::dst());
    EXPECT_EQ(r.take(), (Calls{"create_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.conn->status());
    EXPECT_EQ("rdma_create_id: " + strerr(ENOMEM), r.conn->error());
}

TEST(WireupConnection, ActiveCreateQpFailureIsFinal)
{
    Rig r;
    r.cm.inject("create_qp", ENOMEM);
    r.make();
    r.conn->connect(Rig::dst());
    advance_to(r, ConnState::Connecting);
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "destroy_id", "on_failed"}));
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, r.conn->status());
    EXPECT_EQ("ibv_create_qp: " + strerr(ENOMEM), r.conn->error());
}

TEST(WireupConnection, ActiveSetLocalEceFailureIsFinal)
{
    Rig r;
    r.ece.mlx5(0x3);
    r.cm.inject("set_local_ece", EINVAL);
    r.make();
    r.conn->connect(Rig::dst());
    advance_to(r, ConnState::Connecting);
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "ibv_query_ece", "set_local_ece 0x15b3:0x3", "destroy_qp",
                               "destroy_id", "on_failed"}));
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.conn->status());
    EXPECT_EQ("rdma_set_local_ece: " + strerr(EINVAL), r.conn->error());
}

TEST(WireupConnection, ActiveMalformedConnectResponse)
{
    auto request = request_bytes(kConnId);
    auto bad     = reply_bytes();
    bad[0]       = 0;
    const struct {
        const char          *name;
        std::vector<uint8_t> pdata;
        std::string          error;
    } cases[] = {
        {"wrong conn_id", reply_bytes(kConnId + 1),
         "malformed connect response from the peer: reply does not match: reply conn 8 iface "
         "0x99aabbccddeeff00 credits 16 max_am 4096, expected reply to conn 7"},
        {"a request", request,
         "malformed connect response from the peer: reply does not match: request conn 7 iface "
         "0x99aabbccddeeff00 credits 16 max_am 4096, expected reply to conn 7"},
        {"bad magic", bad,
         "malformed connect response from the peer: bad magic 0x58515000 (expected 0x58515057, "
         "not an xqp peer?)"},
        {"empty", {}, "malformed connect response from the peer: no private data"},
        {"short", std::vector<uint8_t>(10, 0x57),
         "malformed connect response from the peer: private data too short: 10 bytes, need 28"},
    };
    for (const auto &tc : cases) {
        SCOPED_TRACE(tc.name);
        Rig r;
        r.ece.mlx5(0x3);
        r.cm.remote_ece = {kMlx, 0x3};
        r.to_connecting();
        r.take();
        r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, tc.pdata);
        EXPECT_EQ(r.take(), (Calls{"disconnect", "destroy_qp", "destroy_id", "on_failed"}));
        EXPECT_EQ(ConnState::Failed, r.conn->state());
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, r.conn->status());
        EXPECT_EQ(tc.error, r.conn->error());
        EXPECT_EQ(1u, r.conn->attempts());
        EXPECT_EQ(1, r.owner.failed);
        EXPECT_EQ(0, r.owner.established);
        r.conn.reset();
        EXPECT_EQ(r.take(), Calls{});
    }
}

TEST(WireupConnection, ActiveEceRequiredMissingInResponse)
{
    const struct {
        const char *name;
        Ece         reply;
        std::string error;
    } cases[] = {
        {"options missing", {kMlx, 0x1},
         "ece: missing ece options 0x2 (required 0x2, agreed 0x1) (sent vendor 0x15b3 options "
         "0x3, peer replied vendor 0x15b3 options 0x1)"},
        {"no ece", {}, "ece: peer did not negotiate ece, required options 0x2 missing"},
        {"other vendor", {0x1234, 0x3},
         "ece: ece vendor mismatch: peer 0x1234, local 0x15b3 but UCX_XQP_ECE=on requires "
         "options 0x2"},
    };
    for (const auto &tc : cases) {
        SCOPED_TRACE(tc.name);
        Rig r;
        r.ece.mlx5(0x3);
        r.cfg.ece       = strict_policy(0x2);
        r.cm.remote_ece = tc.reply;
        r.to_connecting();
        EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                                   "ibv_query_ece", "set_local_ece 0x15b3:0x3",
                                   "connect qp=257 pdata=28"}));
        r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
        EXPECT_EQ(r.take(), (Calls{"get_remote_ece", "disconnect", "destroy_qp", "destroy_id",
                                   "on_failed"}));
        EXPECT_EQ(ConnState::Failed, r.conn->state());
        EXPECT_EQ(UCS_ERR_UNSUPPORTED, r.conn->status());
        EXPECT_EQ(tc.error, r.conn->error());
        EXPECT_TRUE(r.ece.set_qps.empty());
        EXPECT_EQ(1, r.owner.failed);
    }
}

TEST(WireupConnection, ActiveModifyFailureAfterResponse)
{
    Rig r;
    r.ece.rxe();
    r.cm.inject("modify RTS", EIO);
    r.to_connecting();
    r.take();
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    EXPECT_EQ(r.take(), (Calls{"get_remote_ece", "modify INIT", "modify RTR", "modify RTS",
                               "disconnect", "destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.conn->status());
    EXPECT_EQ("ibv_modify_qp(RTS): " + strerr(EIO), r.conn->error());
    EXPECT_EQ(1u, r.conn->attempts());
}

TEST(WireupConnection, ActiveEstablishFailure)
{
    Rig r;
    r.ece.rxe();
    r.cm.inject("establish", EINVAL);
    r.to_connecting();
    r.take();
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    EXPECT_EQ(r.take(), (Calls{"get_remote_ece", "modify INIT", "modify RTR", "modify RTS",
                               "establish", "disconnect", "destroy_qp", "destroy_id",
                               "on_failed"}));
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.conn->status());
    EXPECT_EQ("rdma_establish: " + strerr(EINVAL), r.conn->error());
    EXPECT_EQ(0, r.owner.established);
}

TEST(WireupConnection, ActiveEceOfferFailureDoesNotConnect)
{
    Rig r;
    r.ece.rxe();
    r.cfg.ece = strict_policy(0x1);
    r.make();
    r.conn->connect(Rig::dst());
    advance_to(r, ConnState::Connecting);
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "ibv_query_ece", "destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, r.conn->status());
    EXPECT_EQ("ece: provider has no ece (ibv_query_ece: " + strerr(EOPNOTSUPP) +
                      ") but UCX_XQP_ECE=on requires options 0x1",
              r.conn->error());
    EXPECT_EQ(1u, r.conn->attempts());
    EXPECT_TRUE(r.cm.connects.empty());
    EXPECT_EQ(1, r.owner.failed);
}

TEST(WireupConnection, ActiveEceOfferMissingLocalOption)
{
    Rig r;
    r.ece.mlx5(0x1);
    r.cfg.ece = strict_policy(0x2);
    r.make();
    r.conn->connect(Rig::dst());
    advance_to(r, ConnState::Connecting);
    EXPECT_EQ(0, static_cast<int>(count(r.log, "connect qp=257 pdata=28")));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, r.conn->status());
    EXPECT_EQ("ece: missing ece options 0x2 (required 0x2, agreed 0x1) (local vendor 0x15b3 "
              "options 0x1)",
              r.conn->error());
}
