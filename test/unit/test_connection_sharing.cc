/*
 * xqp - unit tests of the wireup state machine (wireup::Connection):
 * connection sharing (UCX_XQP_SHARE). The active side sends its listener
 * and pair number, sharing needs both sides, the passive side gets a full
 * send queue and echoes the pair, and the yield rejects.
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

#include <vector>

using namespace xqp::wireup;
using namespace xqp::test;

/* ------------------------------------------------------------------ sharing */

namespace {

ListenerKey key_of(uint32_t ip, uint16_t port)
{
    return listener_key(ipv4(ip, port));
}

std::vector<uint8_t> shared_hello(Hello::Kind kind, uint32_t conn_id, uint32_t pair_sn,
                                  bool share = true)
{
    Hello h       = sample_peer_hello(kind, conn_id);
    h.version     = kHelloVersionShare;
    h.share       = share;
    h.pair_sn     = pair_sn;
    h.listener    = key_of(0xc0000202, 7001);
    std::vector<uint8_t> buf(kHelloMaxPrivateData, 0);
    EXPECT_EQ(kHelloSizeV2, encode(h, buf.data(), buf.size()));
    return buf;
}

/* an active connection with sharing, its request sent (pair pair_sn) */
void connect_shared(Rig &r, uint32_t pair_sn)
{
    r.cfg.share    = true;
    r.cfg.listener = key_of(0xc0000201, 7000);
    r.make();
    r.conn->connect(Rig::dst(), pair_sn);
    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
    ASSERT_EQ(ConnState::Connecting, r.conn->state());
}

} // namespace

TEST(WireupConnection, SharingActiveSendsItsListenerAndPairNumber)
{
    Rig r;
    connect_shared(r, 3);
    ASSERT_EQ(1u, r.cm.connects.size());
    ASSERT_EQ(kHelloSizeV2, r.cm.connects[0].pdata.size());
    const Hello req = decoded(r.cm.connects[0].pdata);
    EXPECT_EQ(kHelloVersionShare, req.version);
    EXPECT_TRUE(req.share);
    EXPECT_EQ(3u, req.pair_sn);
    EXPECT_EQ(r.cfg.listener, req.listener);
    EXPECT_EQ(3u, r.conn->pair_sn());

    /* a peer that shares too: the connection is shared */
    r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, shared_hello(Hello::Kind::Reply, kConnId, 3));
    ASSERT_EQ(ConnState::Connected, r.conn->state());
    EXPECT_TRUE(r.conn->shared());
    EXPECT_EQ(key_of(0xc0000202, 7001), r.conn->peer_hello().listener);
}

TEST(WireupConnection, SharingNeedsBothSides)
{
    {
        /* a version 1 reply (the peer does not share) */
        Rig r;
        r.cfg.share = true;
        r.to_connected_active();
        EXPECT_FALSE(r.conn->shared());
    }
    {
        /* a version 2 reply without the flag */
        Rig r;
        r.cfg.share = true;
        r.to_connecting();
        r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0,
               shared_hello(Hello::Kind::Reply, kConnId, 0, false));
        ASSERT_EQ(ConnState::Connected, r.conn->state());
        EXPECT_FALSE(r.conn->shared());
    }
    {
        /* sharing off here: version 1 hellos, whatever the peer says */
        Rig r;
        r.to_connecting();
        ASSERT_EQ(kHelloSize, r.cm.connects[0].pdata.size());
        r.feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, shared_hello(Hello::Kind::Reply, kConnId, 0));
        EXPECT_FALSE(r.conn->shared());
    }
}

