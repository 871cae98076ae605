/*
 * xqp - unit tests of the wireup state machine (wireup::Connection): the
 * handshake. Both sides' happy paths, with and without ECE (mlx5, rxe, off,
 * overridden), and what the passive side rejects or fails on.
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
#include <cstring>
#include <string>
#include <vector>

using namespace xqp::wireup;
using namespace xqp::test;

/* ================================================================== active happy path */

TEST(WireupConnection, ActiveHappyPathMlx5)
{
    Rig r;
    r.ece.mlx5(0x3);
    r.cm.remote_ece = {kMlx, 0x1};
    Connection &c   = r.make();
    EXPECT_EQ(ConnState::Idle, c.state());

    c.connect(Rig::dst());
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr"}));
    EXPECT_EQ(ConnState::ResolvingAddr, c.state());
    EXPECT_TRUE(c.active());
    EXPECT_EQ(1u, c.attempts());
    ASSERT_EQ(1u, r.cm.created_ids.size());
    EXPECT_EQ(r.cm.created_ids[0], c.id());
    EXPECT_EQ(static_cast<void *>(&c), c.id()->context);
    EXPECT_EQ(AF_INET, r.cm.last_dst.sin_family);
    EXPECT_EQ(htons(7000), r.cm.last_dst.sin_port);
    EXPECT_EQ(htonl(0xc0000201), r.cm.last_dst.sin_addr.s_addr);
    EXPECT_EQ(1234, r.cm.last_addr_timeout);

    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(r.take(), (Calls{"resolve_route"}));
    EXPECT_EQ(ConnState::ResolvingRoute, c.state());
    EXPECT_EQ(4321, r.cm.last_route_timeout);

    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
    EXPECT_EQ(r.take(), (Calls{"create_qp", "ibv_query_ece", "set_local_ece 0x15b3:0x3",
                               "connect qp=257 pdata=28"}));
    EXPECT_EQ(r.cm.qp_roles, std::vector<QpRole>{QpRole::Active}); /* full send queue */
    EXPECT_EQ(ConnState::Connecting, c.state());
    ASSERT_NE(nullptr, c.qp());
    EXPECT_EQ(257u, c.qp()->qp_num);
    EXPECT_EQ((std::vector<ibv_qp *>{c.qp()}), r.ece.query_qps);

    ASSERT_EQ(1u, r.cm.connects.size());
    const auto &sent = r.cm.connects[0];
    EXPECT_EQ(c.id(), sent.id);
    EXPECT_EQ(c.qp()->qp_num, sent.params.qp_num);
    EXPECT_EQ(4, sent.params.responder_resources);
    EXPECT_EQ(2, sent.params.initiator_depth);
    EXPECT_EQ(7, sent.params.retry_count);
    EXPECT_EQ(7, sent.params.rnr_retry_count);
    ASSERT_EQ(kHelloSize, sent.pdata.size());
    const Hello req = decoded(sent.pdata);
    EXPECT_EQ(Hello::Kind::Request, req.kind);
    EXPECT_EQ(kConnId, req.conn_id);
    EXPECT_EQ(kUuid, req.iface_uuid);
    EXPECT_EQ(kCredits, req.credits);
    EXPECT_EQ(kMaxAm, req.max_am_size);

    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    EXPECT_EQ(r.take(), (Calls{"get_remote_ece", "ibv_set_ece 0x15b3:0x1", "modify INIT",
                               "modify RTR", "modify RTS", "establish", "on_established"}));
    EXPECT_EQ(ConnState::Connected, c.state());
    EXPECT_EQ(UCS_OK, c.status());
    EXPECT_EQ("", c.error());
    EXPECT_EQ(1, r.owner.established);
    EXPECT_EQ(0, r.owner.failed);
    EXPECT_EQ(0, r.owner.closed);
    EXPECT_EQ(1u, c.attempts());
    EXPECT_EQ((std::vector<ibv_qp *>{c.qp()}), r.ece.set_qps);

    /* the peer's hello is kept */
    EXPECT_EQ(Hello::Kind::Reply, c.peer_hello().kind);
    EXPECT_EQ(kConnId, c.peer_hello().conn_id);
    EXPECT_EQ(kPeerUuid, c.peer_hello().iface_uuid);
    EXPECT_EQ(kPeerCreds, c.peer_hello().credits);
    EXPECT_EQ(kPeerMaxAm, c.peer_hello().max_am_size);

    /* what was negotiated */
    EXPECT_EQ("0x15b3:0x3", ece_str(c.ece_result().sent));
    EXPECT_EQ("0x15b3:0x1", ece_str(c.ece_result().received));
    EXPECT_EQ("0x15b3:0x1", ece_str(c.ece_result().agreed));
    EXPECT_TRUE(c.ece_result().applied);
    EXPECT_EQ(0, c.ece_result().set_err);
    EXPECT_EQ(r.owner.lines.back(),
              "active connection 7 established, qp 257, ece: sent vendor 0x15b3 options 0x3, "
              "received vendor 0x15b3 options 0x1, agreed vendor 0x15b3 options 0x1 (applied)");

    /* later events that do not apply change nothing */
    r.feed(RDMA_CM_EVENT_ESTABLISHED);
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    EXPECT_EQ(r.take(), Calls{});
    EXPECT_EQ(1, r.owner.established);
}

