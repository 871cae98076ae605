/*
 * xqp - bind memory xqp owns (bounce and receive buffers) to the NUMA
 * node(s) local to its RDMA device.
 */
#ifndef XQP_TOPOLOGY_MEMBIND_H
#define XQP_TOPOLOGY_MEMBIND_H

#include <cstddef>
#include <string>
#include <vector>

namespace xqp::topo {

/*
 * Binds [addr, addr + length) (page aligned, not yet touched) to the NUMA
 * nodes with these os indices through hwloc. Returns false with *why when it
 * cannot (no nodes, hwloc refuses, a node that does not exist): the memory
 * then stays where the kernel puts it.
 */
bool bind_to_numa_nodes(void *addr, size_t length, const std::vector<unsigned> &nodes,
                        std::string *why);

} // namespace xqp::topo

#endif
