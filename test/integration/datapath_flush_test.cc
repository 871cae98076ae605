/*
 * The xqp data path through UCX's public UCT API: flush and fence. A get
 * after a fence sees the put before it; unsignaled requests are flushed and
 * retired; an endpoint flush completes after everything posted before it,
 * an interface flush once nothing is outstanding; a large get through the
 * loopback QP reads every byte. Also the endpoint check (uct_ep_check), the
 * requests on an endpoint whose peer failed until its error handler runs,
 * and the access rights of cached registrations.
 *
 * One process against a real RDMA device: one memory domain, one worker,
 * two interfaces on "<dev>:1" (a sender and a receiver) and an endpoint from
 * the sender to the receiver, connected through rdma_cm (the test bed,
 * bed.h). The data path's other concerns are in the other
 * datapath_*_test.cc (datapath_util.h lists them).
 *
 * Run under xqp-run (the plugin preloaded) with XQP_EXPECT_DEVICE naming the
 * device (the testbed's rxe0); without it every test is skipped. Sizes and
 * bursts are kept small enough for Soft-RoCE under emulation.
 */
/* first, as in UCX itself: the UCX build's configuration, which UCX's headers
 * read (each datapath_*_test.cc, as the one file they come from) */
#include <ucx_build_config.h>
/* configure's probes: whether registrations grant exactly the rights asked */
#include <xqp_ucx_probes.h>

#include "datapath_util.h"

#include <xqp/xqp.h>

namespace {

using namespace xqp_test;

/* ------------------------------------------------------------------ flush, fence */

TEST_F(Datapath, GetAfterFenceSeesPutAndGetBeforeFenceDoesNot)
{
    Region remote(*b_, 64 * kKiB + 2 * kGuard);
    Region local(*b_, 64 * kKiB + 2 * kGuard);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, local.status());
    const uint64_t raddr = remote.addr(kGuard);

    /* small: put_short, fence, get_bcopy of the same 8 bytes */
    for (uint64_t i = 0; i < 20; ++i) {
        const uint64_t value = 0x0101010101010101ull * (i + 1) ^ (i << 40);
        ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
            return uct_ep_put_short(ep(), &value, sizeof(value), raddr, remote.rkey());
        }));
        ASSERT_EQ(UCS_OK, uct_ep_fence(ep(), 0));
        uint64_t seen = 0;
        UnpackArg unpack{reinterpret_cast<uint8_t *>(&seen), sizeof(seen)};
        Comp comp;
        const ssize_t r = b_->post([&]() -> ssize_t {
            return uct_ep_get_bcopy(ep(), unpack_cb, &unpack, sizeof(seen), raddr, remote.rkey(),
                                    &comp.uct);
        });
        ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS));
        ASSERT_EQ(UCS_OK, b_->flush(ep()));
        ASSERT_EQ(1, unpack.calls);
        EXPECT_EQ(value, seen) << "iteration " << i;
    }

    /* large: put_zcopy 64 KiB, fence, get_zcopy of the same range */
    const size_t size = 64 * kKiB;
    const std::vector<uint8_t> first = make_pattern(size, 1), second = make_pattern(size, 2);
    std::vector<uint8_t> src(first);
    Region src_reg(*b_, size);
    ASSERT_EQ(UCS_OK, src_reg.status());
    std::memcpy(src_reg.ptr(), first.data(), size);
    uct_iov_t put_iov = {src_reg.ptr(), size, src_reg.memh(), 0, 1};
    uct_iov_t get_iov = {local.ptr(kGuard), size, local.memh(), 0, 1};
    Comp c1, c2;
    ssize_t r = b_->post([&]() -> ssize_t {
        return uct_ep_put_zcopy(ep(), &put_iov, 1, raddr, remote.rkey(), &c1.uct);
    });
    ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS));
    ASSERT_EQ(UCS_OK, uct_ep_fence(ep(), 0));
    r = b_->post([&]() -> ssize_t {
        return uct_ep_get_zcopy(ep(), &get_iov, 1, raddr, remote.rkey(), &c2.uct);
    });
    ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS));
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    EXPECT_TRUE(same_bytes(local.ptr(kGuard), first.data(), size, "get after fence + put"));

    /* get, fence, put of the same range: the get sees the old data */
    std::memset(local.ptr(kGuard), 0, size);
    std::memcpy(src_reg.ptr(), second.data(), size);
    Comp c3, c4;
    r = b_->post([&]() -> ssize_t {
        return uct_ep_get_zcopy(ep(), &get_iov, 1, raddr, remote.rkey(), &c3.uct);
    });
    ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS));
    ASSERT_EQ(UCS_OK, uct_ep_fence(ep(), 0));
    r = b_->post([&]() -> ssize_t {
        return uct_ep_put_zcopy(ep(), &put_iov, 1, raddr, remote.rkey(), &c4.uct);
    });
    ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS));
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    EXPECT_TRUE(same_bytes(local.ptr(kGuard), first.data(), size, "get before fence + put"));
    EXPECT_TRUE(same_bytes(remote.ptr(kGuard), second.data(), size, "the later put"));
    EXPECT_TRUE(all_bytes(remote.ptr(kGuard + size), kGuard, kGuardByte, "guard"));
}

