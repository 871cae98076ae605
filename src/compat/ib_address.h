/*
 * xqp - UCX's InfiniBand device address, as far as xqp reads it.
 *
 * UCP's client/server flow (ucp_listener_create, socket-address endpoints)
 * sends only interface addresses in its connection request. The device
 * address of every transport is then the one the connection manager saw for
 * the peer: UCX's rdmacm CM packs the peer's GID as an InfiniBand device
 * address (uct_ib_address_t), not in xqp's own format. On RoCE that GID is
 * the peer's IP address, which is all xqp needs to reach its listener.
 */
#ifndef XQP_COMPAT_IB_ADDRESS_H
#define XQP_COMPAT_IB_ADDRESS_H

#include <cstddef>
#include <cstdint>

namespace xqp::compat {

/* The bytes of an IB device address up to and including a RoCE GID. */
constexpr size_t kIbEthAddressLen = 17;

/* A RoCE device address of UCX's, as far as xqp reads it. */
struct IbEthAddress {
    const uint8_t *gid; /* the raw GID (16 bytes) */
    bool ipv6;          /* the sender says its GID is an IPv6 address */
};

/* Whether dev_addr (at least kIbEthAddressLen bytes) is a well-formed IB
 * device address of the Ethernet link layer (RoCE): the link-layer flag set
 * and a RoCE version UCX knows. Fills *out when it is. */
bool ib_eth_address(const uint8_t *dev_addr, IbEthAddress *out);

} // namespace xqp::compat

#endif