TEST(WireupConnection, SharingPassiveGetsAFullSendQueueAndEchoesThePair)
{
    Rig r;
    r.cfg.share    = true;
    r.cfg.listener = key_of(0xc0000201, 7000);
    r.request(shared_hello(Hello::Kind::Request, 9, 4));
    ASSERT_EQ(ConnState::Accepting, r.conn->state());
    EXPECT_EQ(r.cm.qp_roles, std::vector<QpRole>{QpRole::Active}); /* it may send */
    EXPECT_TRUE(r.conn->shared());
    EXPECT_EQ(4u, r.conn->pair_sn());
    EXPECT_EQ(key_of(0xc0000202, 7001), r.conn->peer_hello().listener);
    ASSERT_EQ(1u, r.cm.accepts.size());
    const Hello rep = decoded(r.cm.accepts[0].pdata);
    EXPECT_EQ(Hello::Kind::Reply, rep.kind);
    EXPECT_TRUE(rep.share);
    EXPECT_EQ(4u, rep.pair_sn);
    EXPECT_EQ(r.cfg.listener, rep.listener);

    /* a request from a peer that does not share: receive-only QP */
    Rig plain;
    plain.cfg.share = true;
    plain.request(request_bytes(9));
    EXPECT_EQ(plain.cm.qp_roles, std::vector<QpRole>{QpRole::Passive});
    EXPECT_FALSE(plain.conn->shared());
    ASSERT_EQ(1u, plain.cm.accepts.size());
    EXPECT_EQ(kHelloSize, plain.cm.accepts[0].pdata.size()) << "a version 1 peer gets version 1";
}

TEST(WireupConnection, SharingYieldRejectMakesTheActiveSideWait)
{
    Rig r;
    r.cfg.connect_timeout_s = 2.0;
    connect_shared(r, 1);
    r.take();
    /* the peer keeps its connection: ours goes, no retry, no failure */
    r.feed(RDMA_CM_EVENT_REJECTED, 28, shared_hello(Hello::Kind::Yield, kConnId, 1));
    EXPECT_EQ(r.take(), (Calls{"destroy_qp", "destroy_id"}));
    EXPECT_EQ(ConnState::Awaiting, r.conn->state());
    EXPECT_TRUE(r.conn->attempting());
    EXPECT_EQ(nullptr, r.conn->id());
    EXPECT_EQ(nullptr, r.conn->qp());
    /* the peer's request never comes: after the timeout, connect again */
    r.conn->check_timeout(100.0);
    r.conn->check_timeout(101.0);
    EXPECT_EQ(ConnState::Awaiting, r.conn->state());
    r.conn->check_timeout(102.5);
    const Calls calls = r.take();
    ASSERT_FALSE(calls.empty());
    EXPECT_EQ(ConnState::ResolvingAddr, r.conn->state());
    EXPECT_EQ(2u, r.conn->attempts());
}

TEST(WireupConnection, SharingYieldOfAnotherPairIsARejectLikeAnyOther)
{
    Rig r;
    connect_shared(r, 1);
    r.take();
    /* a yield for pair 2 does not concern this connection: retried */
    r.feed(RDMA_CM_EVENT_REJECTED, 28, shared_hello(Hello::Kind::Yield, kConnId, 2));
    EXPECT_EQ(ConnState::ResolvingAddr, r.conn->state());
    EXPECT_EQ(2u, r.conn->attempts());
}

TEST(WireupConnection, SharingYieldRequestRejectsWithAYieldHello)
{
    Calls        log;
    RecordingCm  cm{log};
    WireupConfig cfg = test_config();
    cfg.share        = true;
    cfg.listener     = key_of(0xc0000201, 7000);
    CmEvent req;
    req.type = RDMA_CM_EVENT_CONNECT_REQUEST;
    req.id   = cm.passive_id();
    Hello h;
    h.conn_id = 77;
    h.pair_sn = 5;
    EXPECT_EQ(0, yield_request(cm, cfg, req, h));
    EXPECT_EQ(log, (Calls{"reject_yield pdata=52", "destroy_id"}));
    ASSERT_EQ(1u, cm.yields.size());
    const Hello y = decoded(cm.yields[0]);
    EXPECT_EQ(Hello::Kind::Yield, y.kind);
    EXPECT_EQ(5u, y.pair_sn);
    EXPECT_EQ(77u, y.conn_id);
    EXPECT_EQ(cfg.listener, y.listener);
}
