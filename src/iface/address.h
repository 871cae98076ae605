/*
 * xqp - what a peer needs to reach an interface's rdma_cm listener.
 *
 *   device address (17 bytes): family (4 or 6), then the IPv4 address in the
 *                              first 4 bytes or the IPv6 address in all 16
 *   interface address (2 bytes): the listener's port, network byte order
 */
#ifndef XQP_IFACE_ADDRESS_H
#define XQP_IFACE_ADDRESS_H

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace xqp::iface {

constexpr size_t kDeviceAddrLen = 17;
constexpr size_t kIfaceAddrLen  = 2;

/* Packs the IP of addr (AF_INET/AF_INET6) into a device address. */
bool pack_device_address(const sockaddr *addr, uint8_t *dev_addr);
/* Packs the port of addr into an interface address. */
bool pack_iface_address(const sockaddr *addr, uint8_t *iface_addr);

/* The listener's sockaddr from a device and an interface address; nullopt
 * (with why) when the bytes are not a valid xqp address. The device address
 * may also be a RoCE device address of UCX's (compat/ib_address.h: what
 * UCP's client/server flow passes), whose GID gives the IP. */
std::optional<sockaddr_storage> unpack_address(const uint8_t *dev_addr, const uint8_t *iface_addr,
                                               std::string *why);

/* "10.77.0.1:43567" / "[fe80::1]:43567" */
std::string to_string(const sockaddr_storage &addr);

} // namespace xqp::iface

#endif