struct FlushWitness {
    std::vector<int> order;
    Comp            *ops[3] = {};
    int              seen_calls[3] = {-1, -1, -1};
    const uint8_t   *bcopy_target = nullptr;
    const uint8_t   *bcopy_want   = nullptr;
    bool             bcopy_visible = false;
};

TEST_F(Datapath, UnsignaledRequestsAreFlushedAndRetired)
{
    /* inline puts need nothing at completion: most go unsignaled. A flush
     * after a run that ends unsignaled still completes (a marker reports
     * it), every send queue slot comes back, and the last bytes landed */
    const size_t n = 3 * 64 + 5;
    Region remote(*b_, n * sizeof(uint64_t));
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    for (size_t round = 0; round < 2; ++round) {
        for (size_t i = 0; i < n; ++i) {
            const uint64_t v = (round << 32) | i;
            ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
                return uct_ep_put_short(ep(), &v, sizeof(v), remote.addr(i * sizeof(v)),
                                        remote.rkey());
            })) << "put " << i;
        }
        Comp comp;
        ucs_status_t status = UCS_ERR_NO_RESOURCE;
        ASSERT_TRUE(b_->wait_for([&] {
            status = uct_ep_flush(ep(), 0, &comp.uct);
            return status != UCS_ERR_NO_RESOURCE;
        }));
        if (status == UCS_INPROGRESS) {
            ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; }));
            EXPECT_EQ(UCS_OK, comp.status);
        } else {
            EXPECT_EQ(UCS_OK, status);
        }
        EXPECT_EQ(UCS_OK, uct_ep_flush(ep(), 0, nullptr)) << "nothing left outstanding";
        for (size_t i = 0; i < n; ++i) {
            uint64_t got;
            std::memcpy(&got, remote.ptr(i * sizeof(got)), sizeof(got));
            ASSERT_EQ((round << 32) | i, got) << "word " << i << " of round " << round;
        }
    }

    /* an endpoint destroyed right after unsignaled requests: its teardown
     * collects them (a marker before the QP is moved to the error state) */
    uct_ep_h e = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(b_->sender, b_->receiver, &e));
    for (size_t i = 0; i < 5; ++i) {
        const uint64_t v = ~i;
        ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
            return uct_ep_put_short(e, &v, sizeof(v), remote.addr(i * sizeof(v)), remote.rkey());
        }));
    }
    uct_ep_destroy(e);
    EXPECT_EQ(UCS_OK, b_->flush(ep())) << "the test bed's endpoint is unaffected";
}

