#include "topology/membind.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace {

struct Mapping {
    size_t length = static_cast<size_t>(sysconf(_SC_PAGESIZE)) * 4;
    void  *addr   = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
    ~Mapping() { munmap(addr, length); }
};

/* the first online NUMA node of this machine, from sysfs */
bool first_online_node(unsigned *node)
{
    std::ifstream f("/sys/devices/system/node/online");
    std::string text;
    if (!(f >> text) || text.empty() || !isdigit(static_cast<unsigned char>(text[0]))) {
        return false;
    }
    *node = static_cast<unsigned>(std::stoul(text));
    return true;
}

} // namespace

TEST(Membind, NoNodeIsNotBoundAndSaysWhy)
{
    Mapping m;
    std::string why;
    EXPECT_FALSE(xqp::topo::bind_to_numa_nodes(m.addr, m.length, {}, &why));
    EXPECT_EQ("no local numa node known", why);
}

TEST(Membind, NodeThatDoesNotExistIsRefused)
{
    Mapping m;
    std::string why;
    EXPECT_FALSE(xqp::topo::bind_to_numa_nodes(m.addr, m.length, {4000}, &why));
    EXPECT_NE(std::string::npos, why.find("hwloc_set_area_membind")) << why;
}

TEST(Membind, BindsToAnExistingNode)
{
    unsigned node;
    if (!first_online_node(&node)) {
        GTEST_SKIP() << "no NUMA information in sysfs";
    }
    Mapping m;
    std::string why;
    ASSERT_TRUE(xqp::topo::bind_to_numa_nodes(m.addr, m.length, {node}, &why)) << why;
    /* the pages are usable after binding */
    static_cast<char *>(m.addr)[0]            = 1;
    static_cast<char *>(m.addr)[m.length - 1] = 2;
    EXPECT_EQ(2, static_cast<char *>(m.addr)[m.length - 1]);
}
