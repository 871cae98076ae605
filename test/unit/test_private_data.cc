#include "wireup/private_data.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

using namespace xqp::wireup;

namespace {

Hello sample(Hello::Kind kind)
{
    Hello h;
    h.kind        = kind;
    h.conn_id     = 0x01020304u;
    h.iface_uuid  = 0x1112131415161718ull;
    h.credits     = 0x2122;
    h.max_am_size = 0x31323334u;
    return h;
}

/* sample(Request), written out by hand from the layout table */
const std::array<uint8_t, kHelloSize> kSampleRequest = {
        0x57, 0x50, 0x51, 0x58,                         /* magic "XQPW" */
        0x01,                                           /* version */
        0x01,                                           /* kind: request */
        0x00, 0x00,                                     /* flags */
        0x04, 0x03, 0x02, 0x01,                         /* conn_id */
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* iface_uuid */
        0x22, 0x21,                                     /* credits */
        0x00, 0x00,                                     /* reserved */
        0x34, 0x33, 0x32, 0x31,                         /* max_am_size */
};

std::vector<uint8_t> encoded(const Hello &h)
{
    std::vector<uint8_t> buf(kHelloSize);
    EXPECT_EQ(kHelloSize, encode(h, buf.data(), buf.size()));
    return buf;
}

/* decode must fail; returns the reason */
std::string reject_reason(const std::vector<uint8_t> &buf)
{
    std::string why;
    const auto  h = decode(buf.data(), buf.size(), &why);
    EXPECT_FALSE(h.has_value());
    return why;
}

} // namespace

TEST(PrivateData, FitsInAConnectRequest)
{
    EXPECT_EQ(28u, kHelloSize);
    EXPECT_LE(kHelloSize, 56u);
    EXPECT_EQ(kHelloMaxPrivateData, 56u);
}

TEST(PrivateData, LayoutIsByteExact)
{
    const auto buf = encoded(sample(Hello::Kind::Request));
    EXPECT_EQ(std::vector<uint8_t>(kSampleRequest.begin(), kSampleRequest.end()), buf);

    /* and the hand-written bytes decode to the same values */
    std::string why;
    const auto  h = decode(kSampleRequest.data(), kSampleRequest.size(), &why);
    ASSERT_TRUE(h.has_value()) << why;
    EXPECT_EQ(sample(Hello::Kind::Request), *h);
}

TEST(PrivateData, ReplyKindByte)
{
    const auto buf = encoded(sample(Hello::Kind::Reply));
    EXPECT_EQ(0x02, buf[5]);
    /* everything else as in the request */
    for (size_t i = 0; i < kHelloSize; ++i) {
        if (i != 5) {
            EXPECT_EQ(kSampleRequest[i], buf[i]) << "byte " << i;
        }
    }
}

TEST(PrivateData, RoundTripBothKindsAndExtremes)
{
    std::vector<Hello> cases;
    for (const auto kind : {Hello::Kind::Request, Hello::Kind::Reply}) {
        Hello lo;
        lo.kind        = kind;
        lo.conn_id     = 0;
        lo.iface_uuid  = 0;
        lo.credits     = 0;
        lo.max_am_size = 1;
        cases.push_back(lo);

        Hello hi;
        hi.kind        = kind;
        hi.conn_id     = 0xffffffffu;
        hi.iface_uuid  = 0xffffffffffffffffull;
        hi.credits     = 0xffff;
        hi.max_am_size = 0xffffffffu;
        cases.push_back(hi);

        Hello mid;
        mid.kind        = kind;
        mid.conn_id     = 0x80000001u;
        mid.iface_uuid  = 0x8000000000000001ull;
        mid.credits     = 0x8001;
        mid.max_am_size = 8192;
        cases.push_back(mid);
    }

    for (const auto &h : cases) {
        const auto  buf = encoded(h);
        std::string why;
        const auto  back = decode(buf.data(), buf.size(), &why);
        ASSERT_TRUE(back.has_value()) << why << " for " << to_string(h);
        EXPECT_EQ(h, *back) << to_string(h) << " came back as " << to_string(*back);
    }
}

TEST(PrivateData, EncodeNeedsRoom)
{
    std::array<uint8_t, 64> buf;
    buf.fill(0xee);
    EXPECT_EQ(0u, encode(sample(Hello::Kind::Request), buf.data(), kHelloSize - 1));
    EXPECT_EQ(0u, encode(sample(Hello::Kind::Request), nullptr, 64));
    for (auto b : buf) {
        EXPECT_EQ(0xee, b); /* nothing written on failure */
    }

    EXPECT_EQ(kHelloSize, encode(sample(Hello::Kind::Request), buf.data(), buf.size()));
    EXPECT_EQ(0xee, buf[kHelloSize]); /* no write past the message */
}

