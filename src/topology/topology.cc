/*
 * xqp topology unit: locality of RDMA devices, computed with hwloc 2.x.
 * See topology.h for the contract and the output format.
 */
#include "topology/topology.h"

#include <hwloc/openfabrics-verbs.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace xqp {
namespace topo {

namespace {

/* discovery components that only find GPUs/displays: loading them may
 * initialise a GPU runtime inside the application, and they are not needed
 * for OpenFabrics devices */
const char *const kSkippedComponents[] = {
    "cuda", "nvml", "opencl", "rsmi", "levelzero", "gl",
};

std::string errno_text(int err)
{
    std::string text = std::strerror(err);
    if (!text.empty()) {
        text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
    }
    return text;
}

/* "" if the file can be opened for reading as a regular file, else why not */
std::string check_readable_file(const std::string &path)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno_text(errno);
    }
    struct stat st;
    std::string problem;
    if (::fstat(fd, &st) != 0) {
        problem = errno_text(errno);
    } else if (S_ISDIR(st.st_mode)) {
        problem = "is a directory";
    } else if (S_ISREG(st.st_mode) && st.st_size == 0) {
        problem = "empty file";
    }
    ::close(fd);
    return problem;
}

bool path_exists(const std::string &path)
{
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

std::string format_pci_bus_id(const hwloc_obj_t pcidev)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%01x",
                  static_cast<unsigned>(pcidev->attr->pcidev.domain),
                  static_cast<unsigned>(pcidev->attr->pcidev.bus),
                  static_cast<unsigned>(pcidev->attr->pcidev.dev),
                  static_cast<unsigned>(pcidev->attr->pcidev.func));
    return buf;
}

/* first PCI device above an OS device, walking up I/O objects only */
hwloc_obj_t find_pci_parent(hwloc_obj_t osdev)
{
    for (hwloc_obj_t obj = osdev->parent;
         obj != nullptr && hwloc_obj_type_is_io(obj->type); obj = obj->parent) {
        if (obj->type == HWLOC_OBJ_PCI_DEVICE) {
            return obj;
        }
    }
    return nullptr;
}

std::vector<unsigned> nodeset_to_vector(hwloc_const_nodeset_t nodeset)
{
    std::vector<unsigned> nodes;
    if (nodeset == nullptr || hwloc_bitmap_weight(nodeset) < 0) {
        return nodes; /* null or infinite */
    }
    int idx;
    hwloc_bitmap_foreach_begin(idx, nodeset) {
        nodes.push_back(static_cast<unsigned>(idx));
    }
    hwloc_bitmap_foreach_end();
    return nodes;
}

std::string sanitize_reason(const std::string &reason)
{
    std::string out = reason;
    for (char &c : out) {
        if (c == '"') {
            c = '\'';
        } else if (c == '\n' || c == '\r' || c == '\t') {
            c = ' ';
        }
    }
    return out;
}

} // namespace

/* ---- Bitmap ---- */

Bitmap::Bitmap() noexcept : bm_(hwloc_bitmap_alloc()) {}

Bitmap::Bitmap(hwloc_const_bitmap_t src) noexcept
    : bm_(src != nullptr ? hwloc_bitmap_dup(src) : hwloc_bitmap_alloc())
{
}

Bitmap::~Bitmap()
{
    hwloc_bitmap_free(bm_); /* accepts NULL */
}

Bitmap::Bitmap(Bitmap &&other) noexcept : bm_(other.bm_)
{
    other.bm_ = nullptr;
}

Bitmap &Bitmap::operator=(Bitmap &&other) noexcept
{
    if (this != &other) {
        hwloc_bitmap_free(bm_);
        bm_ = other.bm_;
        other.bm_ = nullptr;
    }
    return *this;
}

std::string Bitmap::to_list() const
{
    if (bm_ == nullptr || hwloc_bitmap_iszero(bm_)) {
        return std::string();
    }
    char *str = nullptr;
    if (hwloc_bitmap_list_asprintf(&str, bm_) < 0 || str == nullptr) {
        std::free(str);
        return std::string();
    }
    std::string out(str);
    std::free(str);
    return out;
}

