/*
 * xqp topology unit: locality of RDMA devices, computed with hwloc 2.x.
 *
 * For an RDMA (OpenFabrics) device this finds the hwloc OS device of that
 * name, its PCI device and its first non-I/O ancestor (a Package, Group,
 * NUMA-level object...), and reports the ancestor's cpuset and nodeset: the
 * CPUs and NUMA nodes that are local to the device.
 *
 * Locality is an optimisation, never an error: a device that hwloc does not
 * know, a device without a PCI parent (Soft-RoCE "rxe0") or any other hwloc
 * problem yields a DeviceLocality with whole_machine == true and a reason.
 * Only Topology::load() can fail.
 *
 * No UCX dependency; no exception leaves this unit (everything is noexcept
 * except that std::bad_alloc is not caught).  A loaded Topology is read-only
 * and its const methods may be called concurrently from several threads.
 *
 * Output format of format_line() (one device per line, stable, grep-friendly):
 *
 *     <name> pci=<busid> numa=<nodes> cpus=<cpus>[ fallback="<reason>"]
 *
 *   - <name>    the RDMA device name (ibv_get_device_name), first column.
 *   - <busid>   PCI bus id "dddd:bb:dd.f" (lowercase hex, 4-digit domain),
 *               or "none" when the device has no PCI parent in the topology.
 *   - <nodes>   local NUMA nodes as os_index (physical, "P#") in hwloc list
 *               syntax: comma-separated, sorted, ranges collapsed
 *               ("1", "0-1", "0,2-3"); "unknown" if there is no topology.
 *   - <cpus>    local cpuset (physical PU numbers) in hwloc list syntax
 *               ("8-15,24-31"), the format taken by taskset -c and
 *               numactl -C; "unknown" if there is no topology.
 *   - fallback  present (and always the last field) only when whole_machine
 *               is true; then numa/cpus are those of the whole machine.
 *               <reason> is lowercase text without '"', '\n' or '\t'.
 *   Fields are separated by exactly one space, keys never change order.
 *   Examples:
 *     mlx5_0 pci=0000:04:00.0 numa=1 cpus=8-15,24-31
 *     rxe0 pci=none numa=0 cpus=0-3 fallback="no pci parent"
 */
#ifndef XQP_TOPOLOGY_TOPOLOGY_H
#define XQP_TOPOLOGY_TOPOLOGY_H

#include <hwloc.h>

#include <memory>
#include <string>
#include <vector>

namespace xqp {
namespace topo {

/* Environment variable that forces a topology XML file (see xml_from_env). */
constexpr const char *kTopoXmlEnv = "UCX_XQP_TOPO_XML";

struct DeviceLocality {
    std::string name;                /* rdma device name, e.g. "mlx5_0" */
    std::string pci_bus_id;          /* "0000:04:00.0"; empty if none */
    std::vector<unsigned> numa_nodes; /* local NUMA nodes, os_index, sorted */
    std::string cpuset;              /* hwloc list format, "8-15,24-31" */
    bool whole_machine = false;      /* true = locality unknown, the whole
                                        machine is reported instead */
    std::string reason;              /* why whole_machine; empty otherwise */
};

/* Move-only owner of a hwloc_bitmap_t. */
class Bitmap {
public:
    Bitmap() noexcept;                       /* allocates an empty bitmap */
    explicit Bitmap(hwloc_const_bitmap_t src) noexcept; /* duplicates src */
    ~Bitmap();
    Bitmap(Bitmap &&other) noexcept;
    Bitmap &operator=(Bitmap &&other) noexcept;
    Bitmap(const Bitmap &) = delete;
    Bitmap &operator=(const Bitmap &) = delete;

    /* false if the allocation failed */
    explicit operator bool() const noexcept { return bm_ != nullptr; }
    hwloc_bitmap_t get() const noexcept { return bm_; }

    /* hwloc list syntax ("0-3,8"); empty string for an empty bitmap or on
     * allocation failure */
    std::string to_list() const;
    /* parse hwloc list syntax; false on a syntax error */
    bool from_list(const std::string &list) noexcept;

private:
    hwloc_bitmap_t bm_;
};

class Topology {
public:
    /*
     * Load the live topology (xml_file empty) or an hwloc XML file.
     * I/O objects are kept (HWLOC_TYPE_FILTER_KEEP_IMPORTANT) and GPU
     * discovery components (cuda, nvml, opencl, rsmi, levelzero, gl) are
     * blacklisted so that loading never initialises a GPU runtime.
     * Returns nullptr and sets *error (if non-null) on failure; the message
     * names the file in XML mode.
     */
    static std::unique_ptr<Topology> load(const std::string &xml_file,
                                          std::string *error);

    ~Topology();
    Topology(const Topology &) = delete;
    Topology &operator=(const Topology &) = delete;

    /* Every OpenFabrics OS device of the topology, in topology order. */
    std::vector<DeviceLocality> rdma_devices() const;

    /* Locality of one device by name. Never fails: whole machine + reason. */
    DeviceLocality locate(const std::string &ibdev) const;

    /* The whole-machine locality (all NUMA nodes, root cpuset) for name. */
    DeviceLocality whole_machine(const std::string &name,
                                 const std::string &reason) const;

    /* true for the live topology, false for an XML file (unless
     * HWLOC_THISSYSTEM=1 is set in the environment) */
    bool is_this_system() const noexcept;

    /* the XML file it was loaded from, empty for the live topology */
    const std::string &xml_file() const noexcept { return xml_file_; }

    /* borrowed handle, owned by this object; use it read-only */
    hwloc_topology_t raw() const noexcept { return topo_; }

private:
    Topology(hwloc_topology_t topo, std::string xml_file) noexcept;

    hwloc_topology_t topo_;
    std::string xml_file_;
};

/*
 * Locality without any topology (Topology::load failed): whole machine,
 * numa_nodes and cpuset empty (format_line prints "unknown").
 */
DeviceLocality unknown_locality(const std::string &name,
                                const std::string &reason);

/*
 * What xqp-topo prints: topo.rdma_devices(), followed by locate(n) for each
 * name in extra_names that is not already listed (live devices hwloc lacks,
 * e.g. rxe0), in the order given.
 */
std::vector<DeviceLocality> list_devices(const Topology &topo,
                                         const std::vector<std::string> &extra_names);

/* One line, without trailing newline; see the format at the top. */
std::string format_line(const DeviceLocality &loc);

/* "0,2-3" for {0,2,3}; empty for an empty vector. */
std::string format_list(const std::vector<unsigned> &values);

/* Value of UCX_XQP_TOPO_XML, empty if unset. */
std::string xml_from_env();

} // namespace topo
} // namespace xqp

#endif
