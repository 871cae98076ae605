/*
 * xqp-topo: print the locality of every RDMA device, one device per line.
 *
 * usage: xqp-topo [--xml FILE] [--help]
 *
 * Topology source, first match wins:
 *   --xml FILE           an hwloc XML topology (lstopo --of xml)
 *   UCX_XQP_TOPO_XML     the same, from the environment (what the plugin uses)
 *   otherwise            the live topology of this machine
 *
 * Every OpenFabrics OS device of the topology is printed, in topology order.
 * With the live topology, RDMA devices that libibverbs reports but hwloc does
 * not know (Soft-RoCE rxe0, siw0) follow, as whole-machine fallbacks.
 *
 * Line format (see src/topology/topology.h, stable):
 *   <name> pci=<busid|none> numa=<list> cpus=<list>[ fallback="<reason>"]
 *
 * stdout carries device lines only. With zero devices nothing is printed on
 * stdout and "xqp-topo: no rdma devices" goes to stderr.
 *
 * Exit status: 0 success (also with zero devices), 1 the topology cannot be
 * loaded (the message names the file), 2 usage error.
 */
#include "topology/topology.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char kUsage[] =
    "usage: xqp-topo [--xml FILE] [--help]\n"
    "print the locality of every rdma device, one line per device:\n"
    "  <name> pci=<busid|none> numa=<nodes> cpus=<cpus>[ fallback=\"<reason>\"]\n"
    "numa: local NUMA node os indexes, cpus: local PUs, both in list syntax\n"
    "(\"0-3,8\"); fallback: locality unknown, whole machine shown instead.\n"
    "\n"
    "  --xml FILE  read an hwloc XML topology instead of the live one\n"
    "              (default: $UCX_XQP_TOPO_XML if set, else the live topology)\n"
    "  --help      show this help\n"
    "\n"
    "exit status: 0 ok, 1 topology cannot be loaded, 2 usage error\n";

int usage_error(const std::string &message)
{
    std::fprintf(stderr, "xqp-topo: %s\nusage: xqp-topo [--xml FILE] [--help]\n",
                 message.c_str());
    return 2;
}

/* names of the devices libibverbs sees; empty if none or no rdma subsystem */
std::vector<std::string> verbs_device_names()
{
    std::vector<std::string> names;
    int count = 0;
    struct ibv_device **list = ibv_get_device_list(&count);
    if (list == nullptr) {
        return names;
    }
    for (int i = 0; i < count && list[i] != nullptr; ++i) {
        const char *name = ibv_get_device_name(list[i]);
        if (name != nullptr) {
            names.emplace_back(name);
        }
    }
    ibv_free_device_list(list);
    return names;
}

} // namespace

int main(int argc, char **argv)
{
    std::string xml;
    bool have_xml = false;

    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0) {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (std::strcmp(arg, "--xml") == 0) {
            if (i + 1 >= argc) {
                return usage_error(std::string("option '") + arg + "' needs a file name");
            }
            xml = argv[++i];
            have_xml = true;
        } else if (std::strncmp(arg, "--xml=", 6) == 0) {
            xml = arg + 6;
            have_xml = true;
        } else if (arg[0] == '-') {
            return usage_error(std::string("unknown option '") + arg + "'");
        } else {
            return usage_error(std::string("unexpected argument '") + arg + "'");
        }
        if (have_xml && xml.empty()) {
            return usage_error("option '--xml' needs a non-empty file name");
        }
    }
    if (!have_xml) {
        xml = xqp::topo::xml_from_env();
    }

    std::string error;
    std::unique_ptr<xqp::topo::Topology> topo = xqp::topo::Topology::load(xml, &error);
    if (!topo) {
        std::fprintf(stderr, "xqp-topo: %s\n", error.c_str());
        return 1;
    }

    std::vector<std::string> extra;
    if (xml.empty()) {
        extra = verbs_device_names();
    }

    const std::vector<xqp::topo::DeviceLocality> devices =
        xqp::topo::list_devices(*topo, extra);
    for (const xqp::topo::DeviceLocality &dev : devices) {
        std::printf("%s\n", xqp::topo::format_line(dev).c_str());
    }
    if (devices.empty()) {
        std::fprintf(stderr, "xqp-topo: no rdma devices\n");
    }
    if (std::fflush(stdout) != 0) {
        std::fprintf(stderr, "xqp-topo: write error: %s\n", std::strerror(errno));
        return 1;
    }
    return 0;
}