bool Bitmap::from_list(const std::string &list) noexcept
{
    return bm_ != nullptr && hwloc_bitmap_list_sscanf(bm_, list.c_str()) == 0;
}

/* ---- Topology ---- */

Topology::Topology(hwloc_topology_t topo, std::string xml_file) noexcept
    : topo_(topo), xml_file_(std::move(xml_file))
{
}

Topology::~Topology()
{
    hwloc_topology_destroy(topo_);
}

std::unique_ptr<Topology> Topology::load(const std::string &xml_file,
                                         std::string *error)
{
    const bool xml = !xml_file.empty();
    const std::string what = xml ? "cannot load topology xml '" + xml_file + "'"
                                 : std::string("cannot load live topology");
    auto fail = [&](const std::string &why) -> std::unique_ptr<Topology> {
        if (error != nullptr) {
            *error = what + ": " + why;
        }
        return nullptr;
    };

    /* same major ABI at run time as at build time (hwloc 2.x) */
    const unsigned runtime_api = hwloc_get_api_version();
    if ((runtime_api >> 16) != (HWLOC_API_VERSION >> 16)) {
        char buf[96];
        std::snprintf(buf, sizeof(buf),
                      "hwloc api mismatch: built for 0x%x, running 0x%x",
                      static_cast<unsigned>(HWLOC_API_VERSION), runtime_api);
        return fail(buf);
    }

    if (xml) {
        std::string problem = check_readable_file(xml_file);
        if (!problem.empty()) {
            return fail(problem);
        }
    }

    hwloc_topology_t raw = nullptr;
    if (hwloc_topology_init(&raw) != 0) {
        return fail("hwloc_topology_init failed: " + errno_text(errno));
    }
    /* owns raw until it is handed to a Topology */
    std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> guard(
        raw, hwloc_topology_destroy);

    if (xml && hwloc_topology_set_xml(raw, xml_file.c_str()) != 0) {
        return fail("hwloc_topology_set_xml failed: " + errno_text(errno));
    }
    if (hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
        return fail("hwloc_topology_set_io_types_filter failed: " +
                    errno_text(errno));
    }
    for (const char *component : kSkippedComponents) {
        /* best effort: an unknown component name is not an error */
        (void)hwloc_topology_set_components(
            raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
    }
    if (hwloc_topology_load(raw) != 0) {
        if (xml) {
            return fail("hwloc could not import it (not an hwloc xml topology?)");
        }
        return fail("hwloc_topology_load failed: " + errno_text(errno));
    }

    std::unique_ptr<Topology> topo(new Topology(raw, xml_file));
    guard.release();
    return topo;
}

bool Topology::is_this_system() const noexcept
{
    return hwloc_topology_is_thissystem(topo_) != 0;
}

DeviceLocality Topology::whole_machine(const std::string &name,
                                       const std::string &reason) const
{
    DeviceLocality loc;
    loc.name = name;
    loc.whole_machine = true;
    loc.reason = reason;

    hwloc_obj_t node = nullptr;
    while ((node = hwloc_get_next_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, node)) !=
           nullptr) {
        loc.numa_nodes.push_back(node->os_index);
    }
    std::sort(loc.numa_nodes.begin(), loc.numa_nodes.end());
    loc.numa_nodes.erase(std::unique(loc.numa_nodes.begin(), loc.numa_nodes.end()),
                         loc.numa_nodes.end());

    hwloc_obj_t root = hwloc_get_root_obj(topo_);
    if (root != nullptr) {
        loc.cpuset = Bitmap(root->cpuset).to_list();
    }
    return loc;
}