TEST(PrivateData, PaddedInputIsAccepted)
{
    /* the CM delivers its maximum private data, zero padded */
    for (const size_t len : {kHelloSize + 1, size_t(56), size_t(148), size_t(196)}) {
        std::vector<uint8_t> buf(len, 0);
        ASSERT_EQ(kHelloSize, encode(sample(Hello::Kind::Reply), buf.data(), buf.size()));
        std::string why;
        const auto  h = decode(buf.data(), buf.size(), &why);
        ASSERT_TRUE(h.has_value()) << "len " << len << ": " << why;
        EXPECT_EQ(sample(Hello::Kind::Reply), *h);
    }
}

TEST(PrivateData, PaddingContentIsIgnored)
{
    std::vector<uint8_t> buf(56, 0xa5);
    ASSERT_EQ(kHelloSize, encode(sample(Hello::Kind::Request), buf.data(), buf.size()));
    const auto h = decode(buf.data(), buf.size(), nullptr);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(sample(Hello::Kind::Request), *h);
}

TEST(PrivateData, EveryTruncationIsRejected)
{
    const auto full = encoded(sample(Hello::Kind::Request));
    for (size_t len = 0; len < kHelloSize; ++len) {
        /* a copy of exactly len bytes, so reading past it is an ASan error */
        std::vector<uint8_t> cut(full.begin(), full.begin() + len);
        std::string          why;
        const auto h = decode(len ? cut.data() : full.data(), len, &why);
        EXPECT_FALSE(h.has_value()) << "len " << len;
        EXPECT_EQ("private data too short: " + std::to_string(len) + " bytes, need 28", why);
    }
}

TEST(PrivateData, NullIsRejected)
{
    std::string why;
    EXPECT_FALSE(decode(nullptr, 0, &why).has_value());
    EXPECT_EQ("no private data", why);
    why.clear();
    EXPECT_FALSE(decode(nullptr, 56, &why).has_value());
    EXPECT_EQ("no private data", why);
}

TEST(PrivateData, NullReasonPointerIsFine)
{
    std::vector<uint8_t> buf(kHelloSize, 0);
    EXPECT_FALSE(decode(buf.data(), buf.size(), nullptr).has_value());
}

TEST(PrivateData, WrongMagicIsRejectedWithTheValue)
{
    auto buf = encoded(sample(Hello::Kind::Request));
    buf[0]   = 0x78; /* 0x58515078 */
    EXPECT_EQ("bad magic 0x58515078 (expected 0x58515057, not an xqp peer?)",
              reject_reason(buf));

    /* big-endian magic, as a struct memcpy on the wrong host would write */
    buf[0] = 0x58;
    buf[1] = 0x51;
    buf[2] = 0x50;
    buf[3] = 0x57;
    EXPECT_EQ("bad magic 0x57505158 (expected 0x58515057, not an xqp peer?)",
              reject_reason(buf));

    /* all zero (a peer that sent no private data, padded by the CM) */
    EXPECT_EQ("bad magic 0x0 (expected 0x58515057, not an xqp peer?)",
              reject_reason(std::vector<uint8_t>(56, 0)));
}

TEST(PrivateData, UnsupportedVersionIsRejected)
{
    for (const uint8_t v : {0, 3, 255}) {
        auto buf = encoded(sample(Hello::Kind::Request));
        buf[4]   = v;
        EXPECT_EQ("unsupported version " + std::to_string(v) + " (this xqp speaks 1 and 2)",
                  reject_reason(buf));
    }
}

TEST(PrivateData, UnknownKindIsRejected)
{
    for (const uint8_t k : {0, 3, 0x81, 255}) {
        auto buf = encoded(sample(Hello::Kind::Request));
        buf[5]   = k;
        EXPECT_EQ("unknown kind " + std::to_string(k), reject_reason(buf));
    }
}

TEST(PrivateData, NonZeroFlagsAreRejected)
{
    auto buf = encoded(sample(Hello::Kind::Request));
    buf[6]   = 0x01;
    EXPECT_EQ("unknown flags 0x1 (must be 0 in version 1)", reject_reason(buf));
    buf[6] = 0x00;
    buf[7] = 0x80;
    EXPECT_EQ("unknown flags 0x8000 (must be 0 in version 1)", reject_reason(buf));
}

TEST(PrivateData, NonZeroReservedIsRejected)
{
    auto buf = encoded(sample(Hello::Kind::Reply));
    buf[22]  = 0x02;
    EXPECT_EQ("reserved field is 0x2 (must be 0)", reject_reason(buf));
    buf[22] = 0x00;
    buf[23] = 0x01;
    EXPECT_EQ("reserved field is 0x100 (must be 0)", reject_reason(buf));
}

