#include "compat/version.h"

#include <gtest/gtest.h>

using xqp::compat::Version;
using xqp::compat::version_mismatch;

TEST(VersionGuard, SameReleaseIsAccepted)
{
    EXPECT_EQ("", version_mismatch(Version{1, 13, 1}, Version{1, 13, 1}));
}

TEST(VersionGuard, EveryComponentMustMatch)
{
    const Version built{1, 13, 1};
    for (const Version &running : {Version{1, 13, 0}, Version{1, 14, 1}, Version{2, 13, 1},
                                   Version{1, 12, 1}, Version{0, 0, 0}}) {
        const std::string msg = version_mismatch(built, running);
        EXPECT_NE("", msg);
        EXPECT_EQ(std::string::npos, msg.find('\n')) << "must be one line: " << msg;
        EXPECT_NE(std::string::npos, msg.find("built for UCX 1.13.1")) << msg;
        EXPECT_NE(std::string::npos, msg.find("running UCX is " + to_string(running))) << msg;
        EXPECT_NE(std::string::npos, msg.find("disabled")) << msg;
    }
}

TEST(VersionGuard, FormatsAllThreeNumbers)
{
    EXPECT_EQ("1.22.10", to_string(Version{1, 22, 10}));
}
