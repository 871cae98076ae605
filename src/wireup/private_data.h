/*
 * xqp - the hello message carried in rdma_connect()'s and rdma_accept()'s
 * private data.
 *
 * RDMA_PS_TCP leaves at most 56 bytes of private data in a REQ, and the CM
 * pads what it delivers to its maximum with zeros: decode() accepts trailing
 * bytes. The layout is explicit little-endian (never a memcpy of a struct):
 *
 *   off size field
 *     0    4 magic        0x58515057 ("XQPW")
 *     4    1 version      1
 *     5    1 kind         Hello::Kind
 *     6    2 flags        must be 0 in version 1
 *     8    4 conn_id
 *    12    8 iface_uuid
 *    20    2 credits
 *    22    2 reserved     must be 0
 *    24    4 max_am_size  must not be 0
 *    28      (kHelloSize)
 *
 * Kinds: 1 request (rdma_connect), 2 reply (rdma_accept), 3 yield (the
 * private data of rdma_reject, version 2 only).
 *
 * Version 2 is sent when the sender shares connections (UCX_XQP_SHARE,
 * iface/conn_table.h); it keeps version 1's fields and appends who the sender
 * is, so that the receiver can match the connection to its own endpoint
 * toward the sender:
 *
 *     6    2 flags        bit 0 (kHelloFlagShare): the sender shares
 *                         connections; bit 1 (kHelloFlagSends, replies
 *                         only): the replying side has an endpoint that
 *                         sends on this connection from the start (both
 *                         sides connected at once, and it took this
 *                         connection); no other bit may be set
 *    28    4 pair_sn      requests: the sender's endpoint number toward the
 *                         receiver's interface (1, 2, ...); replies echo it
 *    32    1 family       4 or 6: the sender's listener address
 *    33    1 reserved     must be 0
 *    34    2 port         the sender's listener port
 *    36   16 ip           the IPv4 address in the first 4 bytes, or IPv6
 *    52      (kHelloSizeV2)
 *
 * A version 1 peer rejects version 2 (it checks the version), so xqp sends
 * version 1 unless sharing is on, and decodes both.
 */
#ifndef XQP_WIREUP_PRIVATE_DATA_H
#define XQP_WIREUP_PRIVATE_DATA_H

#include <sys/socket.h>

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace xqp::wireup {

constexpr uint32_t kHelloMagic   = 0x58515057u; /* "XQPW" */
constexpr uint8_t  kHelloVersion = 1;
constexpr uint8_t  kHelloVersionShare = 2;
constexpr size_t   kHelloSize    = 28;
constexpr size_t   kHelloSizeV2  = 52;
constexpr uint16_t kHelloFlagShare = 1;
constexpr uint16_t kHelloFlagSends = 2;
/* private data a REQ carries with RDMA_PS_TCP */
constexpr size_t   kHelloMaxPrivateData = 56;
static_assert(kHelloSizeV2 <= kHelloMaxPrivateData,
              "the hello must fit in a connect request's private data");

/* An interface's rdma_cm listener, as peers know it (its address): the key
 * connections are matched by. Ordered, so that two peers connecting to each
 * other at once agree on which of them keeps its connection. */
struct ListenerKey {
    uint8_t                 family = 0; /* 0: unknown, 4 or 6 */
    uint16_t                port   = 0; /* host order */
    std::array<uint8_t, 16> ip     = {};

    bool known() const { return family != 0; }
    auto operator<=>(const ListenerKey &) const = default;
};

/* The key of an AF_INET/AF_INET6 address; unknown for anything else. */
ListenerKey listener_key(const sockaddr_storage &addr);
/* "10.77.0.1:43567", "[fe80::1]:43567", "unknown" */
std::string to_string(const ListenerKey &key);

struct Hello {
    /* Yield (version 2 only): a reject's private data, when both sides
     * connected to each other at once and the sender's connection is the
     * one to keep (iface/conn_table.h) */
    enum class Kind : uint8_t { Request = 1, Reply = 2, Yield = 3 };
    Kind     kind        = Kind::Request;
    uint32_t conn_id     = 0; /* active side's connection number; the passive side echoes it */
    uint64_t iface_uuid  = 0; /* sender's interface id (logs, self-connection detection) */
    uint16_t credits     = 0; /* receive credits granted to the peer (AM flow control) */
    uint32_t max_am_size = 0; /* largest active message the sender can receive */
    /* version 2 only (version 1: false, 0, unknown) */
    uint8_t     version  = kHelloVersion;
    bool        share    = false;
    bool        sends    = false; /* replies: the replying side sends on the connection */
    uint32_t    pair_sn  = 0;
    ListenerKey listener = {};

    bool operator==(const Hello &) const = default;
};

/* Writes h (kHelloSize bytes for version 1, kHelloSizeV2 for version 2) to
 * buf and returns how many; 0 (nothing written) when buf is null or len is
 * smaller. Does not validate h. */
size_t encode(const Hello &h, uint8_t *buf, size_t len);

/* Parses the hello at data (len may be larger: CM padding).
 * On error returns nullopt and, when why is not null, a lowercase reason. */
std::optional<Hello> decode(const void *data, size_t len, std::string *why);

/* "request conn 7 iface 0x... credits 32 max_am 8192" (for logs) */
std::string to_string(const Hello &h);

} // namespace xqp::wireup

#endif