TEST(PrivateData, ZeroMaxAmSizeIsRejected)
{
    auto h        = sample(Hello::Kind::Request);
    h.max_am_size = 0;
    EXPECT_EQ("max_am_size is 0", reject_reason(encoded(h)));
}

TEST(PrivateData, ChecksAreOrderedMagicFirst)
{
    /* several faults at once: the most basic one is reported */
    auto buf = encoded(sample(Hello::Kind::Request));
    buf[4]   = 9;    /* version */
    buf[5]   = 9;    /* kind */
    buf[6]   = 1;    /* flags */
    EXPECT_EQ("unsupported version 9 (this xqp speaks 1 and 2)", reject_reason(buf));
    buf[4] = 1;
    EXPECT_EQ("unknown kind 9", reject_reason(buf));
    buf[0] = 0;
    EXPECT_EQ("bad magic 0x58515000 (expected 0x58515057, not an xqp peer?)",
              reject_reason(buf));
}

namespace {

Hello sample_v2(Hello::Kind kind)
{
    Hello h           = sample(kind);
    h.version         = kHelloVersionShare;
    h.share           = true;
    h.pair_sn         = 0x41424344u;
    h.listener.family = 4;
    h.listener.port   = 0x5152;
    h.listener.ip     = {192, 0, 2, 7};
    return h;
}

std::vector<uint8_t> encoded_v2(const Hello &h)
{
    std::vector<uint8_t> buf(kHelloSizeV2);
    EXPECT_EQ(kHelloSizeV2, encode(h, buf.data(), buf.size()));
    return buf;
}

} // namespace