TEST(WireupConnection, ActiveHappyPathRxeSendsNoEce)
{
    Rig r;
    r.ece.rxe();
    r.to_connecting();
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "ibv_query_ece", "connect qp=257 pdata=28"}));
    EXPECT_TRUE(r.owner.logged("no ece offered: provider has no ece (ibv_query_ece: " +
                               strerr(EOPNOTSUPP) + ")"));

    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    EXPECT_EQ(r.take(), (Calls{"get_remote_ece", "modify INIT", "modify RTR", "modify RTS",
                               "establish", "on_established"}));
    EXPECT_EQ(ConnState::Connected, r.conn->state());
    EXPECT_FALSE(r.conn->ece_result().sent.present());
    EXPECT_FALSE(r.conn->ece_result().negotiated());
}

TEST(WireupConnection, ActiveEceOffWithoutProviderCalls)
{
    Rig r;
    r.cfg.ece.mode  = EceMode::Off;
    r.cm.remote_ece = {kMlx, 0x3}; /* ignored: nothing was offered */
    r.to_connected_active();
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "connect qp=257 pdata=28", "get_remote_ece", "modify INIT",
                               "modify RTR", "modify RTS", "establish", "on_established"}));
    EXPECT_FALSE(r.conn->ece_result().negotiated());
}

TEST(WireupConnection, ActiveGetRemoteEceFailureMeansNoEce)
{
    Rig r;
    r.ece.mlx5(0x3);
    r.cm.inject("get_remote_ece", ENOTSUP);
    r.to_connecting();
    r.take();
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    /* garbage from the failed call must not reach ibv_set_ece */
    EXPECT_EQ(r.take(), (Calls{"get_remote_ece", "modify INIT", "modify RTR", "modify RTS",
                               "establish", "on_established"}));
    EXPECT_FALSE(r.conn->ece_result().received.present());
}