TEST_F(Datapath, EpFlushCompletesAfterEverythingPostedBefore)
{
    const size_t big = kMiB;
    Region remote(*b_, big + 2 * kKiB);
    Region src(*b_, big);
    Region dst(*b_, 64 * kKiB);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, src.status());
    ASSERT_EQ(UCS_OK, dst.status());
    const std::vector<uint8_t> big_data = make_pattern(big, 11);
    const std::vector<uint8_t> small    = make_pattern(200, 12);
    std::memcpy(src.ptr(), big_data.data(), big);
    std::memcpy(remote.ptr(big + kKiB), make_pattern(kKiB, 13).data(), kKiB);

    /* nothing outstanding: OK at once, the completion is not used */
    Comp idle;
    ASSERT_EQ(UCS_OK, uct_ep_flush(ep(), 0, &idle.uct));
    b_->spin(0.005);
    EXPECT_EQ(0, idle.calls);
    EXPECT_EQ(1, idle.uct.count);

    FlushWitness w;
    Comp c_put, c_get, c_flush;
    w.ops[0] = &c_put;
    w.ops[1] = &c_get;
    w.bcopy_target = remote.ptr(big);
    w.bcopy_want   = small.data();
    c_flush.hook_arg = &w;
    c_flush.hook = [](void *arg) {
        auto *fw = static_cast<FlushWitness *>(arg);
        fw->seen_calls[0] = fw->ops[0]->calls;
        fw->seen_calls[1] = fw->ops[1]->calls;
        fw->bcopy_visible = (std::memcmp(fw->bcopy_target, fw->bcopy_want, 200) == 0);
    };

    uct_iov_t put_iov = {src.ptr(), big, src.memh(), 0, 1};
    uct_iov_t get_iov = {dst.ptr(), kKiB, dst.memh(), 0, 1};
    PackArg pack{small.data(), small.size()};
    ssize_t r_put = b_->post([&]() -> ssize_t {
        return uct_ep_put_zcopy(ep(), &put_iov, 1, remote.addr(), remote.rkey(), &c_put.uct);
    });
    ASSERT_EQ(UCS_INPROGRESS, r_put) << "a 1 MiB put cannot be complete before any progress";
    ASSERT_EQ(200, b_->post([&]() -> ssize_t {
        return uct_ep_put_bcopy(ep(), pack_cb, &pack, remote.addr(big), remote.rkey());
    }));
    ssize_t r_get = b_->post([&]() -> ssize_t {
        return uct_ep_get_zcopy(ep(), &get_iov, 1, remote.addr(big + kKiB), remote.rkey(),
                                &c_get.uct);
    });
    ASSERT_TRUE((r_get == UCS_OK) || (r_get == UCS_INPROGRESS));
    const ucs_status_t f = uct_ep_flush(ep(), 0, &c_flush.uct);
    ASSERT_EQ(UCS_INPROGRESS, f) << ucs_status_string(f);
    EXPECT_EQ(0, c_flush.calls) << "the flush completion ran before any progress";
    ASSERT_TRUE(b_->wait_for([&] { return c_flush.calls > 0; })) << "flush never completed";
    b_->spin(0.005);
    EXPECT_EQ(1, c_flush.calls);
    EXPECT_EQ(UCS_OK, c_flush.status);
    EXPECT_EQ(1, w.seen_calls[0]) << "the put had not completed when the flush did";
    EXPECT_EQ((r_get == UCS_INPROGRESS) ? 1 : 0, w.seen_calls[1])
            << "the get had not completed when the flush did";
    EXPECT_TRUE(w.bcopy_visible) << "the put_bcopy data was not in place when the flush completed";
    EXPECT_TRUE(same_bytes(remote.ptr(), big_data.data(), big, "1 MiB put"));
    EXPECT_TRUE(same_bytes(dst.ptr(), make_pattern(kKiB, 13).data(), kKiB, "get"));
    EXPECT_EQ(UCS_OK, uct_ep_flush(ep(), 0, nullptr));
}

/* #38: UCX 1.22's uct_p2p_rma_test.get_zcopy/1 reads 245 MiB in one request
 * through an endpoint to its own interface (one RC QP connected to itself)
 * and found other bytes 203 MiB in. XQP_TEST_LOOPBACK_GET_MIB sets the size
 * (default 192). */
TEST_F(Datapath, ALargeGetThroughTheLoopbackQpReadsEveryByte)
{
    const char *mib = std::getenv("XQP_TEST_LOOPBACK_GET_MIB");
    const size_t size = ((mib != nullptr) ? std::strtoul(mib, nullptr, 10) : 192) * kMiB;
    Region remote(*b_, size);
    Region dst(*b_, size);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, dst.status());
    const std::vector<uint8_t> data = make_pattern(size, 31);
    std::memcpy(remote.ptr(), data.data(), size);

    uct_ep_h raw = nullptr;
    ASSERT_EQ(UCS_OK, b_->create_ep(b_->sender, b_->sender, &raw));
    std::unique_ptr<uct_ep, decltype(&uct_ep_destroy)> e(raw, uct_ep_destroy);
    uct_iov_t iov = {dst.ptr(), size, dst.memh(), 0, 1};
    Comp comp;
    const ssize_t r = b_->post([&]() -> ssize_t {
        return uct_ep_get_zcopy(e.get(), &iov, 1, remote.addr(), remote.rkey(), &comp.uct);
    });
    ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS))
            << ucs_status_string(static_cast<ucs_status_t>(r));
    if (r == UCS_INPROGRESS) {
        ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; }, 4 * kTimeout))
                << "the get never completed";
        EXPECT_EQ(UCS_OK, comp.status);
    }
    EXPECT_TRUE(same_bytes(dst.ptr(), data.data(), size, "loopback get"));
}

