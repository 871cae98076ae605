/*
 * Registrations as UCP uses them: made for one operation, handed out again
 * from UCP's registration cache for another on the same buffer.
 */
#include <ucx_build_config.h>
/* configure's probes: whether this UCX's UCP records the rights of the
 * registrations it caches */
#include <xqp_ucx_probes.h>

#include "bed.h"

#include <cstring>

using namespace xqp_test;

/* UCP up to UCX 1.16 registers a buffer with the rights of the operation at
 * hand and reuses that registration for any later one: a receive buffer of a
 * rendezvous get (local write) is then sent from with rendezvous, whose peer
 * reads it through the packed key; an eager zero-copy source (local read)
 * later receives a rendezvous put. Issue #15: the peer's RDMA failed with
 * "remote access error" (Open MPI's ping-pong on UCX 1.16). */
TEST_F(Datapath, RegistrationsUcpReusesServeRemoteAccess)
{
#ifdef XQP_UCX_HAVE_UCP_MEMH_ACCESS_FLAGS
    GTEST_SKIP() << "this UCX's UCP registers again when a cached registration lacks a right";
#endif
    const size_t size = 65536;
    const std::vector<uint8_t> data = make_pattern(size, 15);
    /* a connection of its own: a refused access fails it, not the bed's */
    uct_iface_h target = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface(kRxHeadroom, nullptr, &target));
    uct_ep_h ep = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(b_->sender, target, &ep));

    /* read remotely through a registration made for local writes */
    Region received(*b_, size, UCT_MD_MEM_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(UCS_OK, received.status());
    std::memcpy(received.ptr(), data.data(), size);
    Region dst(*b_, size);
    ASSERT_EQ(UCS_OK, dst.status());
    {
        uct_iov_t iov = {dst.ptr(), size, dst.memh(), 0, 1};
        Comp comp;
        ASSERT_EQ(UCS_INPROGRESS, b_->post([&]() -> ssize_t {
            return uct_ep_get_zcopy(ep, &iov, 1, received.addr(), received.rkey(), &comp.uct);
        }));
        ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; }));
        EXPECT_EQ(UCS_OK, comp.status);
        EXPECT_TRUE(same_bytes(dst.ptr(), data.data(), size, "get through a local-write key"));
    }

    /* written remotely through a registration made for local reads */
    Region sent(*b_, size, UCT_MD_MEM_ACCESS_LOCAL_READ);
    ASSERT_EQ(UCS_OK, sent.status());
    std::memset(sent.ptr(), 0, size);
    {
        uct_iov_t iov = {dst.ptr(), size, dst.memh(), 0, 1};
        Comp comp;
        ASSERT_EQ(UCS_INPROGRESS, b_->post([&]() -> ssize_t {
            return uct_ep_put_zcopy(ep, &iov, 1, sent.addr(), sent.rkey(), &comp.uct);
        }));
        ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; }));
        EXPECT_EQ(UCS_OK, comp.status);
        EXPECT_EQ(UCS_OK, b_->flush(ep));
        EXPECT_TRUE(same_bytes(sent.ptr(), data.data(), size, "put through a local-read key"));
    }
    EXPECT_EQ(errors_at_start_, b_->ep_errors.size()) << "the connection failed";
    uct_ep_destroy(ep);
    uct_iface_close(target);
    errors_at_start_ = b_->ep_errors.size(); /* reported above */
}
