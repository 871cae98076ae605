/*
 * Opens the xqp component through UCX's public UCT API only, the way UCP
 * does. Run under xqp-run (the plugin preloaded) on a machine or testbed
 * with an RDMA device; XQP_EXPECT_DEVICE names the device that must serve
 * (e.g. rxe0), otherwise the device-specific tests are skipped.
 */
#include <infiniband/verbs.h>
#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <ucs/sys/topo/base/topo.h>
#include <ucs/type/cpu_set.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace {

uct_component_h find_component(const char *name)
{
    uct_component_h *components = nullptr;
    unsigned num                = 0;
    EXPECT_EQ(UCS_OK, uct_query_components(&components, &num));
    uct_component_h found = nullptr;
    for (unsigned i = 0; i < num; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
        EXPECT_EQ(UCS_OK, uct_component_query(components[i], &attr));
        if (std::strcmp(attr.name, name) == 0) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    return found;
}

std::vector<std::string> md_names(uct_component_h component)
{
    uct_component_attr_t attr = {};
    attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    EXPECT_EQ(UCS_OK, uct_component_query(component, &attr));
    std::vector<uct_md_resource_desc_t> resources(attr.md_resource_count);
    attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = resources.data();
    EXPECT_EQ(UCS_OK, uct_component_query(component, &attr));
    std::vector<std::string> names;
    for (const auto &r : resources) {
        names.emplace_back(r.md_name);
    }
    return names;
}

std::string expected_device()
{
    const char *dev = std::getenv("XQP_EXPECT_DEVICE");
    return dev ? dev : "";
}

class XqpComponent : public ::testing::Test {
protected:
    void SetUp() override
    {
        component_ = find_component("xqp");
        ASSERT_NE(nullptr, component_) << "component xqp is not registered: run under xqp-run";
    }

    uct_md_h open_md(const std::string &name, ucs_status_t *status)
    {
        /* md options (UCX_XQP_*) are read from the environment here */
        uct_md_config_t *config = nullptr;
        EXPECT_EQ(UCS_OK, uct_md_config_read(component_, nullptr, nullptr, &config));
        uct_md_h md = nullptr;
        *status     = uct_md_open(component_, name.c_str(), config, &md);
        uct_config_release(config);
        return md;
    }

    uct_component_h component_ = nullptr;
};

} // namespace

TEST_F(XqpComponent, IsRegisteredWithoutClientServerCm)
{
    uct_component_attr_t attr = {};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_FLAGS;
    ASSERT_EQ(UCS_OK, uct_component_query(component_, &attr));
    EXPECT_STREQ("xqp", attr.name);
    EXPECT_EQ(0u, attr.flags & UCT_COMPONENT_FLAG_CM);
}

TEST_F(XqpComponent, OneMemoryDomainPerRdmaDevice)
{
    std::set<std::string> verbs_devices;
    int num                 = 0;
    ibv_device **list       = ibv_get_device_list(&num);
    for (int i = 0; list && (i < num); ++i) {
        verbs_devices.insert(ibv_get_device_name(list[i]));
    }
    if (list) {
        ibv_free_device_list(list);
    }
    const auto names = md_names(component_);
    EXPECT_EQ(verbs_devices, std::set<std::string>(names.begin(), names.end()));
}

TEST_F(XqpComponent, UnknownDeviceIsRefused)
{
    ucs_status_t status;
    uct_md_h md = open_md("no_such_device0", &status);
    EXPECT_EQ(UCS_ERR_NO_DEVICE, status);
    EXPECT_EQ(nullptr, md);
}

class XqpDevice : public XqpComponent {
protected:
    void SetUp() override
    {
        XqpComponent::SetUp();
        device_ = expected_device();
        if (device_.empty()) {
            GTEST_SKIP() << "XQP_EXPECT_DEVICE is not set (no RDMA device to test)";
        }
        ucs_status_t status;
        md_ = open_md(device_, &status);
        ASSERT_EQ(UCS_OK, status) << ucs_status_string(status);
        ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async_));
        ASSERT_EQ(UCS_OK, uct_worker_create(async_, UCS_THREAD_MODE_SINGLE, &worker_));
    }

    void TearDown() override
    {
        if (worker_) {
            uct_worker_destroy(worker_);
        }
        if (async_) {
            ucs_async_context_destroy(async_);
        }
        if (md_) {
            uct_md_close(md_);
        }
    }

    ucs_status_t open_iface(const std::string &dev_name, uct_iface_h *iface)
    {
        uct_iface_config_t *config = nullptr;
        ucs_status_t status = uct_md_iface_config_read(md_, "xqp", nullptr, nullptr, &config);
        if (status != UCS_OK) {
            return status;
        }
        uct_iface_params_t params     = {};
        params.field_mask             = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                        UCT_IFACE_PARAM_FIELD_DEVICE;
        params.open_mode              = UCT_IFACE_OPEN_MODE_DEVICE;
        params.mode.device.tl_name    = "xqp";
        params.mode.device.dev_name   = dev_name.c_str();
        status = uct_iface_open(md_, worker_, &params, config, iface);
        uct_config_release(config);
        return status;
    }

    std::string        device_;
    uct_md_h           md_     = nullptr;
    ucs_async_context_t *async_ = nullptr;
    uct_worker_h       worker_ = nullptr;
};

