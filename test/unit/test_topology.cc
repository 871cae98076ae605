/*
 * Unit tests for src/topology: device locality over real hwloc XML
 * topologies (test/data/topologies), checked against the ground truth in
 * device_locality.tsv and numa_nodes.tsv, read at run time.
 *
 * The data directory is XQP_TEST_DATA_DIR (environment variable, else the
 * compile-time define of the same name, else "test/data").
 */
#include "topology/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#ifndef XQP_TEST_DATA_DIR
#define XQP_TEST_DATA_DIR "test/data"
#endif

namespace {

using xqp::topo::Bitmap;
using xqp::topo::DeviceLocality;
using xqp::topo::Topology;

std::string data_dir()
{
    const char *env = std::getenv("XQP_TEST_DATA_DIR");
    if (env != nullptr && *env != '\0') {
        return env;
    }
    return XQP_TEST_DATA_DIR;
}

std::string topo_dir()
{
    return data_dir() + "/topologies";
}

std::string topo_path(const std::string &file)
{
    return topo_dir() + "/" + file;
}

using Row = std::map<std::string, std::string>;

/* a tab-separated file with a header line; columns are looked up by name */
std::vector<Row> read_tsv(const std::string &path)
{
    std::vector<Row> rows;
    std::ifstream in(path);
    if (!in) {
        ADD_FAILURE() << "cannot open " << path;
        return rows;
    }
    auto split = [](const std::string &line) {
        std::vector<std::string> fields;
        std::string field;
        std::istringstream ss(line);
        while (std::getline(ss, field, '\t')) {
            fields.push_back(field);
        }
        return fields;
    };
    std::string line;
    if (!std::getline(in, line)) {
        ADD_FAILURE() << "empty file " << path;
        return rows;
    }
    const std::vector<std::string> header = split(line);
    while (std::getline(in, line)) {
        if (line.empty()) {
            continue;
        }
        const std::vector<std::string> fields = split(line);
        EXPECT_EQ(fields.size(), header.size()) << path << ": " << line;
        Row row;
        for (size_t i = 0; i < header.size() && i < fields.size(); ++i) {
            row[header[i]] = fields[i];
        }
        rows.push_back(row);
    }
    return rows;
}

/* rows of device_locality.tsv with kind=openfabrics */
const std::vector<Row> &openfabrics_rows()
{
    static const std::vector<Row> rows = [] {
        std::vector<Row> out;
        for (const Row &row : read_tsv(topo_dir() + "/device_locality.tsv")) {
            if (row.at("kind") == "openfabrics") {
                out.push_back(row);
            }
        }
        return out;
    }();
    return rows;
}

const std::vector<Row> &numa_rows()
{
    static const std::vector<Row> rows = read_tsv(topo_dir() + "/numa_nodes.tsv");
    return rows;
}

std::set<std::string> topology_files()
{
    std::set<std::string> files;
    for (const Row &row : openfabrics_rows()) {
        files.insert(row.at("file"));
    }
    return files;
}

const Row *find_device_row(const std::string &file, const std::string &name)
{
    for (const Row &row : openfabrics_rows()) {
        if (row.at("file") == file && row.at("name") == name) {
            return &row;
        }
    }
    return nullptr;
}

/* all NUMA os indexes of a file, from numa_nodes.tsv, in list syntax */
std::string all_numa_nodes(const std::string &file)
{
    Bitmap nodes;
    for (const Row &row : numa_rows()) {
        if (row.at("file") == file) {
            hwloc_bitmap_set(nodes.get(), std::stoul(row.at("numa_os_index")));
        }
    }
    return nodes.to_list();
}

/* union of the NUMA nodes' cpusets of a file, from numa_nodes.tsv */
std::string machine_cpuset(const std::string &file)
{
    Bitmap all;
    for (const Row &row : numa_rows()) {
        if (row.at("file") == file) {
            Bitmap one;
            EXPECT_TRUE(one.from_list(row.at("numa_cpuset")));
            hwloc_bitmap_or(all.get(), all.get(), one.get());
        }
    }
    return all.to_list();
}

std::string expected_line(const Row &row)
{
    return row.at("name") + " pci=" + row.at("pci_busid") +
           " numa=" + row.at("local_numanode_objs_os") +
           " cpus=" + row.at("ancestor_cpuset");
}

/* loaded once per file and shared by the tests; nullptr (and a failure)
 * if it cannot be loaded */
const Topology *load_cached(const std::string &file)
{
    static std::map<std::string, std::unique_ptr<Topology>> cache;
    auto it = cache.find(file);
    if (it == cache.end()) {
        std::string error;
        std::unique_ptr<Topology> topo = Topology::load(topo_path(file), &error);
        if (!topo) {
            ADD_FAILURE() << "load " << file << ": " << error;
            return nullptr;
        }
        it = cache.emplace(file, std::move(topo)).first;
    }
    return it->second.get();
}

#define LOAD_OR_RETURN(var, file)                   \
    const Topology *var##_ptr = load_cached(file);  \
    ASSERT_NE(var##_ptr, nullptr) << (file);        \
    const Topology &var = *var##_ptr

const std::regex &line_regex()
{
    static const std::regex re(
        "^[^ \"=]+ pci=(none|[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]) "
        "numa=(unknown|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*) "
        "cpus=(unknown|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)"
        "( fallback=\"[^\"\\n\\t]+\")?$");
    return re;
}

/* a private temporary directory, removed with its files */
class TempDir {
public:
    TempDir()
    {
        const char *tmp = std::getenv("TMPDIR");
        std::string templ = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") +
                            "/xqp-topo-test.XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) != nullptr) {
            path_ = buf.data();
        }
    }
    ~TempDir()
    {
        for (const std::string &f : files_) {
            ::unlink(f.c_str());
        }
        if (!path_.empty()) {
            ::rmdir(path_.c_str());
        }
    }
    const std::string &path() const { return path_; }
    std::string write(const std::string &name, const std::string &content)
    {
        const std::string file = path_ + "/" + name;
        std::ofstream(file, std::ios::binary) << content;
        files_.push_back(file);
        return file;
    }

private:
    std::string path_;
    std::vector<std::string> files_;
};

std::string read_file(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace

/* ---- the fixtures themselves ---- */

TEST(TopologyData, GroundTruthCoversTheFixtures)
{
    const std::set<std::string> files = topology_files();
    EXPECT_EQ(files.size(), 7u) << "data dir: " << data_dir();
    for (const std::string &file : files) {
        struct stat st;
        EXPECT_EQ(::stat(topo_path(file).c_str(), &st), 0) << topo_path(file);
        EXPECT_FALSE(all_numa_nodes(file).empty()) << file;
    }
    EXPECT_GE(openfabrics_rows().size(), 9u);
}

/* ---- locality of every OpenFabrics device vs the ground truth ---- */

TEST(TopologyXml, EveryOpenFabricsDeviceMatchesGroundTruth)
{
    ASSERT_FALSE(openfabrics_rows().empty());
    for (const Row &row : openfabrics_rows()) {
        SCOPED_TRACE(row.at("file") + " " + row.at("name"));
        LOAD_OR_RETURN(topo, row.at("file"));
        const DeviceLocality loc = topo.locate(row.at("name"));
        EXPECT_EQ(loc.name, row.at("name"));
        EXPECT_FALSE(loc.whole_machine);
        EXPECT_EQ(loc.reason, "");
        EXPECT_EQ(loc.pci_bus_id, row.at("pci_busid"));
        EXPECT_EQ(xqp::topo::format_list(loc.numa_nodes),
                  row.at("local_numanode_objs_os"));
        EXPECT_EQ(xqp::topo::format_list(loc.numa_nodes),
                  row.at("ancestor_nodeset_os"));
        EXPECT_TRUE(std::is_sorted(loc.numa_nodes.begin(), loc.numa_nodes.end()));
        EXPECT_EQ(loc.cpuset, row.at("ancestor_cpuset"));
    }
}

TEST(TopologyXml, RdmaDevicesListsExactlyTheOpenFabricsDevices)
{
    for (const std::string &file : topology_files()) {
        SCOPED_TRACE(file);
        std::set<std::string> expected;
        for (const Row &row : openfabrics_rows()) {
            if (row.at("file") == file) {
                expected.insert(row.at("name"));
            }
        }
        LOAD_OR_RETURN(topo, file);
        std::set<std::string> got;
        for (const DeviceLocality &dev : topo.rdma_devices()) {
            EXPECT_TRUE(got.insert(dev.name).second) << "duplicate " << dev.name;
            const DeviceLocality again = topo.locate(dev.name);
            EXPECT_EQ(dev.pci_bus_id, again.pci_bus_id);
            EXPECT_EQ(dev.numa_nodes, again.numa_nodes);
            EXPECT_EQ(dev.cpuset, again.cpuset);
        }
        EXPECT_EQ(got, expected);
    }
}

TEST(TopologyXml, XmlTopologyIsNotThisSystem)
{
    const std::string file = "hwloc_16intel64-manyVFs.xml";
    if (std::getenv("HWLOC_THISSYSTEM") != nullptr) {
        GTEST_SKIP() << "HWLOC_THISSYSTEM is set";
    }
    LOAD_OR_RETURN(topo, file);
    EXPECT_FALSE(topo.is_this_system());
    EXPECT_EQ(topo.xml_file(), topo_path(file));
    EXPECT_NE(topo.raw(), nullptr);
}

/* ---- the cases the issue names ---- */

TEST(TopologyXml, MultiNicManyVFs)
{
    const std::string file = "hwloc_16intel64-manyVFs.xml";
    LOAD_OR_RETURN(topo, file);
    const std::vector<DeviceLocality> devs = topo.rdma_devices();
    ASSERT_GE(devs.size(), 3u);
    std::set<std::string> pci_ids;
    std::set<std::string> numa_sets;
    for (const DeviceLocality &dev : devs) {
        SCOPED_TRACE(dev.name);
        const Row *row = find_device_row(file, dev.name);
        ASSERT_NE(row, nullptr);
        EXPECT_EQ(dev.pci_bus_id, row->at("pci_busid"));
        EXPECT_EQ(xqp::topo::format_list(dev.numa_nodes),
                  row->at("local_numanode_objs_os"));
        EXPECT_EQ(dev.cpuset, row->at("ancestor_cpuset"));
        pci_ids.insert(dev.pci_bus_id);
        numa_sets.insert(xqp::topo::format_list(dev.numa_nodes));
    }
    EXPECT_EQ(pci_ids.size(), devs.size()); /* one PCI function per NIC */
    EXPECT_GE(numa_sets.size(), 2u);        /* NICs on different sockets */
}

TEST(TopologyXml, PciDomain0003)
{
    const std::string file = "hwloc_192em64t-24n8c2t.xml";
    const Row *row = find_device_row(file, "mlx4_0");
    ASSERT_NE(row, nullptr);
    ASSERT_EQ(row->at("pci_busid").substr(0, 5), "0003:");
    LOAD_OR_RETURN(topo, file);
    const DeviceLocality loc = topo.locate("mlx4_0");
    EXPECT_FALSE(loc.whole_machine);
    EXPECT_EQ(loc.pci_bus_id, row->at("pci_busid"));
    EXPECT_EQ(xqp::topo::format_list(loc.numa_nodes), row->at("local_numanode_objs_os"));
    EXPECT_EQ(loc.cpuset, row->at("ancestor_cpuset"));
}

TEST(TopologyXml, AwsEfa)
{
    const std::string file = "mpibind_g4dnmetal.xml";
    const Row *row = find_device_row(file, "rdmap197s0");
    ASSERT_NE(row, nullptr);
    ASSERT_EQ(row->at("pci_vendor:device"), "1d0f:efa0");
    LOAD_OR_RETURN(topo, file);
    const DeviceLocality loc = topo.locate("rdmap197s0");
    EXPECT_FALSE(loc.whole_machine);
    EXPECT_EQ(loc.pci_bus_id, row->at("pci_busid"));
    EXPECT_EQ(xqp::topo::format_list(loc.numa_nodes), row->at("local_numanode_objs_os"));
    EXPECT_EQ(loc.cpuset, row->at("ancestor_cpuset"));
}

TEST(TopologyXml, NumaNodesWithoutNic)
{
    /* pascal: 2 nodes, the NIC on one; corona: 8 nodes (NPS4), one NIC */
    for (const std::string file : {"mpibind_cts1-pascal.xml", "mpibind_epyc-corona.xml"}) {
        SCOPED_TRACE(file);
        LOAD_OR_RETURN(topo, file);
        Bitmap with_nic;
        for (const DeviceLocality &dev : topo.rdma_devices()) {
            EXPECT_FALSE(dev.whole_machine);
            for (unsigned n : dev.numa_nodes) {
                hwloc_bitmap_set(with_nic.get(), n);
            }
        }
        Bitmap all;
        ASSERT_TRUE(all.from_list(all_numa_nodes(file)));
        ASSERT_FALSE(hwloc_bitmap_iszero(with_nic.get()));
        EXPECT_TRUE(hwloc_bitmap_isincluded(with_nic.get(), all.get()));
        EXPECT_FALSE(hwloc_bitmap_isequal(with_nic.get(), all.get()))
            << "every NUMA node has a NIC: " << with_nic.to_list();
        /* the NIC's cpuset is narrower than the machine's */
        for (const DeviceLocality &dev : topo.rdma_devices()) {
            EXPECT_NE(dev.cpuset, machine_cpuset(file));
        }
        /* the whole machine covers the nodes without a NIC */
        const DeviceLocality whole = topo.whole_machine("x", "test");
        EXPECT_EQ(xqp::topo::format_list(whole.numa_nodes), all_numa_nodes(file));
        EXPECT_EQ(whole.cpuset, machine_cpuset(file));
    }
}

/* ---- fallbacks ---- */

TEST(TopologyXml, UnknownDeviceFallsBackToWholeMachine)
{
    for (const std::string &file : topology_files()) {
        SCOPED_TRACE(file);
        LOAD_OR_RETURN(topo, file);
        for (const std::string name : {"rxe0", "mlx5_99", ""}) {
            SCOPED_TRACE("'" + name + "'");
            const DeviceLocality loc = topo.locate(name);
            EXPECT_EQ(loc.name, name);
            EXPECT_TRUE(loc.whole_machine);
            EXPECT_FALSE(loc.reason.empty());
            EXPECT_EQ(loc.pci_bus_id, "");
            EXPECT_EQ(xqp::topo::format_list(loc.numa_nodes), all_numa_nodes(file));
            EXPECT_EQ(loc.cpuset, machine_cpuset(file));
        }
        EXPECT_EQ(topo.locate("rxe0").reason, "not in hwloc topology");
        EXPECT_EQ(topo.locate("").reason, "empty device name");
    }
}

/*
 * xqp_synthetic-virtual-rdma.xml is handwritten (see README.md there), not in
 * the TSVs: 2 packages / 2 NUMA nodes / PUs 0-3, mlx5_0 on PCI 0000:81:00.0
 * below package 1 (NUMA 1, PUs 2-3), and rxe0 attached to the Machine with
 * no PCI parent, as a Soft-RoCE device would be.
 */
TEST(TopologyXml, VirtualDeviceWithoutPciParentFallsBack)
{
    const std::string file = "xqp_synthetic-virtual-rdma.xml";
    LOAD_OR_RETURN(topo, file);
    const std::vector<DeviceLocality> devs = topo.rdma_devices();
    ASSERT_EQ(devs.size(), 2u);

    EXPECT_EQ(devs[0].name, "mlx5_0");
    EXPECT_FALSE(devs[0].whole_machine);
    EXPECT_EQ(xqp::topo::format_line(devs[0]), "mlx5_0 pci=0000:81:00.0 numa=1 cpus=2-3");

    const DeviceLocality rxe = topo.locate("rxe0");
    EXPECT_EQ(devs[1].name, "rxe0");
    EXPECT_TRUE(rxe.whole_machine);
    EXPECT_EQ(rxe.reason, "no pci parent");
    EXPECT_EQ(rxe.pci_bus_id, "");
    EXPECT_EQ(rxe.numa_nodes, (std::vector<unsigned>{0, 1}));
    EXPECT_EQ(rxe.cpuset, "0-3");
    EXPECT_EQ(xqp::topo::format_line(devs[1]),
              "rxe0 pci=none numa=0-1 cpus=0-3 fallback=\"no pci parent\"");
    EXPECT_TRUE(std::regex_match(xqp::topo::format_line(devs[1]), line_regex()));
}

TEST(TopologyNoTopo, UnknownLocality)
{
    const DeviceLocality loc = xqp::topo::unknown_locality("mlx5_0", "hwloc failed");
    EXPECT_TRUE(loc.whole_machine);
    EXPECT_EQ(loc.reason, "hwloc failed");
    EXPECT_TRUE(loc.numa_nodes.empty());
    EXPECT_EQ(loc.cpuset, "");
    EXPECT_EQ(xqp::topo::format_line(loc),
              "mlx5_0 pci=none numa=unknown cpus=unknown fallback=\"hwloc failed\"");
}

/* ---- load failures ---- */

TEST(TopologyLoad, MissingFileFailsNamingTheFile)
{
    const std::string path = topo_dir() + "/no-such-topology.xml";
    std::string error;
    EXPECT_EQ(Topology::load(path, &error), nullptr);
    EXPECT_NE(error.find(path), std::string::npos) << error;
    EXPECT_NE(error.find("no such file"), std::string::npos) << error;
    EXPECT_EQ(Topology::load(path, nullptr), nullptr); /* error is optional */
}

TEST(TopologyLoad, BadFilesFailNamingTheFile)
{
    TempDir dir;
    ASSERT_FALSE(dir.path().empty());
    const std::string real =
        read_file(topo_path("hwloc_32em64t-2n8c2t-pci-normalio.xml"));
    ASSERT_GT(real.size(), 1000u);
    const std::vector<std::string> bad = {
        dir.write("garbage.xml", "this is \x01\x02 not xml at all\n"),
        dir.write("empty.xml", ""),
        dir.write("other.xml", "<?xml version=\"1.0\"?>\n<system version=\"1\"><cpu/></system>\n"),
        dir.write("truncated.xml", real.substr(0, real.size() / 2)),
        dir.path(), /* a directory */
    };
    for (const std::string &path : bad) {
        SCOPED_TRACE(path);
        std::string error;
        EXPECT_EQ(Topology::load(path, &error), nullptr);
        EXPECT_NE(error.find("'" + path + "'"), std::string::npos) << error;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
}

TEST(TopologyLoad, CopyOfRealFileLoads)
{
    /* the same bytes elsewhere: the loader has no path-dependent state */
    TempDir dir;
    ASSERT_FALSE(dir.path().empty());
    const std::string path = dir.write(
        "copy.xml", read_file(topo_path("mpibind_cts1-quartz-smt1.xml")));
    std::string error;
    std::unique_ptr<Topology> topo = Topology::load(path, &error);
    ASSERT_NE(topo, nullptr) << error;
    EXPECT_EQ(topo->rdma_devices().size(), 1u);
}

/* ---- live topology: only generic properties, never this machine's ---- */

TEST(TopologyLive, LoadsAndFallsBackForUnknownDevice)
{
    if (std::getenv("HWLOC_XMLFILE") != nullptr) {
        GTEST_SKIP() << "HWLOC_XMLFILE redirects the live topology";
    }
    std::string error;
    std::unique_ptr<Topology> topo = Topology::load("", &error);
    ASSERT_NE(topo, nullptr) << error;
    EXPECT_TRUE(topo->is_this_system());
    EXPECT_EQ(topo->xml_file(), "");
    const DeviceLocality loc = topo->locate("xqp_no_such_dev0");
    EXPECT_TRUE(loc.whole_machine);
    EXPECT_EQ(loc.reason, "not in hwloc topology");
    EXPECT_FALSE(loc.numa_nodes.empty());
    EXPECT_FALSE(loc.cpuset.empty());
    for (const DeviceLocality &dev : topo->rdma_devices()) {
        EXPECT_TRUE(std::regex_match(xqp::topo::format_line(dev), line_regex()))
            << xqp::topo::format_line(dev);
    }
}

/* ---- output format (what xqp-topo prints) ---- */

TEST(TopologyFormat, LinesMatchGroundTruth)
{
    for (const std::string &file : topology_files()) {
        SCOPED_TRACE(file);
        std::vector<std::string> expected;
        for (const Row &row : openfabrics_rows()) {
            if (row.at("file") == file) {
                expected.push_back(expected_line(row));
            }
        }
        LOAD_OR_RETURN(topo, file);
        std::vector<std::string> got;
        for (const DeviceLocality &dev : xqp::topo::list_devices(topo, {})) {
            got.push_back(xqp::topo::format_line(dev));
            EXPECT_TRUE(std::regex_match(got.back(), line_regex())) << got.back();
        }
        std::sort(expected.begin(), expected.end());
        std::sort(got.begin(), got.end());
        EXPECT_EQ(got, expected);
    }
}

TEST(TopologyFormat, ExtraLiveNamesAreAppendedOnce)
{
    const std::string file = "hwloc_32em64t-2n8c2t-pci-normalio.xml";
    const Row *row = find_device_row(file, "mlx5_0");
    ASSERT_NE(row, nullptr);
    LOAD_OR_RETURN(topo, file);
    const std::vector<DeviceLocality> devs =
        xqp::topo::list_devices(topo, {"mlx5_0", "rxe0", "rxe0"});
    ASSERT_EQ(devs.size(), 2u);
    EXPECT_EQ(xqp::topo::format_line(devs[0]), expected_line(*row));
    EXPECT_EQ(xqp::topo::format_line(devs[1]),
              "rxe0 pci=none numa=" + all_numa_nodes(file) + " cpus=" +
                  machine_cpuset(file) + " fallback=\"not in hwloc topology\"");
    EXPECT_TRUE(std::regex_match(xqp::topo::format_line(devs[1]), line_regex()));
}

TEST(TopologyFormat, ReasonIsSanitised)
{
    DeviceLocality loc;
    loc.name = "rxe0";
    loc.numa_nodes = {1, 0};
    loc.cpuset = "0-3";
    loc.whole_machine = true;
    loc.reason = "say \"hi\"\nnow\tplease";
    EXPECT_EQ(xqp::topo::format_line(loc),
              "rxe0 pci=none numa=0-1 cpus=0-3 fallback=\"say 'hi' now please\"");
    loc.whole_machine = false;
    loc.pci_bus_id = "0003:01:00.0";
    EXPECT_EQ(xqp::topo::format_line(loc), "rxe0 pci=0003:01:00.0 numa=0-1 cpus=0-3");
}

TEST(TopologyFormat, FormatList)
{
    using xqp::topo::format_list;
    EXPECT_EQ(format_list({}), "");
    EXPECT_EQ(format_list({5}), "5");
    EXPECT_EQ(format_list({1, 0}), "0-1");
    EXPECT_EQ(format_list({9, 0, 2, 3, 3, 8, 7, 1}), "0-3,7-9");
    EXPECT_EQ(format_list({0, 2, 4}), "0,2,4");
    /* same syntax as hwloc's list format */
    Bitmap bm;
    ASSERT_TRUE(bm.from_list("0-3,7-9,12"));
    EXPECT_EQ(format_list({0, 1, 2, 3, 7, 8, 9, 12}), bm.to_list());
}

/* ---- small helpers ---- */

TEST(TopologyBitmap, RaiiAndMove)
{
    Bitmap a;
    ASSERT_TRUE(a);
    EXPECT_EQ(a.to_list(), "");
    ASSERT_TRUE(a.from_list("8-15,24-31"));
    EXPECT_EQ(a.to_list(), "8-15,24-31");
    Bitmap b(std::move(a));
    EXPECT_FALSE(a); /* NOLINT: moved-from is empty by contract */
    EXPECT_EQ(a.to_list(), "");
    EXPECT_EQ(b.to_list(), "8-15,24-31");
    Bitmap c(b.get());
    hwloc_bitmap_set(c.get(), 0);
    EXPECT_EQ(c.to_list(), "0,8-15,24-31");
    EXPECT_EQ(b.to_list(), "8-15,24-31"); /* c is a copy */
    a = std::move(c);
    EXPECT_EQ(a.to_list(), "0,8-15,24-31");
}

TEST(TopologyEnv, XmlFromEnv)
{
    const char *saved = std::getenv(xqp::topo::kTopoXmlEnv);
    const std::string saved_value = saved != nullptr ? saved : "";
    ::unsetenv(xqp::topo::kTopoXmlEnv);
    EXPECT_EQ(xqp::topo::xml_from_env(), "");
    ::setenv(xqp::topo::kTopoXmlEnv, "/some/file.xml", 1);
    EXPECT_EQ(xqp::topo::xml_from_env(), "/some/file.xml");
    if (saved != nullptr) {
        ::setenv(xqp::topo::kTopoXmlEnv, saved_value.c_str(), 1);
    } else {
        ::unsetenv(xqp::topo::kTopoXmlEnv);
    }
}
