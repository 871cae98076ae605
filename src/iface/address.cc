#include "iface/address.h"

#include "compat/ib_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace xqp::iface {

bool pack_device_address(const sockaddr *addr, uint8_t *dev_addr)
{
    std::memset(dev_addr, 0, kDeviceAddrLen);
    if (addr->sa_family == AF_INET) {
        dev_addr[0] = 4;
        std::memcpy(dev_addr + 1, &reinterpret_cast<const sockaddr_in *>(addr)->sin_addr, 4);
        return true;
    }
    if (addr->sa_family == AF_INET6) {
        dev_addr[0] = 6;
        std::memcpy(dev_addr + 1, &reinterpret_cast<const sockaddr_in6 *>(addr)->sin6_addr, 16);
        return true;
    }
    return false;
}

bool pack_iface_address(const sockaddr *addr, uint8_t *iface_addr)
{
    uint16_t port;
    if (addr->sa_family == AF_INET) {
        port = reinterpret_cast<const sockaddr_in *>(addr)->sin_port;
    } else if (addr->sa_family == AF_INET6) {
        port = reinterpret_cast<const sockaddr_in6 *>(addr)->sin6_port;
    } else {
        return false;
    }
    std::memcpy(iface_addr, &port, sizeof(port));
    return true;
}

/* A RoCE v2 GID is the port's IP address: IPv4 as an IPv4-mapped IPv6
 * address, IPv6 as itself, as the address's IPv6 flag says. A link-local
 * one (RoCE v1, or an IPv6 link-local address) names no address rdma_cm
 * could route to without an interface. */
static std::optional<sockaddr_storage> from_roce_gid(const compat::IbEthAddress &roce,
                                                     uint16_t port, std::string *why)
{
    sockaddr_storage ss = {};
    in6_addr a6;
    std::memcpy(&a6, roce.gid, sizeof(a6));
    if (IN6_IS_ADDR_V4MAPPED(&a6) == roce.ipv6) {
        *why = roce.ipv6 ? "RoCE address flagged IPv6 with an IPv4-mapped GID"
                         : "RoCE address flagged IPv4 with a GID that is no IPv4-mapped address";
        return std::nullopt;
    }
    if (!roce.ipv6) {
        auto *sin       = reinterpret_cast<sockaddr_in *>(&ss);
        sin->sin_family = AF_INET;
        sin->sin_port   = port;
        std::memcpy(&sin->sin_addr, roce.gid + 12, 4);
        if (sin->sin_addr.s_addr == htonl(INADDR_ANY)) {
            *why = "RoCE GID of the unspecified IPv4 address";
            return std::nullopt;
        }
        return ss;
    }
    if (IN6_IS_ADDR_UNSPECIFIED(&a6) || IN6_IS_ADDR_LINKLOCAL(&a6)) {
        *why = "RoCE GID without a routable IP address (link-local or unspecified)";
        return std::nullopt;
    }
    auto *sin6        = reinterpret_cast<sockaddr_in6 *>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port   = port;
    sin6->sin6_addr   = a6;
    return ss;
}

std::optional<sockaddr_storage> unpack_address(const uint8_t *dev_addr, const uint8_t *iface_addr,
                                               std::string *why)
{
    sockaddr_storage ss = {};
    if ((dev_addr == nullptr) || (iface_addr == nullptr)) {
        *why = "missing device or interface address";
        return std::nullopt;
    }
    uint16_t port;
    std::memcpy(&port, iface_addr, sizeof(port));
    if (port == 0) {
        *why = "port 0";
        return std::nullopt;
    }
    if (dev_addr[0] == 4) {
        auto *sin = reinterpret_cast<sockaddr_in *>(&ss);
        sin->sin_family = AF_INET;
        sin->sin_port   = port;
        std::memcpy(&sin->sin_addr, dev_addr + 1, 4);
        for (size_t i = 5; i < kDeviceAddrLen; ++i) {
            if (dev_addr[i] != 0) {
                *why = "garbage after the IPv4 address";
                return std::nullopt;
            }
        }
        if (sin->sin_addr.s_addr == htonl(INADDR_ANY)) {
            *why = "unspecified IPv4 address";
            return std::nullopt;
        }
        return ss;
    }
    if (dev_addr[0] == 6) {
        auto *sin6 = reinterpret_cast<sockaddr_in6 *>(&ss);
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port   = port;
        std::memcpy(&sin6->sin6_addr, dev_addr + 1, 16);
        if (IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr)) {
            *why = "unspecified IPv6 address";
            return std::nullopt;
        }
        return ss;
    }
    compat::IbEthAddress roce;
    if (compat::ib_eth_address(dev_addr, &roce)) {
        return from_roce_gid(roce, port, why);
    }
    *why = "unknown address family " + std::to_string(dev_addr[0]) +
           " (neither xqp's nor a RoCE device address)";
    return std::nullopt;
}

std::string to_string(const sockaddr_storage &addr)
{
    char buf[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
        const auto *sin = reinterpret_cast<const sockaddr_in *>(&addr);
        inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
        return std::string(buf) + ":" + std::to_string(ntohs(sin->sin_port));
    }
    if (addr.ss_family == AF_INET6) {
        const auto *sin6 = reinterpret_cast<const sockaddr_in6 *>(&addr);
        inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf));
        return "[" + std::string(buf) + "]:" + std::to_string(ntohs(sin6->sin6_port));
    }
    return "?";
}

} // namespace xqp::iface
