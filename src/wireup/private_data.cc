/*
 * xqp - hello message in the rdma_cm private data (see private_data.h).
 */
#include "wireup/private_data.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>

namespace xqp::wireup {

namespace {

/* field offsets, see the table in private_data.h */
constexpr size_t kOffMagic    = 0;
constexpr size_t kOffVersion  = 4;
constexpr size_t kOffKind     = 5;
constexpr size_t kOffFlags    = 6;
constexpr size_t kOffConnId   = 8;
constexpr size_t kOffUuid     = 12;
constexpr size_t kOffCredits  = 20;
constexpr size_t kOffReserved = 22;
constexpr size_t kOffMaxAm    = 24;
static_assert(kOffMaxAm + 4 == kHelloSize);
/* version 2 */
constexpr size_t kOffPairSn   = 28;
constexpr size_t kOffFamily   = 32;
constexpr size_t kOffReserved2 = 33;
constexpr size_t kOffPort     = 34;
constexpr size_t kOffIp       = 36;
static_assert(kOffIp + 16 == kHelloSizeV2);

template <typename T> void put_le(uint8_t *p, T v)
{
    for (size_t i = 0; i < sizeof(T); ++i) {
        p[i] = static_cast<uint8_t>(v >> (8 * i));
    }
}

template <typename T> T get_le(const uint8_t *p)
{
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
        v = static_cast<T>(v | (static_cast<T>(p[i]) << (8 * i)));
    }
    return v;
}

std::string hex(uint64_t value)
{
    char buf[24];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(value));
    return buf;
}

std::optional<Hello> fail(std::string *why, std::string reason)
{
    if (why != nullptr) {
        *why = std::move(reason);
    }
    return std::nullopt;
}

} // namespace

ListenerKey listener_key(const sockaddr_storage &addr)
{
    ListenerKey key;
    if (addr.ss_family == AF_INET) {
        const auto &in = reinterpret_cast<const sockaddr_in &>(addr);
        key.family     = 4;
        key.port       = ntohs(in.sin_port);
        std::memcpy(key.ip.data(), &in.sin_addr, 4);
    } else if (addr.ss_family == AF_INET6) {
        const auto &in6 = reinterpret_cast<const sockaddr_in6 &>(addr);
        key.family      = 6;
        key.port        = ntohs(in6.sin6_port);
        std::memcpy(key.ip.data(), &in6.sin6_addr, 16);
    }
    return key;
}

std::string to_string(const ListenerKey &key)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (key.family == 4) {
        inet_ntop(AF_INET, key.ip.data(), ip, sizeof(ip));
        return std::string(ip) + ":" + std::to_string(key.port);
    }
    if (key.family == 6) {
        inet_ntop(AF_INET6, key.ip.data(), ip, sizeof(ip));
        return "[" + std::string(ip) + "]:" + std::to_string(key.port);
    }
    return "unknown";
}

size_t encode(const Hello &h, uint8_t *buf, size_t len)
{
    const bool   v2   = (h.version == kHelloVersionShare);
    const size_t size = v2 ? kHelloSizeV2 : kHelloSize;
    if ((buf == nullptr) || (len < size)) {
        return 0;
    }

    put_le<uint32_t>(buf + kOffMagic, kHelloMagic);
    put_le<uint8_t>(buf + kOffVersion, v2 ? kHelloVersionShare : kHelloVersion);
    put_le<uint8_t>(buf + kOffKind, static_cast<uint8_t>(h.kind));
    const uint16_t flags = (h.share ? kHelloFlagShare : 0) | (h.sends ? kHelloFlagSends : 0);
    put_le<uint16_t>(buf + kOffFlags, v2 ? flags : 0);
    put_le<uint32_t>(buf + kOffConnId, h.conn_id);
    put_le<uint64_t>(buf + kOffUuid, h.iface_uuid);
    put_le<uint16_t>(buf + kOffCredits, h.credits);
    put_le<uint16_t>(buf + kOffReserved, 0);
    put_le<uint32_t>(buf + kOffMaxAm, h.max_am_size);
    if (v2) {
        put_le<uint32_t>(buf + kOffPairSn, h.pair_sn);
        put_le<uint8_t>(buf + kOffFamily, h.listener.family);
        put_le<uint8_t>(buf + kOffReserved2, 0);
        put_le<uint16_t>(buf + kOffPort, h.listener.port);
        std::memcpy(buf + kOffIp, h.listener.ip.data(), 16);
    }
    return size;
}

