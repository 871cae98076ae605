#include "common/error.h"
#include "verbs/discovery.h"

#include <gtest/gtest.h>

using namespace xqp::verbs;

static PortFacts facts(ibv_port_state state, std::vector<std::string> addrs)
{
    PortFacts f;
    f.state        = state;
    f.link_layer   = IBV_LINK_LAYER_ETHERNET;
    f.cm_addresses = std::move(addrs);
    return f;
}

TEST(PortVerdict, ActivePortWithAddressServes)
{
    const auto v = port_verdict(facts(IBV_PORT_ACTIVE, {"10.77.0.1"}));
    EXPECT_TRUE(v.usable);
    EXPECT_EQ("", v.reason);
}

TEST(PortVerdict, InactivePortIsSkippedWithItsState)
{
    const auto v = port_verdict(facts(IBV_PORT_DOWN, {"10.77.0.1"}));
    EXPECT_FALSE(v.usable);
    EXPECT_EQ("port is not active (state down)", v.reason);
}

TEST(PortVerdict, PortWithoutRdmaCmAddressIsSkipped)
{
    const auto v = port_verdict(facts(IBV_PORT_ACTIVE, {}));
    EXPECT_FALSE(v.usable);
    EXPECT_EQ("no IP address that rdma_cm can bind to this port", v.reason);
}

TEST(ResourceName, NamedLikeUctIb)
{
    EXPECT_EQ("mlx5_0:1", resource_name("mlx5_0", 1));
    EXPECT_EQ("rxe0:2", resource_name("rxe0", 2));
}

TEST(ResourceName, ParsesBack)
{
    for (const auto &[dev, port] : std::vector<std::pair<std::string, unsigned>>{
                 {"rxe0", 1}, {"mlx5_12", 2}, {"dev:with:colons", 255}}) {
        const auto parsed = parse_resource_name(resource_name(dev, port));
        EXPECT_EQ(dev, parsed.first);
        EXPECT_EQ(port, parsed.second);
    }
}

TEST(ResourceName, MalformedNamesAreRejectedWithReason)
{
    const std::vector<std::pair<std::string, std::string>> cases = {
            {"rxe0", "expected <device>:<port>"},
            {":1", "expected <device>:<port>"},
            {"rxe0:", "port is not a number"},
            {"rxe0:x", "port is not a number"},
            {"rxe0:-1", "port is not a number"},
            {"rxe0:0", "port out of range 1..255"},
            {"rxe0:256", "port out of range 1..255"},
            {"rxe0:99999999999999999999", "port is not a number"},
    };
    for (const auto &[input, why] : cases) {
        try {
            parse_resource_name(input);
            ADD_FAILURE() << "accepted " << input;
        } catch (const xqp::Error &e) {
            EXPECT_EQ(UCS_ERR_INVALID_PARAM, e.status()) << input;
            EXPECT_EQ("invalid transport device name '" + input + "': " + why,
                      std::string(e.what()));
        }
    }
}

TEST(Discovery, ScanningAMachineWithoutRdmaIsNotAnError)
{
    /* On any machine: never throws, and every reported port has a verdict
     * consistent with its facts. */
    const auto addresses = scan_cm_addresses();
    for (const auto &[key, addrs] : addresses) {
        EXPECT_FALSE(key.first.empty());
        EXPECT_GE(key.second, 1u);
        EXPECT_FALSE(addrs.empty());
    }
    const auto names = scan_device_names();
    for (const auto &name : names) {
        EXPECT_FALSE(name.empty());
    }
}

TEST(PortBandwidth, KnownWidthsAndSpeeds)
{
    /* 4x QDR: 40 Gb/s signalling, 32 Gb/s of data */
    EXPECT_DOUBLE_EQ(32e9 / 8, port_bandwidth(2, 4));
    /* 4x EDR: 100 Gb/s of data after 64b/66b */
    EXPECT_DOUBLE_EQ(4 * 25.78125e9 * 64 / 66 / 8, port_bandwidth(2, 32));
    /* 1x SDR */
    EXPECT_DOUBLE_EQ(2e9 / 8, port_bandwidth(1, 1));
    /* 2x HDR */
    EXPECT_DOUBLE_EQ(2 * 53.125e9 * 64 / 66 / 8, port_bandwidth(16, 64));
}

TEST(PortBandwidth, UnknownCodesGiveZero)
{
    EXPECT_EQ(0.0, port_bandwidth(3, 4));
    EXPECT_EQ(0.0, port_bandwidth(2, 3));
    EXPECT_EQ(0.0, port_bandwidth(0, 0));
}
