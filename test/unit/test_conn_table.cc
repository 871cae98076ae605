/*
 * xqp - unit tests of the interface's connection table (iface::ConnTable):
 * matching accepted connections to endpoints, the two flags (we send, the
 * peer sends), what closes a connection and what keeps it, and the
 * simultaneous connect. The connections run on the recording fakes of
 * fake_cm.h: every rdma_cm call they make is in the log.
 */
#include "fake_cm.h"
#include "iface/conn_table.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace xqp::wireup;
using namespace xqp::test;
using xqp::iface::ConnTable;
using xqp::iface::ConnUser;

namespace {

constexpr uint32_t kOurIp  = 0xc0000201; /* 192.0.2.1 */
constexpr uint32_t kPeerIp = 0xc0000202; /* 192.0.2.2 */

/* what the table tells an endpoint */
class FakeUser final : public ConnUser {
public:
    void on_established(Connection &) override { events.push_back("established"); }
    void on_failed(Connection &) override { events.push_back("failed"); }
    void on_closed(Connection &) override { events.push_back("closed"); }
    void on_log(Connection &, const std::string &) override {}
    void on_moved(Connection &to) override
    {
        events.push_back("moved");
        moved_to = &to;
    }

    std::vector<std::string> events;
    Connection              *moved_to = nullptr;
};

/* our interface listens on 192.0.2.1:7000; the peer's on 192.0.2.2:port */
struct TableRig {
    Calls        log;
    RecordingCm  cm{log};
    RecordingEce ece{log};
    WireupConfig cfg;
    uint16_t     peer_port;
    std::unique_ptr<ConnTable> table;

    explicit TableRig(bool share = true, uint16_t peer_port_ = 7001) : peer_port(peer_port_)
    {
        cm.attach(&ece);
        cfg.share    = share;
        cfg.listener = listener_key(ipv4(kOurIp, 7000));
        table        = std::make_unique<ConnTable>(cm, ece, cfg, "test");
    }
    ~TableRig() { table.reset(); }

    sockaddr_storage peer() const { return ipv4(kPeerIp, peer_port); }

    std::vector<uint8_t> hello(Hello::Kind kind, uint32_t conn_id, uint32_t pair_sn,
                               bool sends = false) const
    {
        Hello h;
        h.sends       = sends;
        h.kind        = kind;
        h.conn_id     = conn_id;
        h.iface_uuid  = 0x99;
        h.credits     = 16;
        h.max_am_size = 4096;
        h.version     = kHelloVersionShare;
        h.share       = true;
        h.pair_sn     = pair_sn;
        h.listener    = listener_key(peer());
        std::vector<uint8_t> buf(kHelloMaxPrivateData, 0);
        EXPECT_EQ(kHelloSizeV2, encode(h, buf.data(), buf.size()));
        return buf;
    }

    /* the peer's endpoint number pair_sn connects to us */
    void request(uint32_t pair_sn)
    {
        CmEvent ev;
        ev.type         = RDMA_CM_EVENT_CONNECT_REQUEST;
        ev.id           = cm.passive_id();
        ev.private_data = hello(Hello::Kind::Request, 100 + pair_sn, pair_sn);
        table->accept(ev);
    }

    void feed(Connection &conn, rdma_cm_event_type type, std::vector<uint8_t> pdata = {})
    {
        CmEvent ev;
        ev.type         = type;
        ev.id           = conn.id();
        ev.private_data = std::move(pdata);
        table->on_event(conn, ev);
        table->reap();
    }

    /* our endpoint's own connection, up (its pair number: pair_sn) */
    Connection &open_connected(FakeUser &user, uint32_t conn_id, uint32_t pair_sn)
    {
        Connection &conn = table->open(user, peer(), conn_id);
        EXPECT_TRUE(conn.active());
        feed(conn, RDMA_CM_EVENT_ADDR_RESOLVED);
        feed(conn, RDMA_CM_EVENT_ROUTE_RESOLVED);
        feed(conn, RDMA_CM_EVENT_CONNECT_RESPONSE, hello(Hello::Kind::Reply, conn_id, pair_sn));
        EXPECT_EQ(ConnState::Connected, conn.state());
        return conn;
    }

