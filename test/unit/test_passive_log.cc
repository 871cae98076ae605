/*
 * The interface's record of connect requests (xqp_iface_passive_count and
 * _info): every request is counted, only the last `capacity` are kept.
 */
#include "iface/passive_log.h"

#include <gtest/gtest.h>

namespace {

using xqp::iface::PassiveLog;

/* stand-ins for connections: only their addresses are used */
const auto *conn(int i)
{
    static char slots[8];
    return reinterpret_cast<const xqp::wireup::Connection *>(&slots[i]);
}

TEST(PassiveLog, KeepsTheLastRecordsAndCountsThemAll)
{
    PassiveLog log(3);
    for (int i = 0; i < 5; ++i) {
        log.add(conn(i));
        log.find(conn(i))->qp_num = 100 + i;
    }
    EXPECT_EQ(5u, log.count());
    xqp_wireup_info_t info = {};
    EXPECT_EQ(-ENOENT, log.get(0, &info)) << "a dropped record";
    EXPECT_EQ(-ENOENT, log.get(1, &info));
    for (uint64_t i = 2; i < 5; ++i) {
        ASSERT_EQ(0, log.get(i, &info)) << i;
        EXPECT_EQ(100 + i, info.qp_num);
    }
    EXPECT_EQ(-ENOENT, log.get(5, &info)) << "past the end";
    EXPECT_EQ(nullptr, log.find(conn(0))) << "the dropped record is not found";
}

TEST(PassiveLog, AForgottenConnectionKeepsItsRecord)
{
    PassiveLog log(4);
    log.add(conn(0));
    log.find(conn(0))->qp_num = 7;
    log.forget(conn(0));
    EXPECT_EQ(nullptr, log.find(conn(0)));
    xqp_wireup_info_t info = {};
    ASSERT_EQ(0, log.get(0, &info));
    EXPECT_EQ(7u, info.qp_num);
    EXPECT_EQ(1u, log.count());
}

TEST(PassiveLog, AConnectionAtAForgottenOnesAddressGetsItsOwnRecord)
{
    PassiveLog log(4);
    log.add(conn(0));
    log.find(conn(0))->qp_num = 1;
    log.forget(conn(0));
    log.add(conn(0)); /* a new connection where the destroyed one was */
    log.find(conn(0))->qp_num = 2;
    xqp_wireup_info_t info = {};
    ASSERT_EQ(0, log.get(0, &info));
    EXPECT_EQ(1u, info.qp_num) << "the new connection wrote the old one's record";
    ASSERT_EQ(0, log.get(1, &info));
    EXPECT_EQ(2u, info.qp_num);
}

} // namespace
