#include "compat/ucx.h"

#include <gtest/gtest.h>

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
    EXPECT_EQ(unsigned(UCT_VERNO_PATCH), v.patch);
}

TEST(CompatVersion, UnitTestsRunAgainstTheUcxTheyWereBuiltFor)
{
    /* the unit tests link the same libuct as the plugin */
    const auto running = xqp::compat::running_version();
    ASSERT_TRUE(running.has_value());
    EXPECT_EQ("", xqp::compat::version_mismatch(xqp::compat::built_version(), *running));
}