TEST(WireupConnection, ActiveEceOverrideOnRxe)
{
    Rig r;
    r.ece.rxe();
    r.cfg.ece                = strict_policy(0x1);
    r.cfg.ece.local_override = Ece{kMlx, 0x1};
    r.cm.remote_ece          = {kMlx, 0x1};
    r.to_connecting();
    EXPECT_EQ(r.take(), (Calls{"create_id", "resolve_addr", "resolve_route", "create_qp",
                               "ibv_query_ece", "set_local_ece 0x15b3:0x1",
                               "connect qp=257 pdata=28"}));
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
    /* ibv_set_ece fails with EOPNOTSUPP; with required options that is fatal */
    EXPECT_EQ(r.take(), (Calls{"get_remote_ece", "ibv_set_ece 0x15b3:0x1", "disconnect",
                               "destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, r.conn->status());
    EXPECT_EQ("ece: ibv_set_ece: " + strerr(EOPNOTSUPP) + " (cannot apply required ece options)",
              r.conn->error());
    EXPECT_EQ(EOPNOTSUPP, r.conn->ece_result().set_err);
}

/* ================================================================== passive happy path */

TEST(WireupConnection, PassiveHappyPathMlx5)
{
    Rig r;
    r.ece.mlx5(0x7);
    r.cm.remote_ece = {kMlx, 0x3};
    Connection &c   = r.make(0);
    rdma_cm_id *id  = r.request(request_bytes(0x42, kHelloMaxPrivateData)); /* CM padding */

    EXPECT_EQ(r.take(), (Calls{"create_qp", "get_remote_ece", "ibv_query_ece",
                               "ibv_set_ece 0x15b3:0x3", "modify INIT", "modify RTR",
                               "modify RTS", "ibv_query_ece", "set_local_ece 0x15b3:0x3",
                               "accept qp=257 pdata=28"}));
    EXPECT_EQ(r.cm.qp_roles, std::vector<QpRole>{QpRole::Passive}); /* receives only */
    EXPECT_EQ(ConnState::Accepting, c.state());
    EXPECT_FALSE(c.active());
    EXPECT_EQ(1u, c.attempts());
    EXPECT_EQ(id, c.id());
    EXPECT_EQ(static_cast<void *>(&c), id->context);
    EXPECT_EQ(0x42u, c.conn_id());
    EXPECT_EQ(0x42u, c.peer_hello().conn_id);
    EXPECT_EQ(kPeerUuid, c.peer_hello().iface_uuid);
    EXPECT_EQ(0, r.owner.established);
    EXPECT_EQ((std::vector<ibv_qp *>{c.qp()}), r.ece.set_qps);
    EXPECT_EQ((std::vector<ibv_qp *>{c.qp(), c.qp()}), r.ece.query_qps);

    ASSERT_EQ(1u, r.cm.accepts.size());
    const auto &sent = r.cm.accepts[0];
    EXPECT_EQ(id, sent.id);
    EXPECT_EQ(c.qp()->qp_num, sent.params.qp_num);
    EXPECT_EQ(4, sent.params.responder_resources);
    EXPECT_EQ(2, sent.params.initiator_depth);
    const Hello rep = decoded(sent.pdata);
    EXPECT_EQ(Hello::Kind::Reply, rep.kind);
    EXPECT_EQ(0x42u, rep.conn_id);
    EXPECT_EQ(kUuid, rep.iface_uuid);
    EXPECT_EQ(kCredits, rep.credits);
    EXPECT_EQ(kMaxAm, rep.max_am_size);

    r.feed(RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(r.take(), (Calls{"on_established"}));
    EXPECT_EQ(ConnState::Connected, c.state());
    EXPECT_EQ(1, r.owner.established);
    EXPECT_EQ(0, r.owner.failed);
    EXPECT_EQ("0x15b3:0x3", ece_str(c.ece_result().received));
    EXPECT_EQ("0x15b3:0x3", ece_str(c.ece_result().agreed));
    EXPECT_EQ("0x15b3:0x3", ece_str(c.ece_result().sent));
    EXPECT_TRUE(c.ece_result().applied);
    EXPECT_EQ(r.owner.lines.back(),
              "passive connection 66 established, qp 257, ece: sent vendor 0x15b3 options 0x3, "
              "received vendor 0x15b3 options 0x3, agreed vendor 0x15b3 options 0x3 (applied)");

    r.feed(RDMA_CM_EVENT_ESTABLISHED); /* a second one is ignored */
    EXPECT_EQ(r.take(), Calls{});
    EXPECT_EQ(1, r.owner.established);
}

TEST(WireupConnection, PassivePeerWithoutEceGetsNoEceReply)
{
    Rig r;
    r.ece.mlx5(0x7);
    r.cm.remote_ece = {};
    r.request(request_bytes(3));
    EXPECT_EQ(r.take(), (Calls{"create_qp", "get_remote_ece", "ibv_query_ece", "modify INIT",
                               "modify RTR", "modify RTS", "accept qp=257 pdata=28"}));
    EXPECT_EQ(ConnState::Accepting, r.conn->state());
}

TEST(WireupConnection, PassiveRxeRepliesWithTheAgreement)
{
    /* local override on rxe: ibv_set_ece fails (not strict), the agreement is
     * still what the reply carries */
    Rig r;
    r.ece.rxe();
    r.cfg.ece.local_override = Ece{kMlx, 0x5};
    r.cm.remote_ece          = {kMlx, 0x7};
    r.request(request_bytes(3));
    EXPECT_EQ(r.take(), (Calls{"create_qp", "get_remote_ece", "ibv_query_ece",
                               "ibv_set_ece 0x15b3:0x5", "modify INIT", "modify RTR",
                               "modify RTS", "ibv_query_ece", "set_local_ece 0x15b3:0x5",
                               "accept qp=257 pdata=28"}));
    EXPECT_FALSE(r.conn->ece_result().applied);
    EXPECT_EQ(EOPNOTSUPP, r.conn->ece_result().set_err);
}

/* ================================================================== passive rejects */

TEST(WireupConnection, PassiveEceRequiredOptionsMissingRejectsEce)
{
    Rig r;
    r.ece.mlx5(0x7);
    r.cfg.ece       = strict_policy(0x4);
    r.cm.remote_ece = {kMlx, 0x3}; /* the peer lacks 0x4 */
    Connection &c   = r.make(0);
    rdma_cm_id *id  = r.request(request_bytes(9));

    EXPECT_EQ(r.take(), (Calls{"create_qp", "get_remote_ece", "ibv_query_ece", "reject_ece",
                               "destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, c.state());
    EXPECT_EQ(UCS_ERR_REJECTED, c.status());
    EXPECT_EQ(35, c.reject_reason());
    EXPECT_EQ(kRejectEceStatus, c.reject_reason());
    EXPECT_EQ("rejected (ece): missing ece options 0x4 (required 0x4, agreed 0x3) "
              "(peer vendor 0x15b3 options 0x3, local vendor 0x15b3 options 0x7)",
              c.error());
    EXPECT_EQ(1, r.owner.failed);
    EXPECT_EQ(0, r.owner.established);
    EXPECT_TRUE(r.cm.accepts.empty());
    EXPECT_EQ((std::vector<rdma_cm_id *>{id}), r.cm.destroyed_ids);
    EXPECT_TRUE(r.cm.live_qps.empty());
    EXPECT_TRUE(r.cm.live_ids.empty());

    /* nothing more, also on destruction */
    r.feed(RDMA_CM_EVENT_ESTABLISHED);
    r.conn.reset();
    EXPECT_EQ(r.take(), Calls{});
}

TEST(WireupConnection, PassiveEceRequiredPeerSentNoneRejectsEce)
{
    Rig r;
    r.ece.mlx5(0x7);
    r.cfg.ece       = strict_policy(0x1);
    r.cm.remote_ece = {};
    r.request(request_bytes(9));
    EXPECT_EQ(r.take(), (Calls{"create_qp", "get_remote_ece", "ibv_query_ece", "reject_ece",
                               "destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(UCS_ERR_REJECTED, r.conn->status());
    EXPECT_EQ(35, r.conn->reject_reason());
    EXPECT_EQ("rejected (ece): peer sent no ece, required options 0x1 missing", r.conn->error());
}

TEST(WireupConnection, PassiveMalformedRequestIsRejected)
{
    std::vector<uint8_t> garbage(kHelloMaxPrivateData);
    for (size_t i = 0; i < garbage.size(); ++i) {
        garbage[i] = static_cast<uint8_t>(0xa5 ^ (i * 37));
    }
    auto wrong_magic = request_bytes(5);
    wrong_magic[0] ^= 0xff;
    auto truncated = request_bytes(5);
    truncated.resize(kHelloSize - 1);
    auto wrong_version = request_bytes(5);
    wrong_version[4] = 3;
    auto flags = request_bytes(5);
    flags[6] = 1;
    auto zero_am = request_bytes(5);
    std::memset(zero_am.data() + 24, 0, 4);

    const struct {
        const char          *name;
        std::vector<uint8_t> pdata;
        std::string          reason; /* decode()'s text */
    } cases[] = {
        {"garbage", garbage, "bad magic 0x"},
        {"wrong magic", wrong_magic, "bad magic 0x585150a8 (expected 0x58515057, not an xqp peer?)"},
        {"truncated", truncated, "private data too short: 27 bytes, need 28"},
        {"empty", {}, "no private data"},
        {"wrong version", wrong_version, "unsupported version 3 (this xqp speaks 1 and 2)"},
        {"flags", flags, "unknown flags 0x1 (must be 0 in version 1)"},
        {"max_am 0", zero_am, "max_am_size is 0"},
        {"reply", reply_bytes(5),
         "not a request: reply conn 5 iface 0x99aabbccddeeff00 credits 16 max_am 4096"},
    };
    for (const auto &tc : cases) {
        SCOPED_TRACE(tc.name);
        Rig r;
        r.ece.mlx5(0x3);
        r.cm.remote_ece = {kMlx, 0x3};
        rdma_cm_id *id  = r.request(tc.pdata);
        EXPECT_EQ(r.take(), (Calls{"reject", "destroy_id", "on_failed"}));
        EXPECT_EQ(ConnState::Failed, r.conn->state());
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, r.conn->status());
        EXPECT_EQ(0, r.conn->reject_reason());
        EXPECT_EQ(0u, r.conn->conn_id());
        EXPECT_TRUE(contains(r.conn->error(), "rejected a malformed connect request: " + tc.reason))
                << r.conn->error();
        if (!tc.pdata.empty() && (tc.pdata.size() >= kHelloSize) &&
            (tc.pdata[5] != static_cast<uint8_t>(Hello::Kind::Reply))) {
            std::string why;
            EXPECT_FALSE(decode(tc.pdata.data(), tc.pdata.size(), &why).has_value());
            EXPECT_EQ("rejected a malformed connect request: " + why, r.conn->error());
        }
        EXPECT_EQ((std::vector<rdma_cm_id *>{id}), r.cm.destroyed_ids);
        EXPECT_TRUE(r.cm.created_qps.empty());
        EXPECT_EQ(1, r.owner.failed);
        r.conn.reset();
        EXPECT_EQ(r.take(), Calls{});
    }
}

TEST(WireupConnection, PassiveCreateQpFailureRejects)
{
    Rig r;
    r.cm.inject("create_qp", ENOMEM);
    r.request(request_bytes(5));
    EXPECT_EQ(r.take(), (Calls{"create_qp", "reject", "destroy_id", "on_failed"}));
    EXPECT_EQ(UCS_ERR_NO_RESOURCE, r.conn->status());
    EXPECT_EQ("ibv_create_qp: " + strerr(ENOMEM), r.conn->error());
}

TEST(WireupConnection, PassiveModifyFailureRejects)
{
    Rig r;
    r.ece.rxe();
    r.cm.inject("modify RTR", EINVAL);
    r.request(request_bytes(5));
    EXPECT_EQ(r.take(), (Calls{"create_qp", "get_remote_ece", "ibv_query_ece", "modify INIT",
                               "modify RTR", "reject", "destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.conn->status());
    EXPECT_EQ("ibv_modify_qp(RTR): " + strerr(EINVAL), r.conn->error());
}

TEST(WireupConnection, PassiveAcceptFailure)
{
    Rig r;
    r.ece.rxe();
    r.cm.inject("accept", ECONNRESET);
    r.request(request_bytes(5));
    EXPECT_EQ(r.take(), (Calls{"create_qp", "get_remote_ece", "ibv_query_ece", "modify INIT",
                               "modify RTR", "modify RTS", "accept qp=257 pdata=28",
                               "destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_IO_ERROR, r.conn->status());
    EXPECT_EQ("rdma_accept: " + strerr(ECONNRESET), r.conn->error());
}

TEST(WireupConnection, PassiveRejectedByTheActiveSideFails)
{
    /* the active side rejects our REP (or destroys its id, which sends a REJ):
     * the passive connection must not stay Accepting forever */
    Rig r;
    r.ece.rxe();
    r.request(request_bytes(5));
    r.take();
    r.feed(RDMA_CM_EVENT_REJECTED, 28);
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id", "on_failed"}));
    EXPECT_EQ(ConnState::Failed, r.conn->state());
    EXPECT_EQ(UCS_ERR_CONNECTION_RESET, r.conn->status());
    EXPECT_EQ(28, r.conn->reject_reason());
    EXPECT_EQ("the peer rejected the connection while it was being accepted (reject reason 28)",
              r.conn->error());
    EXPECT_EQ(1u, r.conn->attempts());
}

TEST(WireupConnection, PassiveErrorEventsWhileAccepting)
{
    for (auto type : {RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_CONNECT_ERROR}) {
        SCOPED_TRACE(rdma_event_str(type));
        Rig r;
        r.ece.rxe();
        r.request(request_bytes(5));
        r.take();
        r.feed(type, -ETIMEDOUT);
        EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id", "on_failed"}));
        EXPECT_EQ(ConnState::Failed, r.conn->state());
        EXPECT_EQ(UCS_ERR_IO_ERROR, r.conn->status());
        EXPECT_EQ(std::string("passive connection failed: ") + rdma_event_str(type),
                  r.conn->error());
        EXPECT_EQ(1u, r.conn->attempts()); /* no retry on the passive side */
    }
}