TEST_F(XqpDevice, QueryNamesTheComponent)
{
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md_, &attr));
    EXPECT_STREQ("xqp", attr.component_name);
    /* registration with packed remote keys; no allocation */
    EXPECT_EQ(uint64_t(UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY | UCT_MD_FLAG_NEED_MEMH),
              attr.cap.flags & (UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY |
                                UCT_MD_FLAG_NEED_MEMH | UCT_MD_FLAG_ALLOC));
    EXPECT_EQ(8u, attr.rkey_packed_size);
}

TEST_F(XqpDevice, ListsTransportOnActivePort)
{
    uct_tl_resource_desc_t *resources = nullptr;
    unsigned num                      = 0;
    ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(md_, &resources, &num));
    bool found = false;
    for (unsigned i = 0; i < num; ++i) {
        EXPECT_STREQ("xqp", resources[i].tl_name);
        EXPECT_EQ(UCT_DEVICE_TYPE_NET, resources[i].dev_type);
        if (std::string(resources[i].dev_name) == device_ + ":1") {
            found = true;
        }
    }
    uct_release_tl_resource_list(resources);
    EXPECT_TRUE(found) << "no xqp transport on " << device_ << ":1";
}

TEST_F(XqpDevice, InterfaceMeetsUcpLaneRules)
{
    uct_iface_h iface = nullptr;
    ASSERT_EQ(UCS_OK, open_iface(device_ + ":1", &iface));
    uct_iface_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_iface_query(iface, &attr));
    const uint64_t f = attr.cap.flags;
    /* connection model */
    EXPECT_TRUE(f & UCT_IFACE_FLAG_CONNECT_TO_IFACE);
    /* UCP 1.13: AM lane, RMA lane, rendezvous (zcopy + rkeys) */
    const uint64_t am  = UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC;
    const uint64_t rma = UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                         UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_PENDING;
    const uint64_t rndv = UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_PUT_ZCOPY;
    EXPECT_EQ(am, f & am);
    EXPECT_EQ(rma, f & rma);
    EXPECT_EQ(rndv, f & rndv);
    EXPECT_GT(attr.cap.put.max_short, 0u);
    EXPECT_GE(attr.cap.am.max_bcopy, 256u);
    /* honest atomics: 64-bit add and compare-swap when the device has them */
    EXPECT_EQ(0u, attr.cap.atomic32.op_flags | attr.cap.atomic32.fop_flags);
    EXPECT_EQ(0u, attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_SWAP));
    /* port / family + IP address of the rdma_cm listener */
    EXPECT_EQ(2u, attr.iface_addr_len);
    EXPECT_EQ(17u, attr.device_addr_len);
    EXPECT_GT(attr.bandwidth.shared, 0.0);
    std::vector<uint8_t> dev(attr.device_addr_len), addr(attr.iface_addr_len);
    ASSERT_EQ(UCS_OK, uct_iface_get_device_address(
                              iface, reinterpret_cast<uct_device_addr_t *>(dev.data())));
    ASSERT_EQ(UCS_OK, uct_iface_get_address(iface, reinterpret_cast<uct_iface_addr_t *>(addr.data())));
    EXPECT_TRUE(uct_iface_is_reachable(iface, reinterpret_cast<uct_device_addr_t *>(dev.data()),
                                       reinterpret_cast<uct_iface_addr_t *>(addr.data())));
    /* garbage is not reachable */
    std::vector<uint8_t> junk(attr.device_addr_len, 0xee);
    EXPECT_FALSE(uct_iface_is_reachable(iface, reinterpret_cast<uct_device_addr_t *>(junk.data()),
                                        reinterpret_cast<uct_iface_addr_t *>(addr.data())));
    EXPECT_EQ(UCS_OK, uct_iface_flush(iface, 0, nullptr));
    EXPECT_EQ(0u, uct_iface_progress(iface));
    uct_iface_close(iface);
}

TEST_F(XqpDevice, InterfaceOnForeignOrMalformedDeviceIsRefused)
{
    uct_iface_h iface = nullptr;
    EXPECT_EQ(UCS_ERR_NO_DEVICE, open_iface("other_dev0:1", &iface));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, open_iface(device_, &iface));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, open_iface(device_ + ":0", &iface));
}

TEST_F(XqpDevice, MalformedConfigValueIsAnError)
{
    setenv("UCX_XQP_MAX_NUM_EPS", "not-a-number", 1);
    uct_iface_config_t *config = nullptr;
    ucs_status_t status = uct_md_iface_config_read(md_, "xqp", nullptr, nullptr, &config);
    unsetenv("UCX_XQP_MAX_NUM_EPS");
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, status);
    if (status == UCS_OK) {
        uct_config_release(config);
    }
}

