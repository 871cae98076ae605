/*
 * Interface addresses: xqp's own device address (family + IP) and UCX's RoCE
 * device address, which UCP's client/server flow hands to ep_create and
 * is_reachable instead of ours.
 */
#include "iface/address.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <cstring>

namespace {

using xqp::iface::kDeviceAddrLen;
using xqp::iface::unpack_address;

const std::array<uint8_t, 2> kPort = {0x1f, 0x90}; /* 8080, network order */

/* UCX's rdmacm CM packing a RoCE peer: GID_INDEX | PATH_MTU | ETH | RoCE
 * version "any", then the GID, the path MTU and the GID index */
std::array<uint8_t, 19> roce_address(const char *ip6)
{
    std::array<uint8_t, 19> a = {};
    a[0] = 0x6b;
    inet_pton(AF_INET6, ip6, a.data() + 1);
    a[17] = 3; /* IBV_MTU_1024 */
    a[18] = 1;
    return a;
}

TEST(Address, OwnIpv4RoundTrip)
{
    sockaddr_in sin = {};
    sin.sin_family  = AF_INET;
    sin.sin_port    = htons(8080);
    inet_pton(AF_INET, "10.77.0.1", &sin.sin_addr);
    uint8_t dev[kDeviceAddrLen], iface[2];
    ASSERT_TRUE(xqp::iface::pack_device_address(reinterpret_cast<sockaddr *>(&sin), dev));
    ASSERT_TRUE(xqp::iface::pack_iface_address(reinterpret_cast<sockaddr *>(&sin), iface));
    std::string why;
    const auto got = unpack_address(dev, iface, &why);
    ASSERT_TRUE(got) << why;
    EXPECT_EQ("10.77.0.1:8080", xqp::iface::to_string(*got));
}

TEST(Address, RoceIpv4MappedGidGivesTheIpv4Address)
{
    const auto dev = roce_address("::ffff:10.77.0.1");
    std::string why;
    const auto got = unpack_address(dev.data(), kPort.data(), &why);
    ASSERT_TRUE(got) << why;
    EXPECT_EQ(AF_INET, got->ss_family);
    EXPECT_EQ("10.77.0.1:8080", xqp::iface::to_string(*got));
}

TEST(Address, RoceGlobalIpv6GidGivesTheIpv6Address)
{
    auto dev = roce_address("2001:db8::7");
    dev[0] |= 0x10; /* the IPv6 flag */
    std::string why;
    const auto got = unpack_address(dev.data(), kPort.data(), &why);
    ASSERT_TRUE(got) << why;
    EXPECT_EQ(AF_INET6, got->ss_family);
    EXPECT_EQ("[2001:db8::7]:8080", xqp::iface::to_string(*got));
}

TEST(Address, RoceLinkLocalGidIsRefusedWithWhy)
{
    auto dev = roce_address("fe80::5054:ff:fe12:3456");
    dev[0] |= 0x10; /* the IPv6 flag */
    std::string why;
    EXPECT_FALSE(unpack_address(dev.data(), kPort.data(), &why));
    EXPECT_NE(std::string::npos, why.find("link-local")) << why;
}

TEST(Address, RoceUnspecifiedIpv4IsRefused)
{
    const auto dev = roce_address("::ffff:0.0.0.0");
    std::string why;
    EXPECT_FALSE(unpack_address(dev.data(), kPort.data(), &why));
    EXPECT_NE(std::string::npos, why.find("unspecified")) << why;
}

TEST(Address, InfinibandAddressIsRefusedWithWhy)
{
    /* link layer InfiniBand: LID and subnet, no IP */
    const uint8_t dev[kDeviceAddrLen] = {0x20, 0x01, 0x00};
    std::string why;
    EXPECT_FALSE(unpack_address(dev, kPort.data(), &why));
    EXPECT_NE(std::string::npos, why.find("unknown address family 32")) << why;
}

TEST(Address, RoceFamilyFlagMustMatchTheGid)
{
    auto v4 = roce_address("::ffff:10.77.0.1");
    v4[0] |= 0x10; /* IPv6 flag on an IPv4-mapped GID */
    auto v6 = roce_address("2001:db8::7"); /* IPv4 flag on a global IPv6 GID */
    std::string why;
    EXPECT_FALSE(unpack_address(v4.data(), kPort.data(), &why));
    EXPECT_NE(std::string::npos, why.find("flagged IPv6")) << why;
    EXPECT_FALSE(unpack_address(v6.data(), kPort.data(), &why));
    EXPECT_NE(std::string::npos, why.find("flagged IPv4")) << why;
}

TEST(Address, UnknownRoceVersionIsNoRoceAddress)
{
    /* 0xee: the Ethernet flag, but RoCE version 7, which UCX never packs
     * (the integration test's 'garbage is not reachable' bytes) */
    std::array<uint8_t, kDeviceAddrLen> dev;
    dev.fill(0xee);
    std::string why;
    EXPECT_FALSE(unpack_address(dev.data(), kPort.data(), &why));
    EXPECT_NE(std::string::npos, why.find("unknown address family 238")) << why;
}

TEST(Address, PortZeroIsRefused)
{
    const auto dev                = roce_address("::ffff:10.77.0.1");
    const std::array<uint8_t, 2> zero = {0, 0};
    std::string why;
    EXPECT_FALSE(unpack_address(dev.data(), zero.data(), &why));
    EXPECT_EQ("port 0", why);
}

} // namespace
