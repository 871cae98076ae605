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
 */
#ifndef XQP_WIREUP_PRIVATE_DATA_H
#define XQP_WIREUP_PRIVATE_DATA_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace xqp::wireup {

constexpr uint32_t kHelloMagic   = 0x58515057u; /* "XQPW" */
constexpr uint8_t  kHelloVersion = 1;
constexpr size_t   kHelloSize    = 28;
/* private data a REQ carries with RDMA_PS_TCP */
constexpr size_t   kHelloMaxPrivateData = 56;
static_assert(kHelloSize <= kHelloMaxPrivateData,
              "the hello must fit in a connect request's private data");

struct Hello {
    enum class Kind : uint8_t { Request = 1, Reply = 2 };
    Kind     kind        = Kind::Request;
    uint32_t conn_id     = 0; /* active side's connection number; the passive side echoes it */
    uint64_t iface_uuid  = 0; /* sender's interface id (logs, self-connection detection) */
    uint16_t credits     = 0; /* receive credits granted to the peer (AM flow control) */
    uint32_t max_am_size = 0; /* largest active message the sender can receive */

    bool operator==(const Hello &) const = default;
};

/* Writes kHelloSize bytes to buf and returns kHelloSize; 0 (nothing written)
 * when buf is null or len is smaller than kHelloSize. Does not validate h. */
size_t encode(const Hello &h, uint8_t *buf, size_t len);

/* Parses the first kHelloSize bytes of data (len may be larger: CM padding).
 * On error returns nullopt and, when why is not null, a lowercase reason. */
std::optional<Hello> decode(const void *data, size_t len, std::string *why);

/* "request conn 7 iface 0x... credits 32 max_am 8192" (for logs) */
std::string to_string(const Hello &h);

} // namespace xqp::wireup

#endif