TEST_F(Datapath, IfaceFlush)
{
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    EXPECT_EQ(UCS_OK, uct_iface_flush(b_->sender, 0, nullptr)) << "nothing is outstanding";
    EXPECT_EQ(UCS_OK, uct_iface_flush(b_->receiver, 0, nullptr)) << "the receiver sends nothing";

    const size_t size = kMiB;
    Region remote(*b_, size);
    Region src(*b_, size);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, src.status());
    const std::vector<uint8_t> data = make_pattern(size, 21);
    std::memcpy(src.ptr(), data.data(), size);
    uct_iov_t iov = {src.ptr(), size, src.memh(), 0, 1};
    Comp comp;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ep(), &iov, 1, remote.addr(), remote.rkey(),
                                               &comp.uct));
    EXPECT_EQ(UCS_INPROGRESS, uct_iface_flush(b_->sender, 0, nullptr)) << "a put is outstanding";
    ucs_status_t status = UCS_INPROGRESS;
    ASSERT_TRUE(b_->wait_for([&] {
        status = uct_iface_flush(b_->sender, 0, nullptr);
        return status != UCS_INPROGRESS;
    }));
    EXPECT_EQ(UCS_OK, status);
    EXPECT_EQ(1, comp.calls) << "iface flush OK only once the put completed";
    EXPECT_TRUE(same_bytes(remote.ptr(), data.data(), size, "put before iface flush"));
}

TEST_F(Datapath, EpCheckProbesTheConnection)
{
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_check(ep(), 1, nullptr)) << "no flags defined";
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    EXPECT_TRUE(attr().cap.flags & UCT_IFACE_FLAG_EP_CHECK);

    /* idle connection: a probe goes on the wire, the peer acknowledges it */
    Comp comp;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_check(ep(), 0, &comp.uct));
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_flush(ep(), 0, nullptr)) << "the probe is outstanding";
    ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; }));
    EXPECT_EQ(1, comp.calls);
    EXPECT_EQ(UCS_OK, comp.status);
    EXPECT_EQ(UCS_OK, uct_ep_check(ep(), 0, nullptr));
    EXPECT_EQ(UCS_OK, b_->flush(ep()));

    /* a connection whose peer went away: the known error, at once */
    uct_iface_h gone = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface(kRxHeadroom, nullptr, &gone));
    uct_ep_h ep2 = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(b_->sender, gone, &ep2));
    uct_iface_close(gone); /* disconnects its side */
    ASSERT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() > errors_at_start_; }));
    EXPECT_EQ(ep2, b_->ep_errors.back().first);
    const ucs_status_t failed = b_->ep_errors.back().second;
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, failed) << "a peer that is gone, as UCX's transports say";
    /* the error handler reports it: the check itself succeeds, as UCX's
     * keepalive expects (test_uct_peer_failure_keepalive.killed) */
    EXPECT_EQ(UCS_OK, uct_ep_check(ep2, 0, nullptr));
    EXPECT_EQ(failed, uct_ep_flush(ep2, 0, nullptr));
    uct_ep_destroy(ep2);
    errors_at_start_ = b_->ep_errors.size(); /* that error was the point */
}

/* uct_ep_check with a completion on an endpoint still connecting: the
 * probe is kept like any request made then and completes once connected
 * (UCX 1.22's test_uct_ep_check_async.comp_during_wireup; before, xqp said
 * UCS_ERR_NO_RESOURCE). Without a completion it still says that. */
TEST_F(Datapath, EpCheckWhileConnectingCompletesOnceConnected)
{
    uct_ep_h raw = nullptr;
    ASSERT_EQ(UCS_OK, b_->create_ep(b_->sender, b_->receiver, &raw));
    std::unique_ptr<uct_ep, decltype(&uct_ep_destroy)> e(raw, uct_ep_destroy);
    ASSERT_NE(XQP_CONN_CONNECTED, wireup_state(e.get())) << "connected at once: nothing to test";
    /* the async thread may establish it between the two calls (seen once) */
    const ucs_status_t early = uct_ep_check(e.get(), 0, nullptr);
    if (early == UCS_OK) {
        EXPECT_EQ(XQP_CONN_CONNECTED, wireup_state(e.get())) << "UCS_OK while connecting";
    } else {
        EXPECT_EQ(UCS_ERR_NO_RESOURCE, early) << ucs_status_string(early);
    }
    Comp comp;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_check(e.get(), 0, &comp.uct));
    ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; })) << "the probe never completed";
    EXPECT_EQ(1, comp.calls);
    EXPECT_EQ(UCS_OK, comp.status);
    EXPECT_EQ(UCS_OK, b_->flush(e.get()));
}