DeviceLocality Topology::locate(const std::string &ibdev) const
{
    if (ibdev.empty()) {
        return whole_machine(ibdev, "empty device name");
    }

    hwloc_obj_t osdev = hwloc_ibv_get_device_osdev_by_name(topo_, ibdev.c_str());
    if (osdev == nullptr) {
        if (is_this_system()) {
            /* a virtual device (rxe, siw) has no device link in sysfs, and
             * hwloc only reports devices below a PCI device */
            const std::string sysdir = "/sys/class/infiniband/" + ibdev;
            if (path_exists(sysdir) && !path_exists(sysdir + "/device")) {
                return whole_machine(ibdev, "no pci parent");
            }
        }
        return whole_machine(ibdev, "not in hwloc topology");
    }

    hwloc_obj_t pcidev = find_pci_parent(osdev);
    if (pcidev == nullptr) {
        return whole_machine(ibdev, "no pci parent");
    }
    const std::string bus_id = format_pci_bus_id(pcidev);

    auto fallback = [&](const char *reason) {
        DeviceLocality loc = whole_machine(ibdev, reason);
        loc.pci_bus_id = bus_id;
        return loc;
    };

    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topo_, osdev);
    if (ancestor == nullptr || ancestor->cpuset == nullptr) {
        return fallback("no non-i/o ancestor");
    }
    if (hwloc_bitmap_iszero(ancestor->cpuset)) {
        return fallback("empty local cpuset");
    }

    DeviceLocality loc;
    loc.name = ibdev;
    loc.pci_bus_id = bus_id;
    loc.cpuset = Bitmap(ancestor->cpuset).to_list();
    /* nodeset: the NUMA nodes below or above the ancestor, i.e. close to it */
    loc.numa_nodes = nodeset_to_vector(ancestor->nodeset);
    if (loc.cpuset.empty()) {
        return fallback("cannot format local cpuset");
    }
    if (loc.numa_nodes.empty()) {
        return fallback("no local numa node");
    }
    return loc;
}

std::vector<DeviceLocality> Topology::rdma_devices() const
{
    std::vector<DeviceLocality> devices;
    hwloc_obj_t osdev = nullptr;
    while ((osdev = hwloc_get_next_osdev(topo_, osdev)) != nullptr) {
        if (osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS &&
            osdev->name != nullptr) {
            devices.push_back(locate(osdev->name));
        }
    }
    return devices;
}

/* ---- free functions ---- */

DeviceLocality unknown_locality(const std::string &name, const std::string &reason)
{
    DeviceLocality loc;
    loc.name = name;
    loc.whole_machine = true;
    loc.reason = reason;
    return loc;
}

std::vector<DeviceLocality> list_devices(const Topology &topo,
                                         const std::vector<std::string> &extra_names)
{
    std::vector<DeviceLocality> devices = topo.rdma_devices();
    std::set<std::string> seen;
    for (const DeviceLocality &dev : devices) {
        seen.insert(dev.name);
    }
    for (const std::string &name : extra_names) {
        if (seen.insert(name).second) {
            devices.push_back(topo.locate(name));
        }
    }
    return devices;
}

std::string format_list(const std::vector<unsigned> &values)
{
    std::vector<unsigned> sorted(values);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());

    std::string out;
    for (size_t i = 0; i < sorted.size();) {
        size_t j = i;
        while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) {
            ++j;
        }
        if (!out.empty()) {
            out += ',';
        }
        out += std::to_string(sorted[i]);
        if (j > i) {
            out += '-';
            out += std::to_string(sorted[j]);
        }
        i = j + 1;
    }
    return out;
}

std::string format_line(const DeviceLocality &loc)
{
    std::string line = loc.name;
    line += " pci=";
    line += loc.pci_bus_id.empty() ? "none" : loc.pci_bus_id;
    line += " numa=";
    line += loc.numa_nodes.empty() ? "unknown" : format_list(loc.numa_nodes);
    line += " cpus=";
    line += loc.cpuset.empty() ? "unknown" : loc.cpuset;
    if (loc.whole_machine) {
        line += " fallback=\"";
        line += sanitize_reason(loc.reason.empty() ? "unknown" : loc.reason);
        line += '"';
    }
    return line;
}

std::string xml_from_env()
{
    const char *value = std::getenv(kTopoXmlEnv);
    return value != nullptr ? std::string(value) : std::string();
}

} // namespace topo
} // namespace xqp