std::optional<Hello> decode(const void *data, size_t len, std::string *why)
{
    if (data == nullptr) {
        return fail(why, "no private data");
    }
    if (len < kHelloSize) {
        return fail(why, "private data too short: " + std::to_string(len) +
                                 " bytes, need " + std::to_string(kHelloSize));
    }

    const auto *p = static_cast<const uint8_t *>(data);

    const uint32_t magic = get_le<uint32_t>(p + kOffMagic);
    if (magic != kHelloMagic) {
        return fail(why, "bad magic " + hex(magic) + " (expected " +
                                 hex(kHelloMagic) + ", not an xqp peer?)");
    }

    const uint8_t version = p[kOffVersion];
    if ((version != kHelloVersion) && (version != kHelloVersionShare)) {
        return fail(why, "unsupported version " + std::to_string(version) +
                                 " (this xqp speaks " + std::to_string(kHelloVersion) +
                                 " and " + std::to_string(kHelloVersionShare) + ")");
    }
    const bool v2 = (version == kHelloVersionShare);
    if (v2 && (len < kHelloSizeV2)) {
        return fail(why, "private data too short for version 2: " + std::to_string(len) +
                                 " bytes, need " + std::to_string(kHelloSizeV2));
    }

    const uint8_t kind = p[kOffKind];
    if ((kind != static_cast<uint8_t>(Hello::Kind::Request)) &&
        (kind != static_cast<uint8_t>(Hello::Kind::Reply)) &&
        (!v2 || (kind != static_cast<uint8_t>(Hello::Kind::Yield)))) {
        return fail(why, "unknown kind " + std::to_string(kind));
    }

    const uint16_t flags = get_le<uint16_t>(p + kOffFlags);
    const uint16_t known = v2 ? (kHelloFlagShare | kHelloFlagSends) : 0;
    if ((flags & ~known) != 0) {
        return fail(why, "unknown flags " + hex(flags) + " (" +
                                 (v2 ? std::string("only 0x1 and 0x2 are defined") :
                                       std::string("must be 0")) +
                                 " in version " + std::to_string(version) + ")");
    }
    if ((flags & kHelloFlagSends) && (kind != static_cast<uint8_t>(Hello::Kind::Reply))) {
        return fail(why, "flag 0x2 (the sender sends on the connection) outside a reply");
    }

    const uint16_t reserved = get_le<uint16_t>(p + kOffReserved);
    if (reserved != 0) {
        return fail(why, "reserved field is " + hex(reserved) + " (must be 0)");
    }

    Hello h;
    h.kind        = static_cast<Hello::Kind>(kind);
    h.conn_id     = get_le<uint32_t>(p + kOffConnId);
    h.iface_uuid  = get_le<uint64_t>(p + kOffUuid);
    h.credits     = get_le<uint16_t>(p + kOffCredits);
    h.max_am_size = get_le<uint32_t>(p + kOffMaxAm);
    if (h.max_am_size == 0) {
        return fail(why, "max_am_size is 0");
    }
    if (!v2) {
        return h;
    }

    h.version         = kHelloVersionShare;
    h.share           = (flags & kHelloFlagShare) != 0;
    h.sends           = (flags & kHelloFlagSends) != 0;
    h.pair_sn         = get_le<uint32_t>(p + kOffPairSn);
    h.listener.family = p[kOffFamily];
    if ((h.listener.family != 0) && (h.listener.family != 4) && (h.listener.family != 6)) {
        return fail(why, "unknown address family " + std::to_string(h.listener.family));
    }
    if (p[kOffReserved2] != 0) {
        return fail(why, "reserved byte 33 is " + hex(p[kOffReserved2]) + " (must be 0)");
    }
    h.listener.port = get_le<uint16_t>(p + kOffPort);
    std::memcpy(h.listener.ip.data(), p + kOffIp, 16);
    return h;
}

std::string to_string(const Hello &h)
{
    std::string s;
    switch (h.kind) {
    case Hello::Kind::Request: s = "request"; break;
    case Hello::Kind::Reply:   s = "reply"; break;
    case Hello::Kind::Yield:   s = "yield"; break;
    default: s = "kind " + std::to_string(static_cast<unsigned>(h.kind)); break;
    }
    return s + " conn " + std::to_string(h.conn_id) + " iface " + hex(h.iface_uuid) +
           " credits " + std::to_string(h.credits) + " max_am " +
           std::to_string(h.max_am_size) +
           ((h.version == kHelloVersionShare) ?
                    " v2" + std::string(h.share ? " share" : "") +
                            std::string(h.sends ? " sends" : "") + " pair " +
                            std::to_string(h.pair_sn) + " from " + to_string(h.listener) :
                    std::string());
}

} // namespace xqp::wireup
