/*
 * xqp - what the unit tests of the wireup state machine
 * (test_connection_*.cc) share: one connection with its recorders
 * (fake_cm.h), driven to a state or fed an event, the peer's hellos, and
 * helpers over the log of calls.
 */
#ifndef XQP_TEST_UNIT_CONNECTION_RIG_H
#define XQP_TEST_UNIT_CONNECTION_RIG_H

#include "fake_cm.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xqp::test {

inline constexpr uint32_t kConnId    = 7;
inline constexpr uint64_t kUuid      = 0x1122334455667788ull;
inline constexpr uint16_t kCredits   = 32;
inline constexpr uint32_t kMaxAm     = 8192;
inline constexpr uint64_t kPeerUuid  = 0x99aabbccddeeff00ull;
inline constexpr uint16_t kPeerCreds = 16;
inline constexpr uint32_t kPeerMaxAm = 4096;

inline WireupConfig test_config()
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
inline Hello sample_peer_hello(Hello::Kind kind, uint32_t conn_id)
{
    Hello h;
    h.kind        = kind;
    h.conn_id     = conn_id;
    h.iface_uuid  = kPeerUuid;
    h.credits     = kPeerCreds;
    h.max_am_size = kPeerMaxAm;
    return h;
}

inline std::vector<uint8_t> hello_bytes(Hello::Kind kind, uint32_t conn_id,
                                        size_t pad_to = kHelloSize)
{
    const Hello h = sample_peer_hello(kind, conn_id);
    std::vector<uint8_t> buf(pad_to < kHelloSize ? kHelloSize : pad_to, 0);
    EXPECT_EQ(kHelloSize, encode(h, buf.data(), buf.size()));
    return buf;
}

inline std::vector<uint8_t> reply_bytes(uint32_t conn_id = kConnId)
{
    return hello_bytes(Hello::Kind::Reply, conn_id);
}

inline std::vector<uint8_t> request_bytes(uint32_t conn_id, size_t pad_to = kHelloSize)
{
    return hello_bytes(Hello::Kind::Request, conn_id, pad_to);
}

inline EcePolicy strict_policy(uint32_t required)
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

inline Hello decoded(const std::vector<uint8_t> &pdata)
{
    std::string why;
    auto        h = decode(pdata.data(), pdata.size(), &why);
    EXPECT_TRUE(h.has_value()) << why;
    return h.value_or(Hello{});
}

inline size_t count(const Calls &calls, const std::string &what)
{
    size_t n = 0;
    for (const auto &c : calls) {
        n += (c == what) ? 1 : 0;
    }
    return n;
}

inline bool contains(const std::string &s, const std::string &needle)
{
    return s.find(needle) != std::string::npos;
}

/* drives the current attempt of r to `at` */
inline void advance_to(Rig &r, ConnState at)
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

} // namespace xqp::test

#endif