/* The topology the memory domain reports, with rxe0 placed by an XML file. */
class XqpLocality : public XqpComponent {
protected:
    void SetUp() override
    {
        XqpComponent::SetUp();
        device_ = expected_device();
        const char *data = std::getenv("XQP_TEST_DATA_DIR");
        if (device_ != "rxe0" || data == nullptr) {
            GTEST_SKIP() << "needs the testbed's rxe0 and XQP_TEST_DATA_DIR";
        }
        xml_ = std::string(data) + "/topologies/xqp_synthetic-rxe0-on-pci.xml";
    }

    void TearDown() override
    {
        unsetenv("UCX_XQP_TOPO_XML");
        unsetenv("UCX_XQP_LOCALITY");
    }

    /* local CPUs the md reports, and the sys_device of its transport */
    std::pair<std::set<int>, ucs_sys_device_t> query()
    {
        ucs_status_t status;
        uct_md_h md = open_md(device_, &status);
        EXPECT_EQ(UCS_OK, status);
        if (md == nullptr) {
            return {};
        }
        uct_md_attr_t attr;
        EXPECT_EQ(UCS_OK, uct_md_query(md, &attr));
        std::set<int> cpus;
        for (int cpu = 0; cpu < UCS_CPU_SETSIZE; ++cpu) {
            if (ucs_cpu_is_set(cpu, &attr.local_cpus)) {
                cpus.insert(cpu);
            }
        }
        uct_tl_resource_desc_t *resources = nullptr;
        unsigned num                      = 0;
        EXPECT_EQ(UCS_OK, uct_md_query_tl_resources(md, &resources, &num));
        ucs_sys_device_t sys_dev = UCS_SYS_DEVICE_ID_UNKNOWN;
        EXPECT_EQ(1u, num);
        if (num > 0) {
            sys_dev = resources[0].sys_device;
        }
        uct_release_tl_resource_list(resources);
        uct_md_close(md);
        return {cpus, sys_dev};
    }

    std::string device_;
    std::string xml_;
    char        bdf_[32] = {};
};

TEST_F(XqpLocality, LiveSoftRoceFallsBackToWholeMachine)
{
    const auto [cpus, sys_dev] = query();
    EXPECT_EQ(size_t(UCS_CPU_SETSIZE), cpus.size()) << "rxe0 has no PCI parent";
    EXPECT_EQ(UCS_SYS_DEVICE_ID_UNKNOWN, sys_dev);
}

TEST_F(XqpLocality, TopologyXmlPlacesTheDevice)
{
    setenv("UCX_XQP_TOPO_XML", xml_.c_str(), 1);
    const auto [cpus, sys_dev] = query();
    EXPECT_EQ((std::set<int>{2, 3}), cpus);
    EXPECT_NE(UCS_SYS_DEVICE_ID_UNKNOWN, sys_dev);
    EXPECT_STREQ("0000:81:00.0", ucs_topo_sys_device_bdf_name(sys_dev, bdf_, sizeof(bdf_)));
}

TEST_F(XqpLocality, LocalityOffReportsWholeMachine)
{
    setenv("UCX_XQP_TOPO_XML", xml_.c_str(), 1);
    setenv("UCX_XQP_LOCALITY", "off", 1);
    const auto [cpus, sys_dev] = query();
    EXPECT_EQ(size_t(UCS_CPU_SETSIZE), cpus.size());
    EXPECT_EQ(UCS_SYS_DEVICE_ID_UNKNOWN, sys_dev);
}

TEST_F(XqpLocality, MissingXmlFileFallsBackWithoutError)
{
    setenv("UCX_XQP_TOPO_XML", "/nonexistent/topology.xml", 1);
    const auto [cpus, sys_dev] = query();
    EXPECT_EQ(size_t(UCS_CPU_SETSIZE), cpus.size());
}

TEST_F(XqpLocality, MalformedLocalityValueIsAnError)
{
    setenv("UCX_XQP_LOCALITY", "sometimes", 1);
    uct_md_config_t *config = nullptr;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_md_config_read(component_, nullptr, nullptr, &config));
}

/* The registration cache: with it the same pages share one registration;
 * without it every registration is its own. */
TEST_F(XqpDevice, RegistrationCacheSharesRegistrations)
{
    std::vector<char> buffer(64 * 1024);
    for (const char *mode : {"yes", "no"}) {
        setenv("UCX_XQP_RCACHE", mode, 1);
        ucs_status_t status;
        uct_md_h md = open_md(device_, &status);
        unsetenv("UCX_XQP_RCACHE");
        ASSERT_EQ(UCS_OK, status) << mode;
        uct_mem_h a = nullptr, b = nullptr;
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, buffer.data(), buffer.size(), UCT_MD_MEM_ACCESS_ALL, &a));
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, buffer.data() + 4096, 4096, UCT_MD_MEM_ACCESS_ALL, &b));
        if (std::string(mode) == "yes") {
            EXPECT_EQ(a, b) << "the cached region covering the pages is reused";
        } else {
            EXPECT_NE(a, b);
        }
        std::vector<uint8_t> ka(8), kb(8);
        ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, a, ka.data()));
        ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, b, kb.data()));
        EXPECT_EQ(std::string(mode) == "yes", ka == kb) << mode;
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, b));
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, a));
        uct_md_close(md);
    }
}
