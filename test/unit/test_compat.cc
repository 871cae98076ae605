#include "compat/ops.h"
#include "compat/ucx.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <string>

using xqp::compat::unsupported;

TEST(Unsupported, StatusSlotsReturnUnsupported)
{
    auto put_short = unsupported<uct_ep_put_short_func_t>;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, put_short(nullptr, nullptr, 0, 0, 0));
}

TEST(Unsupported, SizeSlotsReturnNegativeStatus)
{
    auto put_bcopy = unsupported<uct_ep_put_bcopy_func_t>;
    const ssize_t ret = put_bcopy(nullptr, nullptr, nullptr, 0, 0);
    EXPECT_EQ(static_cast<ssize_t>(UCS_ERR_UNSUPPORTED), ret);
    EXPECT_LT(ret, 0);
}

TEST(Unsupported, PointerSlotsReturnStatusPointer)
{
    auto rndv = unsupported<uct_ep_tag_rndv_zcopy_func_t>;
    ucs_status_ptr_t ret = rndv(nullptr, 0, nullptr, 0, nullptr, 0, 0, nullptr);
    ASSERT_TRUE(UCS_PTR_IS_ERR(ret));
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, UCS_PTR_STATUS(ret));
}

TEST(CompatVersion, BuiltVersionIsTheHeadersVersion)
{
    const auto v = xqp::compat::built_version();
    EXPECT_EQ(unsigned(UCT_VERNO_MAJOR), v.major);
    EXPECT_EQ(unsigned(UCT_VERNO_MINOR), v.minor);
    /* "X.Y.Z", or more after it (UCT_VERNO_PATCH only exists from 1.13) */
    const std::string built = xqp::compat::to_string(v);
    EXPECT_EQ(0u, std::string(UCT_VERNO_STRING).rfind(built, 0)) << UCT_VERNO_STRING;
    EXPECT_TRUE((std::string(UCT_VERNO_STRING).size() == built.size()) ||
                !std::isdigit(static_cast<unsigned char>(UCT_VERNO_STRING[built.size()])))
            << UCT_VERNO_STRING;
}

TEST(CompatVersion, VersionFieldsOfAString)
{
    using xqp::compat::detail::version_field;
    static_assert(version_field("1.12.1", 0) == 1);
    static_assert(version_field("1.12.1", 1) == 12);
    static_assert(version_field("1.12.1", 2) == 1);
    static_assert(version_field("1.22.0-rc3", 2) == 0);
    static_assert(version_field("1.22", 2) == 0);
}

TEST(CompatVersion, UnitTestsRunAgainstTheUcxTheyWereBuiltFor)
{
    /* the unit tests link the same libuct as the plugin */
    const auto running = xqp::compat::running_version();
    ASSERT_TRUE(running.has_value());
    EXPECT_EQ("", xqp::compat::version_mismatch(xqp::compat::built_version(), *running));
}

/*
 * The operation tables compat/ops.h builds for this UCX release, driven
 * through UCX's public entry points, so that each adapter is called the way
 * this release calls it.
 */
