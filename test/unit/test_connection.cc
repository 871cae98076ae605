/*
 * xqp - unit tests of the wireup state machine (wireup::Connection).
 *
 * The connection talks to rdma_cm/verbs only through CmOps and to the ECE
 * verbs only through EceProvider; here both are recorders that write every
 * call, in order, into one shared log (the owner's callbacks go there too),
 * so each test asserts the exact sequence of calls the state machine makes.
 * The rdma_cm_id / ibv_qp objects are plain structs owned by the fake and
 * never reach a real library.
 */
#include "fake_cm.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace xqp::wireup;

namespace {

using namespace xqp::test;

/* ------------------------------------------------------------------ rig */

constexpr uint32_t kConnId    = 7;
constexpr uint64_t kUuid      = 0x1122334455667788ull;
constexpr uint16_t kCredits   = 32;
constexpr uint32_t kMaxAm     = 8192;
constexpr uint64_t kPeerUuid  = 0x99aabbccddeeff00ull;
constexpr uint16_t kPeerCreds = 16;
constexpr uint32_t kPeerMaxAm = 4096;

WireupConfig test_config()
{
    WireupConfig c;
    c.addr_timeout_ms     = 1234;
    c.route_timeout_ms    = 4321;
    c.max_retries         = 2;
    c.iface_uuid          = kUuid;
    c.credits             = kCredits;
    c.max_am_size         = kMaxAm;
    c.responder_resources = 4;
    c.initiator_depth     = 2;
    return c;
}

/* the peer's hello (version 1) */
Hello sample_peer_hello(Hello::Kind kind, uint32_t conn_id)
{
    Hello h;
    h.kind        = kind;
    h.conn_id     = conn_id;
    h.iface_uuid  = kPeerUuid;
    h.credits     = kPeerCreds;
    h.max_am_size = kPeerMaxAm;
    return h;
}

std::vector<uint8_t> hello_bytes(Hello::Kind kind, uint32_t conn_id, size_t pad_to = kHelloSize)
{
    const Hello h = sample_peer_hello(kind, conn_id);
    std::vector<uint8_t> buf(pad_to < kHelloSize ? kHelloSize : pad_to, 0);
    EXPECT_EQ(kHelloSize, encode(h, buf.data(), buf.size()));
    return buf;
}

std::vector<uint8_t> reply_bytes(uint32_t conn_id = kConnId)
{
    return hello_bytes(Hello::Kind::Reply, conn_id);
}

std::vector<uint8_t> request_bytes(uint32_t conn_id, size_t pad_to = kHelloSize)
{
    return hello_bytes(Hello::Kind::Request, conn_id, pad_to);
}

EcePolicy strict_policy(uint32_t required)
{
    EcePolicy p;
    p.mode     = EceMode::On;
    p.required = required;
    return p;
}

/* One connection with its fakes; the connection goes first on destruction. */
struct Rig {
    Calls          log;
    RecordingCm    cm{log};
    RecordingEce   ece{log};
    RecordingOwner owner{log};
    WireupConfig   cfg = test_config();
    std::unique_ptr<Connection> conn;

    Rig() { cm.attach(&ece); }
    ~Rig() { conn.reset(); }

    Connection &make(uint32_t conn_id = kConnId)
    {
        conn = std::make_unique<Connection>(cm, ece, cfg, owner, conn_id);
        return *conn;
    }

    /* the log so far, which is then cleared */
    Calls take()
    {
        Calls out;
        out.swap(log);
        return out;
    }

    void feed(rdma_cm_event_type type, int status = 0, std::vector<uint8_t> pdata = {})
    {
        CmEvent ev;
        ev.type         = type;
        ev.status       = status;
        ev.id           = conn->id();
        ev.private_data = std::move(pdata);
        conn->on_event(ev);
    }

    static sockaddr_storage dst() { return ipv4(0xc0000201, 7000); /* 192.0.2.1 */ }

    /* active: up to Connecting (the CONNECT_RESPONSE is next) */
    void to_connecting()
    {
        if (!conn) {
            make();
        }
        conn->connect(dst());
        feed(RDMA_CM_EVENT_ADDR_RESOLVED);
        feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
        ASSERT_EQ(ConnState::Connecting, conn->state());
    }

    void to_connected_active()
    {
        to_connecting();
        feed(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, reply_bytes());
        ASSERT_EQ(ConnState::Connected, conn->state());
    }

    /* passive: CONNECT_REQUEST with pdata on a fresh CM-made id */
    rdma_cm_id *request(std::vector<uint8_t> pdata)
    {
        if (!conn) {
            make(0);
        }
        CmEvent ev;
        ev.type         = RDMA_CM_EVENT_CONNECT_REQUEST;
        ev.id           = cm.passive_id();
        ev.private_data = std::move(pdata);
        std::string why;
        const auto hello = decode(ev.private_data.data(), ev.private_data.size(), &why);
        conn->accept_request(ev, hello, why);
        return ev.id;
    }

    void to_connected_passive()
    {
        request(request_bytes(kConnId));
        ASSERT_EQ(ConnState::Accepting, conn->state());
        feed(RDMA_CM_EVENT_ESTABLISHED);
        ASSERT_EQ(ConnState::Connected, conn->state());
    }
};

Hello decoded(const std::vector<uint8_t> &pdata)
{
    std::string why;
    auto        h = decode(pdata.data(), pdata.size(), &why);
    EXPECT_TRUE(h.has_value()) << why;
    return h.value_or(Hello{});
}

size_t count(const Calls &calls, const std::string &what)
{
    size_t n = 0;
    for (const auto &c : calls) {
        n += (c == what) ? 1 : 0;
    }
    return n;
}

bool contains(const std::string &s, const std::string &needle)
{
    return s.find(needle) != std::string::npos;
}

} // namespace

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

/* drives the current attempt of r to `at` */
void advance_to(Rig &r, ConnState at)
{
    if (at == ConnState::ResolvingAddr) {
        return;
    }
    r.feed(RDMA_CM_EVENT_ADDR_RESOLVED);
    if (at == ConnState::ResolvingRoute) {
        return;
    }
    r.feed(RDMA_CM_EVENT_ROUTE_RESOLVED);
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
