/*
 * xqp - hello message in the rdma_cm private data (see private_data.h).
 */
#include "wireup/private_data.h"

#include <cstdio>

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

size_t encode(const Hello &h, uint8_t *buf, size_t len)
{
    if ((buf == nullptr) || (len < kHelloSize)) {
        return 0;
    }

    put_le<uint32_t>(buf + kOffMagic, kHelloMagic);
    put_le<uint8_t>(buf + kOffVersion, kHelloVersion);
    put_le<uint8_t>(buf + kOffKind, static_cast<uint8_t>(h.kind));
    put_le<uint16_t>(buf + kOffFlags, 0);
    put_le<uint32_t>(buf + kOffConnId, h.conn_id);
    put_le<uint64_t>(buf + kOffUuid, h.iface_uuid);
    put_le<uint16_t>(buf + kOffCredits, h.credits);
    put_le<uint16_t>(buf + kOffReserved, 0);
    put_le<uint32_t>(buf + kOffMaxAm, h.max_am_size);
    return kHelloSize;
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
    if (version != kHelloVersion) {
        return fail(why, "unsupported version " + std::to_string(version) +
                                 " (this xqp speaks " +
                                 std::to_string(kHelloVersion) + ")");
    }

    const uint8_t kind = p[kOffKind];
    if ((kind != static_cast<uint8_t>(Hello::Kind::Request)) &&
        (kind != static_cast<uint8_t>(Hello::Kind::Reply))) {
        return fail(why, "unknown kind " + std::to_string(kind));
    }

    const uint16_t flags = get_le<uint16_t>(p + kOffFlags);
    if (flags != 0) {
        return fail(why, "unknown flags " + hex(flags) + " (must be 0 in version " +
                                 std::to_string(kHelloVersion) + ")");
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

    return h;
}

std::string to_string(const Hello &h)
{
    std::string s;
    switch (h.kind) {
    case Hello::Kind::Request: s = "request"; break;
    case Hello::Kind::Reply:   s = "reply"; break;
    default: s = "kind " + std::to_string(static_cast<unsigned>(h.kind)); break;
    }
    return s + " conn " + std::to_string(h.conn_id) + " iface " + hex(h.iface_uuid) +
           " credits " + std::to_string(h.credits) + " max_am " +
           std::to_string(h.max_am_size);
}

} // namespace xqp::wireup