namespace {

unsigned reg_flags_seen = 0;
int memh_storage        = 0;

void test_md_close(uct_md_h) {}

ucs_status_t test_md_query(uct_md_h, xqp::compat::MdCaps *caps)
{
    caps->flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY;
    caps->max_reg          = 12345;
    caps->reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->rkey_packed_size = 8;
    caps->reg_cost         = ucs_linear_func_make(1e-6, 2e-9);
    return UCS_OK;
}

ucs_status_t test_mem_reg(uct_md_h, void *, size_t, unsigned flags, uct_mem_h *memh_p)
{
    reg_flags_seen = flags;
    *memh_p        = &memh_storage;
    return UCS_OK;
}

ucs_status_t test_mem_dereg(uct_md_h, const uct_md_mem_dereg_params_t *)
{
    return UCS_OK;
}

ucs_status_t test_mkey_pack(uct_md_h, uct_mem_h memh, const xqp::compat::MkeyPackParams *,
                            void *rkey_buffer)
{
    const uint32_t key = (memh == &memh_storage) ? 0x1234u : 0u;
    std::memcpy(rkey_buffer, &key, sizeof(key));
    return UCS_OK;
}

ucs_status_t test_rkey_unpack(uct_component_t *, const void *rkey_buffer, uct_rkey_t *rkey_p,
                              void **handle_p)
{
    uint32_t key;
    std::memcpy(&key, rkey_buffer, sizeof(key));
    *rkey_p   = key;
    *handle_p = nullptr;
    return UCS_OK;
}

int test_is_reachable(const uct_iface_h, const uct_device_addr_t *, const uct_iface_addr_t *,
                      char *, size_t)
{
    return 1;
}

int test_is_same_device(const uct_iface_h, const uct_device_addr_t *)
{
    return 0;
}

int test_ep_is_connected(uct_ep_h, const uct_device_addr_t *, const uct_iface_addr_t *)
{
    return 0;
}

uct_md_ops_t test_md_ops = xqp::compat::make_md_ops<test_md_close, test_md_query, test_mem_reg,
                                                    test_mem_dereg, test_mkey_pack>();

/* every slot of a table of function pointers is set */
template <typename Ops> bool all_slots_set(const Ops &ops)
{
    using slot_t = void (*)();
    static_assert(sizeof(Ops) % sizeof(slot_t) == 0, "a table of function pointers");
    slot_t slots[sizeof(Ops) / sizeof(slot_t)];
    std::memcpy(slots, &ops, sizeof(ops));
    for (auto slot : slots) {
        if (slot == nullptr) {
            return false;
        }
    }
    return true;
}

ucs_status_t test_rkey_release(uct_component_t *, uct_rkey_t, void *)
{
    return UCS_OK;
}

using Component = uct_component_t;

/* as src/component/component.cc builds its component */
uct_component_t test_component = {
    .name               = "xqptest",
    .query_md_resources = xqp::compat::unsupported<decltype(Component::query_md_resources)>,
    .md_open            = xqp::compat::unsupported<decltype(Component::md_open)>,
    .cm_open            = xqp::compat::unsupported<decltype(Component::cm_open)>,
    XQP_UCX_COMPONENT_RKEY_SLOTS(test_rkey_unpack, test_rkey_release)
    .md_config          = xqp::compat::config_entry("", "", nullptr, 0),
    .cm_config          = xqp::compat::config_entry("", "", nullptr, 0),
    .tl_list            = {},
    .list               = {},
    .flags              = 0,
    .md_vfs_init        = xqp::compat::unsupported<decltype(Component::md_vfs_init)>,
};

struct CompatMd : testing::Test {
    uct_component_t &component = test_component;
    uct_md_t        md         = {&test_md_ops, &test_component};
};

} // namespace

TEST_F(CompatMd, QueryReportsTheCaps)
{
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(&md, &attr));
    EXPECT_EQ(12345u, attr.cap.max_reg);
    EXPECT_TRUE(attr.cap.flags & UCT_MD_FLAG_REG);
    EXPECT_EQ(8u, attr.rkey_packed_size);
    EXPECT_DOUBLE_EQ(2e-9, attr.reg_cost.m);
    EXPECT_STREQ("xqptest", attr.component_name);
}

TEST_F(CompatMd, MemRegPassesTheFlags)
{
    char buffer[64];
    uct_mem_h memh       = nullptr;
    const unsigned flags = UCT_MD_MEM_ACCESS_REMOTE_GET | UCT_MD_MEM_FLAG_HIDE_ERRORS;
    reg_flags_seen       = 0;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(&md, buffer, sizeof(buffer), flags, &memh));
    EXPECT_EQ(flags, reg_flags_seen);
    EXPECT_EQ(static_cast<void *>(&memh_storage), memh);
}

TEST_F(CompatMd, MkeyPackAndRkeyUnpackRoundTrip)
{
    uint32_t packed = 0;
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(&md, &memh_storage, &packed));
    uct_rkey_bundle_t bundle = {};
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(&component, &packed, &bundle));
    EXPECT_EQ(0x1234u, bundle.rkey);
}

TEST(CompatOps, NoTableHasAnEmptySlot)
{
    EXPECT_TRUE(all_slots_set(test_md_ops));
    const auto *internal = xqp::compat::iface_internal_ops<test_is_reachable, test_is_same_device,
                                                           test_ep_is_connected>();
    ASSERT_NE(nullptr, internal);
    EXPECT_TRUE(all_slots_set(*internal));
}

TEST(CompatOps, ConfigEntryIsNotOnAnyList)
{
    static ucs_config_field_t table[] = {{}};
    const auto entry = xqp::compat::config_entry("name", "PREFIX_", table, 24);
    EXPECT_STREQ("name", entry.name);
    EXPECT_STREQ("PREFIX_", entry.prefix);
    EXPECT_EQ(table, entry.table);
    EXPECT_EQ(24u, entry.size);
    EXPECT_EQ(nullptr, entry.list.next);
}