    size_t count(const std::string &what) const
    {
        return static_cast<size_t>(std::count(log.begin(), log.end(), what));
    }
};

} // namespace

TEST(ConnTable, AnAcceptedConnectionGoesToTheEndpointWithItsPairNumber)
{
    TableRig r;
    r.request(1);
    r.request(2);
    EXPECT_EQ(2u, r.table->held());
    FakeUser first, second, third;
    Connection &c1 = r.table->open(first, r.peer(), 1);
    Connection &c2 = r.table->open(second, r.peer(), 2);
    EXPECT_FALSE(c1.active());
    EXPECT_FALSE(c2.active());
    EXPECT_EQ(1u, c1.pair_sn());
    EXPECT_EQ(2u, c2.pair_sn());
    EXPECT_EQ(0u, r.count("resolve_addr")) << "a matched endpoint connected on its own";
    /* the peer opened no third one: ours connects */
    Connection &c3 = r.table->open(third, r.peer(), 3);
    EXPECT_TRUE(c3.active());
    EXPECT_EQ(3u, c3.pair_sn());
    EXPECT_EQ(1u, r.count("resolve_addr"));
    EXPECT_EQ(3u, r.table->size());
    EXPECT_EQ(2u, r.table->held()) << "an endpoint's own connection in use is not held";
    /* what a connection reports goes to its endpoint */
    r.feed(c1, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(first.events, std::vector<std::string>{"established"});
    EXPECT_TRUE(second.events.empty());
}

TEST(ConnTable, WithoutSharingNothingIsMatched)
{
    TableRig r(false);
    r.request(1);
    FakeUser user;
    Connection &conn = r.table->open(user, r.peer(), 1);
    EXPECT_TRUE(conn.active());
    EXPECT_EQ(0u, conn.pair_sn());
    EXPECT_EQ(1u, r.count("resolve_addr"));
}

/* An endpoint that took the peer's connection, which the peer then closed
 * (it went before it read our bound notice), connects again on its own
 * (Endpoint::after_peer_closed): open() with share false makes a
 * connection of its own that takes no pair number, and the peer's closed
 * one goes when released. */
TEST(ConnTable, AConnectionOfItsOwnTakesNoPairNumber)
{
    TableRig r;
    r.request(1);
    FakeUser user;
    Connection &shared = r.table->open(user, r.peer(), 1);
    ASSERT_FALSE(shared.active());
    r.feed(shared, RDMA_CM_EVENT_ESTABLISHED);
    r.feed(shared, RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(user.events, (std::vector<std::string>{"established", "closed"}));
    Connection &own = r.table->open(user, r.peer(), 2, false);
    EXPECT_TRUE(own.active());
    EXPECT_EQ(0u, own.pair_sn()) << "the peer would match it to an endpoint";
    EXPECT_EQ(1u, r.count("resolve_addr"));
    r.table->release(shared);
    EXPECT_EQ(1u, r.table->size()) << "the closed connection was kept";
    /* the peer's next endpoint (pair 2) meets our next one */
    r.request(2);
    FakeUser next;
    Connection &matched = r.table->open(next, r.peer(), 3);
    EXPECT_FALSE(matched.active());
    EXPECT_EQ(2u, matched.pair_sn());
}

TEST(ConnTable, OurConnectionClosesAtOnceWhenThePeerNeverSent)
{
    TableRig r;
    FakeUser user;
    Connection &conn = r.open_connected(user, 1, 1);
    EXPECT_FALSE(r.table->peer_sends(conn));
    r.log.clear();
    r.table->release(conn);
    EXPECT_EQ(1u, r.count("disconnect"));
    EXPECT_EQ(0u, r.table->size()) << "a connection nobody sends on was kept";
}

TEST(ConnTable, ABoundNoticeKeepsOurConnectionUntilThePeersRelease)
{
    TableRig r;
    FakeUser user;
    Connection &conn     = r.open_connected(user, 1, 1);
    const uint32_t qp_num = conn.qp()->qp_num;
    r.table->on_notice(qp_num, true);
    EXPECT_TRUE(r.table->peer_sends(conn));
    r.log.clear();
    r.table->release(conn);
    EXPECT_EQ(0u, r.count("disconnect")) << "closed a connection the peer sends on";
    EXPECT_EQ(1u, r.table->held());
    /* nothing reaches the endpoint that left */
    r.table->on_notice(qp_num, false);
    EXPECT_EQ(1u, r.count("disconnect"));
    EXPECT_EQ(0u, r.table->size());
    EXPECT_TRUE(user.events.size() == 1u && user.events[0] == "established");
}

TEST(ConnTable, AnAcceptedConnectionStaysUntilThePeersRelease)
{
    TableRig r;
    r.request(1);
    FakeUser user;
    Connection &conn = r.table->open(user, r.peer(), 1);
    r.feed(conn, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_TRUE(r.table->peer_sends(conn));
    const uint32_t qp_num = conn.qp()->qp_num;
    r.table->release(conn);
    EXPECT_EQ(0u, r.count("disconnect"));
    EXPECT_EQ(1u, r.table->held());
    r.table->on_notice(qp_num, false);
    EXPECT_EQ(1u, r.count("disconnect"));
    EXPECT_EQ(0u, r.table->size());
}

TEST(ConnTable, APeerReleaseOfAnUnmatchedConnectionClosesIt)
{
    /* the peer's endpoints 1 and 2 connect; its endpoint 1 goes before
     * ours is created */
    TableRig r;
    r.request(1);
    r.request(2);
    EXPECT_EQ(2u, r.table->held());
    r.log.clear();
    r.table->on_notice(0x101, false); /* the fake numbers QPs in order */
    EXPECT_EQ(1u, r.count("destroy_id")) << "still accepting: closed without a disconnect";
    EXPECT_EQ(1u, r.table->held());
    FakeUser first, second;
    EXPECT_TRUE(r.table->open(first, r.peer(), 1).active())
            << "bound to a connection the peer released";
    EXPECT_FALSE(r.table->open(second, r.peer(), 2).active());
}

TEST(ConnTable, ANoticeOnAnUnknownQpChangesNothing)
{
    TableRig r;
    r.request(1);
    r.table->on_notice(0x999, false);
    EXPECT_EQ(0u, r.count("disconnect"));
    EXPECT_EQ(1u, r.table->held());
}

TEST(ConnTable, AFailedConnectionNobodySendsOnIsDestroyed)
{
    TableRig r;
    r.request(1);
    FakeUser user;
    Connection *conn = &r.table->open(user, r.peer(), 1);
    r.feed(*conn, RDMA_CM_EVENT_REJECTED);
    EXPECT_EQ(user.events, std::vector<std::string>{"failed"});
    EXPECT_EQ(1u, r.table->size()) << "destroyed while its endpoint still uses it";
    r.table->release(*conn);
    EXPECT_EQ(0u, r.table->size());
}

TEST(ConnTable, AConnectionEndsWhenItsPeerDisconnectsAndNobodySendsOnIt)
{
    /* two connections: what ends one leaves the other alone */
    TableRig r;
    r.request(1);
    r.request(2);
    FakeUser a, b;
    Connection &ca = r.table->open(a, r.peer(), 1);
    Connection &cb = r.table->open(b, r.peer(), 2);
    r.feed(ca, RDMA_CM_EVENT_ESTABLISHED);
    r.feed(cb, RDMA_CM_EVENT_ESTABLISHED);
    r.table->release(ca);
    EXPECT_EQ(2u, r.table->size()) << "closed a connection the peer sends on";
    r.feed(ca, RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(1u, r.table->size()) << "a connection nobody sends on outlived its peer";
    r.feed(cb, RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(b.events, (std::vector<std::string>{"established", "closed"}));
    EXPECT_EQ(1u, r.table->size()) << "destroyed while its endpoint still uses it";
    r.table->release(cb);
    EXPECT_EQ(0u, r.table->size());
}

TEST(ConnTable, AnAttemptWaitsWhileItsPeerAnswersOthers)
{
    /* a burst of attempts to one peer: the peer answers them one by one,
     * and the last ones wait longer than the connect timeout in all. Each
     * answer restarts the others' clocks: a busy peer is not a silent one */
    TableRig r;
    r.cfg.connect_timeout_s = 10.0;
    r.table = std::make_unique<ConnTable>(r.cm, r.ece, r.cfg, "test");
    FakeUser first, second;
    Connection &a = r.table->open(first, r.peer(), 1);
    Connection &b = r.table->open(second, r.peer(), 2);
    for (Connection *conn : {&a, &b}) {
        r.feed(*conn, RDMA_CM_EVENT_ADDR_RESOLVED);
        r.feed(*conn, RDMA_CM_EVENT_ROUTE_RESOLVED);
        r.table->check_timeout(*conn, 0.0);
    }
    r.feed(a, RDMA_CM_EVENT_CONNECT_RESPONSE, r.hello(Hello::Kind::Reply, 1, 1));
    EXPECT_EQ(ConnState::Connected, a.state());
    r.table->check_timeout(b, 9.0);
    r.table->check_timeout(b, 12.0);
    EXPECT_EQ(1u, b.attempts()) << "timed out while its peer was answering";
    EXPECT_EQ(ConnState::Connecting, b.state());
    /* then the peer falls silent */
    r.table->check_timeout(b, 19.5);
    EXPECT_EQ(2u, b.attempts()) << "no retry after 10.5 s of silence";
}

TEST(ConnTable, BothSidesConnectingKeepTheLowerListenersConnection)
{
    {
        /* ours (port 7000) is lower than the peer's (7001): the peer's
         * request is refused with a Yield, our attempt goes on */
        TableRig r(true, 7001);
        FakeUser user;
        Connection &ours = r.table->open(user, r.peer(), 1);
        r.feed(ours, RDMA_CM_EVENT_ADDR_RESOLVED);
        r.request(1);
        EXPECT_EQ(1u, r.count("reject_yield pdata=52"));
        EXPECT_EQ(1u, r.table->size());
        EXPECT_EQ(nullptr, user.moved_to);
        EXPECT_TRUE(ours.attempting());
    }
    {
        /* the peer's (6999) is lower: our endpoint moves to it, and its
         * own attempt goes */
        TableRig r(true, 6999);
        FakeUser user;
        Connection &ours = r.table->open(user, r.peer(), 1);
        r.feed(ours, RDMA_CM_EVENT_ADDR_RESOLVED);
        r.log.clear();
        r.request(1);
        EXPECT_EQ(0u, r.count("reject_yield pdata=52"));
        EXPECT_EQ(1u, r.count("destroy_id")) << "our attempt's id stayed";
        EXPECT_EQ(1u, r.table->size());
        ASSERT_NE(nullptr, user.moved_to);
        EXPECT_FALSE(user.moved_to->active());
        r.feed(*user.moved_to, RDMA_CM_EVENT_ESTABLISHED);
        EXPECT_EQ(user.events, (std::vector<std::string>{"moved", "established"}));
        /* the moved endpoint's connection is not offered to another */
        FakeUser next;
        EXPECT_TRUE(r.table->open(next, r.peer(), 2).active());
    }
}

/* both sides connect at once and our endpoint takes the peer's connection:
 * the reply tells the peer that we send on it, before any message of ours
 * (without it, a peer that closed its endpoint first disconnected, and our
 * endpoint failed: UCX 1.13.1's test_ucp_am_nbx.max_short_thresh_*) */
TEST(ConnTable, TheReplySaysWhenOurEndpointTookThePeersConnection)
{
    TableRig r(true, 6999);
    FakeUser user;
    Connection &ours = r.table->open(user, r.peer(), 1);
    r.feed(ours, RDMA_CM_EVENT_ADDR_RESOLVED);
    r.request(1); /* crosses ours: the peer's (6999) is kept */
    r.request(2); /* no endpoint of ours is waiting for this one */
    ASSERT_EQ(2u, r.cm.accepts.size());
    const auto taken = decode(r.cm.accepts[0].pdata.data(), r.cm.accepts[0].pdata.size(), nullptr);
    const auto other = decode(r.cm.accepts[1].pdata.data(), r.cm.accepts[1].pdata.size(), nullptr);
    ASSERT_TRUE(taken && other);
    EXPECT_EQ(Hello::Kind::Reply, taken->kind);
    EXPECT_TRUE(taken->sends) << "the reply of the connection our endpoint took";
    EXPECT_FALSE(other->sends) << "nobody of ours sends on the other one yet";
}

TEST(ConnTable, AReplySayingThePeerSendsKeepsOurConnectionUntilThePeersRelease)
{
    TableRig r;
    FakeUser user;
    Connection &conn = r.table->open(user, r.peer(), 1);
    r.feed(conn, RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(conn, RDMA_CM_EVENT_ROUTE_RESOLVED);
    r.feed(conn, RDMA_CM_EVENT_CONNECT_RESPONSE, r.hello(Hello::Kind::Reply, 1, 1, true));
    ASSERT_EQ(ConnState::Connected, conn.state());
    EXPECT_TRUE(r.table->peer_sends(conn)) << "learned from the reply, no notice needed";
    const uint32_t qp_num = conn.qp()->qp_num;
    r.log.clear();
    r.table->release(conn);
    EXPECT_EQ(0u, r.count("disconnect")) << "closed a connection the peer sends on";
    EXPECT_EQ(1u, r.table->held());
    r.table->on_notice(qp_num, false); /* the peer's release */
    EXPECT_EQ(1u, r.count("disconnect"));
    EXPECT_EQ(0u, r.table->size());
}

TEST(ConnTable, ARetriedRequestReplacesTheOneBefore)
{
    TableRig r;
    r.request(1);
    r.request(1); /* the peer's first attempt timed out on its side */
    FakeUser user;
    Connection &conn = r.table->open(user, r.peer(), 1);
    EXPECT_FALSE(conn.active());
    EXPECT_EQ(0x102u, conn.qp()->qp_num) << "bound to the older request";
}

TEST(ConnTable, AttemptsBeyondTheWindowWaitTheirTurn)
{
    /* a window of 2: a burst of 4 endpoints sends 2 attempts, and each
     * attempt that ends starts the oldest queued one */
    TableRig r(false);
    r.cfg.connect_window    = 2;
    r.cfg.connect_timeout_s = 10.0;
    r.table = std::make_unique<ConnTable>(r.cm, r.ece, r.cfg, "test");
    FakeUser ua, ub, uc, ud;
    Connection &a = r.table->open(ua, r.peer(), 1);
    Connection &b = r.table->open(ub, r.peer(), 2);
    Connection &c = r.table->open(uc, r.peer(), 3);
    Connection &d = r.table->open(ud, r.peer(), 4);
    EXPECT_EQ(2u, r.count("resolve_addr")) << "attempts beyond the window went out";
    EXPECT_EQ(ConnState::Queued, c.state());
    EXPECT_EQ(ConnState::Queued, d.state());
    EXPECT_TRUE(c.attempting()) << "a queued endpoint is still connecting";
    EXPECT_EQ(nullptr, c.id());
    /* a queued attempt does not time out: its wait is the others' */
    r.table->check_timeout(c, 0.0);
    r.table->check_timeout(c, 60.0);
    EXPECT_EQ(ConnState::Queued, c.state());
    EXPECT_EQ(0u, c.attempts());
    /* b's attempt fails and is retried: the retry keeps its place */
    r.feed(b, RDMA_CM_EVENT_ADDR_ERROR);
    EXPECT_EQ(2u, b.attempts());
    EXPECT_EQ(3u, r.count("resolve_addr"));
    EXPECT_EQ(ConnState::Queued, c.state()) << "a retry let a queued attempt in";
    /* a connects: c, the oldest queued, goes out; d still waits */
    r.feed(a, RDMA_CM_EVENT_ADDR_RESOLVED);
    r.feed(a, RDMA_CM_EVENT_ROUTE_RESOLVED);
    r.feed(a, RDMA_CM_EVENT_CONNECT_RESPONSE, r.hello(Hello::Kind::Reply, 1, 0));
    EXPECT_EQ(ConnState::Connected, a.state());
    EXPECT_EQ(ConnState::ResolvingAddr, c.state());
    EXPECT_EQ(ConnState::Queued, d.state());
    EXPECT_EQ(4u, r.count("resolve_addr"));
    /* d's endpoint goes before its turn: nothing of it reaches the CM, and
     * the ends of b and c start nothing more */
    r.table->release(d);
    EXPECT_EQ(3u, r.table->size());
    r.log.clear();
    r.feed(b, RDMA_CM_EVENT_ADDR_ERROR);
    r.feed(b, RDMA_CM_EVENT_ADDR_ERROR);
    r.feed(b, RDMA_CM_EVENT_ADDR_ERROR);
    EXPECT_EQ(ConnState::Failed, b.state());
    EXPECT_EQ(ub.events, (std::vector<std::string>{"failed"}));
    r.feed(c, RDMA_CM_EVENT_ADDR_ERROR);
    EXPECT_EQ(3u, r.count("resolve_addr")) << "b's two retries and c's one only";
    EXPECT_EQ(ud.events, (std::vector<std::string>{}));
}

TEST(ConnTable, AnEndpointToItsOwnInterfaceIsNotQueued)
{
    TableRig r(false);
    r.cfg.connect_window = 1;
    r.table = std::make_unique<ConnTable>(r.cm, r.ece, r.cfg, "test");
    FakeUser ua, self;
    Connection &a = r.table->open(ua, r.peer(), 1);
    Connection &own = r.table->open(self, ipv4(kOurIp, 7000), 2);
    EXPECT_TRUE(a.in_flight());
    EXPECT_NE(ConnState::Queued, own.state());
    EXPECT_TRUE(own.loopback());
}

TEST(ConnTable, AQueuedAttemptThePeersRequestCrossesTakesThePeersConnection)
{
    /* ours (7000) is the lower listener, so a crossing attempt of ours
     * would be kept; but a queued one never reached the peer, which will
     * not yield to it: the peer's connection is taken */
    TableRig r(true, 7001);
    r.cfg.connect_window = 1;
    r.table = std::make_unique<ConnTable>(r.cm, r.ece, r.cfg, "test");
    FakeUser ua, ub;
    Connection &a = r.table->open(ua, r.peer(), 1);
    Connection &b = r.table->open(ub, r.peer(), 2);
    EXPECT_EQ(ConnState::Queued, b.state());
    r.request(2);
    EXPECT_EQ(0u, r.count("reject_yield pdata=52"));
    ASSERT_NE(nullptr, ub.moved_to);
    EXPECT_FALSE(ub.moved_to->active());
    EXPECT_EQ(2u, r.table->size()) << "the queued attempt stayed beside the peer's";
    EXPECT_EQ(1u, r.count("resolve_addr")) << "the queued attempt went out after all";
    r.feed(a, RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(ConnState::ResolvingRoute, a.state());
}