TEST(PrivateData, Version2FitsAndKeepsVersion1Fields)
{
    EXPECT_EQ(52u, kHelloSizeV2);
    EXPECT_LE(kHelloSizeV2, kHelloMaxPrivateData);
    const auto buf = encoded_v2(sample_v2(Hello::Kind::Request));
    /* version 1's bytes, but for the version and the flags */
    for (size_t i = 0; i < kHelloSize; ++i) {
        if ((i != 4) && (i != 6)) {
            EXPECT_EQ(kSampleRequest[i], buf[i]) << "byte " << i;
        }
    }
    EXPECT_EQ(2, buf[4]);
    EXPECT_EQ(1, buf[6]); /* share */
    EXPECT_EQ(0, buf[7]);
    const std::vector<uint8_t> tail = {0x44, 0x43, 0x42, 0x41, /* pair_sn */
                                       4, 0,                   /* family, reserved */
                                       0x52, 0x51,             /* port */
                                       192, 0, 2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(tail, std::vector<uint8_t>(buf.begin() + kHelloSize, buf.end()));
}

TEST(PrivateData, Version2RoundTripsAndVersion1StillDecodes)
{
    for (const auto kind : {Hello::Kind::Request, Hello::Kind::Reply}) {
        auto h = sample_v2(kind);
        for (const bool share : {false, true}) {
            h.share         = share;
            auto        buf = encoded_v2(h);
            buf.resize(56, 0); /* CM padding */
            std::string why;
            const auto  back = decode(buf.data(), buf.size(), &why);
            ASSERT_TRUE(back.has_value()) << why;
            EXPECT_EQ(h, *back) << to_string(*back);
        }
        h.listener.family = 6;
        h.listener.ip     = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        const auto back   = decode(encoded_v2(h).data(), kHelloSizeV2, nullptr);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(h, *back);
        EXPECT_EQ("[fe80::1]:20818", to_string(back->listener));
    }
    /* a version 1 hello decodes with no sharing and no listener */
    const auto v1 = decode(kSampleRequest.data(), kSampleRequest.size(), nullptr);
    ASSERT_TRUE(v1.has_value());
    EXPECT_EQ(kHelloVersion, v1->version);
    EXPECT_FALSE(v1->share);
    EXPECT_FALSE(v1->listener.known());
}

TEST(PrivateData, YieldIsAVersion2Kind)
{
    auto h = sample_v2(Hello::Kind::Yield);
    const auto back = decode(encoded_v2(h).data(), kHelloSizeV2, nullptr);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(h, *back);
    /* not in version 1 */
    auto v1 = encoded(sample(Hello::Kind::Request));
    v1[5]   = 3;
    EXPECT_EQ("unknown kind 3", reject_reason(v1));
}

TEST(PrivateData, AVersion2ReplySaysWhetherItsSenderSends)
{
    for (const bool sends : {false, true}) {
        auto h  = sample_v2(Hello::Kind::Reply);
        h.sends = sends;
        const auto buf  = encoded_v2(h);
        EXPECT_EQ(sends ? 0x03 : 0x01, buf[6]);
        const auto back = decode(buf.data(), kHelloSizeV2, nullptr);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(h, *back);
    }
    /* version 1 has no flags: nothing of it is written */
    auto v1  = sample(Hello::Kind::Reply);
    v1.sends = true;
    EXPECT_EQ(0, encoded(v1)[6]);
}

TEST(PrivateData, Version2FaultsAreRejectedWithTheReason)
{
    auto buf = encoded_v2(sample_v2(Hello::Kind::Request));
    /* a version 2 hello cut to version 1's size */
    EXPECT_EQ("private data too short for version 2: 28 bytes, need 52",
              reject_reason(std::vector<uint8_t>(buf.begin(), buf.begin() + kHelloSize)));
    EXPECT_EQ("private data too short for version 2: 51 bytes, need 52",
              reject_reason(std::vector<uint8_t>(buf.begin(), buf.end() - 1)));
    auto bad = buf;
    bad[6]   = 0x05;
    EXPECT_EQ("unknown flags 0x5 (only 0x1 and 0x2 are defined in version 2)",
              reject_reason(bad));
    bad    = buf;
    bad[6] = 0x03;
    EXPECT_EQ("flag 0x2 (the sender sends on the connection) outside a reply",
              reject_reason(bad));
    bad     = buf;
    bad[32] = 5;
    EXPECT_EQ("unknown address family 5", reject_reason(bad));
    bad     = buf;
    bad[33] = 1;
    EXPECT_EQ("reserved byte 33 is 0x1 (must be 0)", reject_reason(bad));
}

TEST(PrivateData, ListenerKeysOrderAndPrint)
{
    sockaddr_storage ss = {};
    auto            *in = reinterpret_cast<sockaddr_in *>(&ss);
    in->sin_family      = AF_INET;
    in->sin_port        = htons(4791);
    in->sin_addr.s_addr = htonl(0xc0000201);
    const ListenerKey a = listener_key(ss);
    EXPECT_EQ("192.0.2.1:4791", to_string(a));
    in->sin_port        = htons(4792);
    const ListenerKey b = listener_key(ss);
    EXPECT_LT(a, b);
    EXPECT_NE(a, b);
    sockaddr_storage none = {};
    EXPECT_FALSE(listener_key(none).known());
    EXPECT_EQ("unknown", to_string(listener_key(none)));
}

TEST(PrivateData, RandomGarbageNeverCrashes)
{
    std::mt19937                       rng(20240611u);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<int> length(0, 64);
    size_t                             accepted = 0;

    for (int i = 0; i < 5000; ++i) {
        const size_t         len = static_cast<size_t>(length(rng));
        std::vector<uint8_t> buf(len);
        for (auto &b : buf) {
            b = static_cast<uint8_t>(byte(rng));
        }
        /* every other buffer gets a valid header, so the later checks run too */
        if ((i % 2 == 0) && (len >= 6)) {
            buf[0] = 0x57;
            buf[1] = 0x50;
            buf[2] = 0x51;
            buf[3] = 0x58;
            buf[4] = 1;
            buf[5] = static_cast<uint8_t>(1 + (i / 2) % 2);
            if ((i % 4 == 0) && (len >= kHelloSize)) {
                buf[6] = buf[7] = buf[22] = buf[23] = 0;
            }
        }

        std::string why;
        const auto  h = decode(buf.data(), len, &why);
        if (!h) {
            EXPECT_FALSE(why.empty());
            continue;
        }
        ++accepted;
        ASSERT_GE(len, kHelloSize);
        /* what was accepted re-encodes to the same bytes */
        std::array<uint8_t, kHelloSize> again;
        ASSERT_EQ(kHelloSize, encode(*h, again.data(), again.size()));
        EXPECT_EQ(0, std::memcmp(again.data(), buf.data(), kHelloSize)) << "iteration " << i;
    }
    EXPECT_GT(accepted, 0u); /* the round-trip branch was exercised */
}

TEST(PrivateData, ToStringForLogs)
{
    EXPECT_EQ("request conn 16909060 iface 0x1112131415161718 credits 8482 max_am 825373492",
              to_string(sample(Hello::Kind::Request)));
    Hello h;
    h.kind        = Hello::Kind::Reply;
    h.conn_id     = 7;
    h.iface_uuid  = 0xabc;
    h.credits     = 32;
    h.max_am_size = 8192;
    EXPECT_EQ("reply conn 7 iface 0xabc credits 32 max_am 8192", to_string(h));
}
