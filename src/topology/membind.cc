#include "topology/membind.h"

#include "topology/topology.h"

#include <hwloc.h>

#include <cerrno>
#include <cstring>

namespace xqp::topo {

bool bind_to_numa_nodes(void *addr, size_t length, const std::vector<unsigned> &nodes,
                        std::string *why)
{
    if (nodes.empty()) {
        *why = "no local numa node known";
        return false;
    }
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        *why = "hwloc_topology_init failed";
        return false;
    }
    /* the live machine, without I/O discovery: only NUMA nodes matter */
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        *why = "hwloc_topology_load failed";
        return false;
    }
    Bitmap nodeset;
    bool ok = static_cast<bool>(nodeset);
    for (unsigned node : nodes) {
        ok = ok && (hwloc_bitmap_set(nodeset.get(), node) == 0);
    }
    if (ok && (hwloc_set_area_membind(topo, addr, length, nodeset.get(), HWLOC_MEMBIND_BIND,
                                      HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT) != 0)) {
        *why = std::string("hwloc_set_area_membind: ") + std::strerror(errno);
        ok   = false;
    }
    hwloc_topology_destroy(topo);
    return ok;
}

} // namespace xqp::topo
