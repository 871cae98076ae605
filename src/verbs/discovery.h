/*
 * xqp - which RDMA devices and ports can carry an xqp transport.
 *
 * xqp connects its QPs through rdma_cm, so a port serves only when it is
 * ACTIVE and rdma_cm can bind an IP address of some network interface to it.
 * The checks are split into facts gathered from the system (scan_*) and a
 * pure verdict (port_verdict) that unit tests drive directly.
 */
#ifndef XQP_VERBS_DISCOVERY_H
#define XQP_VERBS_DISCOVERY_H

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace xqp::verbs {

/* What the system says about one port. */
struct PortFacts {
    ibv_port_state state      = IBV_PORT_NOP;
    uint8_t        link_layer = IBV_LINK_LAYER_UNSPECIFIED;
    /* IP addresses (numeric strings) rdma_cm binds to this device and port */
    std::vector<std::string> cm_addresses;
};

struct PortVerdict {
    bool        usable = false;
    std::string reason; /* why not, when !usable */
};

/* Pure decision: can this port serve an xqp transport resource? */
PortVerdict port_verdict(const PortFacts &facts);

/* Transport device name, the way uct_ib names it: "mlx5_0:1". */
std::string resource_name(const std::string &device, unsigned port);

/*
 * Inverse of resource_name(): "mlx5_0:1" -> {"mlx5_0", 1}. Throws
 * xqp::Error(UCS_ERR_INVALID_PARAM) naming the input when it is malformed.
 */
std::pair<std::string, unsigned> parse_resource_name(const std::string &name);

/*
 * Data bandwidth of a port in bytes per second from ibv_port_attr's
 * active_width and active_speed codes (line encoding removed: 8b/10b up to
 * QDR, 64b/66b from FDR10). 0 for codes this function does not know.
 */
double port_bandwidth(uint8_t active_width, uint8_t active_speed);

/* Key of the address map: device name and port number. */
using PortKey = std::pair<std::string, unsigned>;

/*
 * Binds an rdma_cm id to every IPv4/IPv6 address of every interface that is
 * up (loopback excluded) and records the device and port rdma_cm chose.
 * Addresses rdma_cm cannot bind (no RDMA device behind the interface) are
 * left out. Never throws for a missing RDMA stack: the map is then empty.
 */
std::map<PortKey, std::vector<std::string>> scan_cm_addresses();

/* Names of all RDMA devices (ibv_get_device_list order). */
std::vector<std::string> scan_device_names();

/* One row per physical port of an opened device. */
struct PortReport {
    unsigned    port = 0;
    PortFacts   facts;
    PortVerdict verdict;
};

std::vector<PortReport>
scan_ports(ibv_context *ctx, const std::map<PortKey, std::vector<std::string>> &addresses);

} // namespace xqp::verbs

#endif