/* A peer's death reaches the application through the error handler, from
 * progress. Until that has run, requests on the endpoint are taken as
 * before (UCX's test_uct_peer_failure.peer_failure puts right after its
 * peer went and wants UCS_OK) and end with the endpoint's status; once the
 * handler has run, every request gets the status at once. */
TEST_F(Datapath, RequestsAreTakenUntilTheErrorHandlerRuns)
{
    uct_ep_h e = nullptr;
    ASSERT_NO_FATAL_FAILURE(connect_to_closed_iface(b_, errors_at_start_, &e));
    const uint64_t word = 42;
    EXPECT_EQ(UCS_OK, uct_ep_put_short(e, &word, sizeof(word), 0x1000, 0))
            << "a request before the error handler ran";
    ASSERT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() > errors_at_start_; }));
    EXPECT_EQ(e, b_->ep_errors.back().first);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, b_->ep_errors.back().second);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, uct_ep_put_short(e, &word, sizeof(word), 0x1000, 0))
            << "a request after it";
    b_->spin(0.05);
    EXPECT_EQ(errors_at_start_ + 1, b_->ep_errors.size()) << "one error per endpoint";
    uct_ep_destroy(e);
    errors_at_start_ = b_->ep_errors.size(); /* that error was the point */
}

TEST_F(Datapath, CachedRegistrationsKeepTheirAccessRights)
{
#ifndef XQP_UCX_HAVE_UCP_MEMH_ACCESS_FLAGS
    GTEST_SKIP() << "on this UCX every registration grants every right (its UCP reuses "
                    "registrations whatever their rights: registration_test.cc)";
#endif
    /* the same pages registered for everything and for remote reads only:
     * with the registration cache (the default) the second must neither
     * share the first's registration nor be widened by it */
    const size_t size = 4096;
    Region all(*b_, size);
    Region read_only(*b_, size, UCT_MD_MEM_ACCESS_REMOTE_GET, all.ptr());
    ASSERT_EQ(UCS_OK, all.status());
    ASSERT_EQ(UCS_OK, read_only.status());
    EXPECT_NE(all.packed(), read_only.packed()) << "one registration for both";
    const std::vector<uint8_t> data = make_pattern(size, 42);
    std::memcpy(all.ptr(), data.data(), size);

    /* reading through the read-only key works */
    Region dst(*b_, size);
    ASSERT_EQ(UCS_OK, dst.status());
    uct_iov_t iov = {dst.ptr(), size, dst.memh(), 0, 1};
    Comp comp;
    ASSERT_EQ(UCS_INPROGRESS, b_->post([&]() -> ssize_t {
        return uct_ep_get_zcopy(ep(), &iov, 1, read_only.addr(), read_only.rkey(), &comp.uct);
    }));
    ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; }));
    EXPECT_EQ(UCS_OK, comp.status);
    EXPECT_TRUE(same_bytes(dst.ptr(), data.data(), size, "get through the read-only key"));

    /* writing through it is refused by the target's HCA: the connection
     * fails (one of its own, the test bed's stays healthy) */
    uct_iface_h target = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface(kRxHeadroom, nullptr, &target));
    uct_ep_h writer = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(b_->sender, target, &writer));
    const uint64_t word = 0x1122334455667788ull;
    ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
        return uct_ep_put_short(writer, &word, sizeof(word), read_only.addr(), read_only.rkey());
    }));
    ASSERT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() > errors_at_start_; }));
    EXPECT_EQ(writer, b_->ep_errors.back().first);
    EXPECT_NE(UCS_OK, b_->ep_errors.back().second);
    EXPECT_TRUE(same_bytes(all.ptr(), data.data(), size, "after the refused put"));
    uct_ep_destroy(writer);
    uct_iface_close(target);
    errors_at_start_ = b_->ep_errors.size(); /* that error was the point */
}

} // namespace
