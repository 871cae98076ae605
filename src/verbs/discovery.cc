#include "verbs/discovery.h"

#include "common/error.h"
#include "verbs/handles.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <memory>

namespace xqp::verbs {

PortVerdict port_verdict(const PortFacts &facts)
{
    PortVerdict v;
    if (facts.state != IBV_PORT_ACTIVE) {
        v.reason = std::string("port is not active (state ") +
                   ibv_port_state_str(facts.state) + ")";
        return v;
    }
    if (facts.cm_addresses.empty()) {
        v.reason = "no IP address that rdma_cm can bind to this port";
        return v;
    }
    v.usable = true;
    return v;
}

std::string resource_name(const std::string &device, unsigned port)
{
    return device + ":" + std::to_string(port);
}

std::pair<std::string, unsigned> parse_resource_name(const std::string &name)
{
    const auto colon = name.rfind(':');
    const auto bad   = [&](const char *why) {
        return Error(UCS_ERR_INVALID_PARAM,
                     "invalid transport device name '" + name + "': " + why);
    };
    if ((colon == std::string::npos) || (colon == 0)) {
        throw bad("expected <device>:<port>");
    }
    const std::string port_str = name.substr(colon + 1);
    if (port_str.empty() || (port_str.size() > 3) ||
        (port_str.find_first_not_of("0123456789") != std::string::npos)) {
        throw bad("port is not a number");
    }
    const unsigned long port = std::stoul(port_str);
    if ((port < 1) || (port > 255)) {
        throw bad("port out of range 1..255");
    }
    return {name.substr(0, colon), static_cast<unsigned>(port)};
}

double port_bandwidth(uint8_t active_width, uint8_t active_speed)
{
    unsigned lanes;
    switch (active_width) {
    case 1:  lanes = 1;  break;
    case 2:  lanes = 4;  break;
    case 4:  lanes = 8;  break;
    case 8:  lanes = 12; break;
    case 16: lanes = 2;  break;
    default: return 0;
    }
    double gbps, encoding;
    switch (active_speed) {
    case 1:   gbps = 2.5;      encoding = 8.0 / 10; break; /* SDR */
    case 2:   gbps = 5.0;      encoding = 8.0 / 10; break; /* DDR */
    case 4:   gbps = 10.0;     encoding = 8.0 / 10; break; /* QDR */
    case 8:   gbps = 10.3125;  encoding = 64.0 / 66; break; /* FDR10 */
    case 16:  gbps = 14.0625;  encoding = 64.0 / 66; break; /* FDR */
    case 32:  gbps = 25.78125; encoding = 64.0 / 66; break; /* EDR */
    case 64:  gbps = 53.125;   encoding = 64.0 / 66; break; /* HDR */
    case 128: gbps = 106.25;   encoding = 64.0 / 66; break; /* NDR */
    default:  return 0;
    }
    return lanes * gbps * encoding * 1e9 / 8;
}

static std::string numeric_address(const sockaddr *sa)
{
    char buf[INET6_ADDRSTRLEN] = {};
    const void *src = (sa->sa_family == AF_INET) ?
            static_cast<const void *>(&reinterpret_cast<const sockaddr_in *>(sa)->sin_addr) :
            static_cast<const void *>(&reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr);
    if (inet_ntop(sa->sa_family, src, buf, sizeof(buf)) == nullptr) {
        return "?";
    }
    return buf;
}

std::map<PortKey, std::vector<std::string>> scan_cm_addresses()
{
    std::map<PortKey, std::vector<std::string>> result;

    ifaddrs *ifa_list = nullptr;
    if (getifaddrs(&ifa_list) != 0) {
        throw_errno("getifaddrs", errno);
    }
    std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(ifa_list, freeifaddrs);

    for (ifaddrs *ifa = ifa_list; ifa != nullptr; ifa = ifa->ifa_next) {
        if ((ifa->ifa_addr == nullptr) ||
            ((ifa->ifa_addr->sa_family != AF_INET) &&
             (ifa->ifa_addr->sa_family != AF_INET6)) ||
            !(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK)) {
            continue;
        }

        rdma_cm_id *raw = nullptr;
        /* no event channel: a synchronous id, enough for a bind */
        if (rdma_create_id(nullptr, &raw, nullptr, RDMA_PS_TCP) != 0) {
            /* no rdma_cm in this kernel: nothing can be bound at all */
            return result;
        }
        CmId id(raw);
        if ((rdma_bind_addr(id.get(), ifa->ifa_addr) != 0) || (id->verbs == nullptr)) {
            continue;
        }
        PortKey key(ibv_get_device_name(id->verbs->device), id->port_num);
        result[key].push_back(numeric_address(ifa->ifa_addr));
    }
    return result;
}

std::vector<std::string> scan_device_names()
{
    int num = 0;
    DeviceList list(ibv_get_device_list(&num));
    std::vector<std::string> names;
    if (!list) {
        /* ENOSYS: no RDMA in this kernel; anything else is still "no device" */
        return names;
    }
    for (int i = 0; i < num; ++i) {
        names.emplace_back(ibv_get_device_name(list.get()[i]));
    }
    return names;
}

std::vector<PortReport>
scan_ports(ibv_context *ctx, const std::map<PortKey, std::vector<std::string>> &addresses)
{
    ibv_device_attr dev_attr = {};
    int ret = ibv_query_device(ctx, &dev_attr);
    if (ret != 0) {
        throw_errno(std::string("ibv_query_device(") +
                    ibv_get_device_name(ctx->device) + ")", ret);
    }

    const std::string dev_name = ibv_get_device_name(ctx->device);
    std::vector<PortReport> ports;
    for (unsigned port = 1; port <= dev_attr.phys_port_cnt; ++port) {
        PortReport report;
        report.port = port;
        ibv_port_attr port_attr = {};
        ret = ibv_query_port(ctx, static_cast<uint8_t>(port), &port_attr);
        if (ret != 0) {
            report.verdict.reason = errno_message("ibv_query_port", ret);
            ports.push_back(report);
            continue;
        }
        report.facts.state      = port_attr.state;
        report.facts.link_layer = port_attr.link_layer;
        auto it = addresses.find(PortKey(dev_name, port));
        if (it != addresses.end()) {
            report.facts.cm_addresses = it->second;
        }
        report.verdict = port_verdict(report.facts);
        ports.push_back(report);
    }
    return ports;
}

} // namespace xqp::verbs
