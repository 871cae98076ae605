/*
 * The xqp data path through UCX's public UCT API: the rest. The AM alignment
 * a receiving interface is opened with; endpoints destroyed while they
 * connect; requests made while connecting (they go out in order once
 * connected, end with the connection's failure, or are canceled by a
 * flush); malformed input (oversized operations, UCX's parameter checks,
 * invalidated registrations, foreign remote keys).
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
/* first, as in UCX itself: the UCX build's configuration (ENABLE_PARAMS_CHECK) */
#include <ucx_build_config.h>

#include "datapath_util.h"

#include <xqp/xqp.h>

#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstdio>
#include <initializer_list>
#include <utility>

namespace {

using namespace xqp_test;

/* ------------------------------------------------------------------ AM alignment */

/* UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT / _AM_ALIGN_OFFSET: a receiver opened
 * with them hands its handlers payloads at data + offset aligned to the
 * alignment, for every AM kind that lands in a receive buffer (all of
 * xqp's), and the bytes are intact */
TEST_F(Datapath, AmAlignmentIsHonoured)
{
    struct Case {
        size_t align;
        size_t offset;
        bool   with_offset;
    };
    const Case cases[] = {{1, 0, false},  {8, 0, false},    {64, 5, true},
                          {256, 100, true}, {4096, 0, true}, {4096, 128, true},
                          {8192, 7, true}};
    const size_t size = std::min<size_t>(100, attr().cap.am.max_short);
    Region src(*b_, size);
    ASSERT_EQ(UCS_OK, src.status());
    std::vector<uint8_t> msg(size);
    for (size_t i = 0; i < size; ++i) {
        msg[i] = static_cast<uint8_t>(i * 13 + 1);
    }
    std::memcpy(src.ptr(), msg.data(), size);

    struct Seen {
        std::vector<std::vector<uint8_t>> msgs;
        std::vector<uintptr_t>            addrs;
    } seen;
    auto handler = [](void *arg, void *data, size_t length, unsigned) -> ucs_status_t {
        auto *s = static_cast<Seen *>(arg);
        s->msgs.emplace_back(static_cast<uint8_t *>(data), static_cast<uint8_t *>(data) + length);
        s->addrs.push_back(reinterpret_cast<uintptr_t>(data));
        return UCS_OK;
    };
    for (const Case &c : cases) {
        SCOPED_TRACE("alignment " + std::to_string(c.align) + ", offset " +
                     (c.with_offset ? std::to_string(c.offset) : "none"));
        uct_iface_h rx = nullptr;
        ASSERT_EQ(UCS_OK, b_->open_iface(kRxHeadroom, "16", &rx, [&](uct_iface_params_t &p) {
            p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT;
            p.am_alignment = c.align;
            if (c.with_offset) {
                p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
                p.am_align_offset = c.offset;
            }
        }));
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(rx, kAmId, handler, &seen, 0));
        uct_ep_h e = nullptr;
        ASSERT_EQ(UCS_OK, b_->connect(b_->sender, rx, &e));
        seen = {};
        PackArg pack{msg.data(), size};
        uct_iov_t iov = {src.ptr(8), size - 8, src.memh(), 0, 1};
        ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
            return uct_ep_am_short(e, kAmId, load64(msg.data()), msg.data() + 8,
                                   static_cast<unsigned>(size - 8));
        }));
        ASSERT_EQ(static_cast<ssize_t>(size), b_->post([&]() -> ssize_t {
            return uct_ep_am_bcopy(e, kAmId, pack_cb, &pack, 0);
        }));
        const ssize_t z = b_->post([&]() -> ssize_t {
            return uct_ep_am_zcopy(e, kAmId, msg.data(), 8, &iov, 1, 0, nullptr);
        });
        EXPECT_TRUE((z == UCS_OK) || (z == UCS_INPROGRESS)) << z;
        ASSERT_EQ(UCS_OK, b_->flush(e));
        ASSERT_TRUE(b_->wait_for([&] { return seen.msgs.size() >= 3; }));
        for (size_t k = 0; k < seen.msgs.size(); ++k) {
            EXPECT_EQ(0u, (seen.addrs[k] + c.offset) % c.align) << "message " << k;
            EXPECT_EQ(msg, seen.msgs[k]) << "message " << k;
        }
        uct_ep_destroy(e);
        uct_iface_close(rx);
    }

    /* invalid: no power of two, an offset without an alignment */
    for (const size_t align : {size_t(0), size_t(3), size_t(24)}) {
        uct_iface_h rx = nullptr;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  b_->open_iface(kRxHeadroom, "16", &rx, [&](uct_iface_params_t &p) {
                      p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT;
                      p.am_alignment = align;
                  }))
                << "alignment " << align;
    }
    uct_iface_h rx = nullptr;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              b_->open_iface(kRxHeadroom, "16", &rx, [&](uct_iface_params_t &p) {
                  p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
                  p.am_align_offset = 11;
              }));
}

/* ------------------------------------------------------------------ wireup vs destroy */

/* UCP destroys endpoints in the middle of their wireup. uct_ep_destroy at any
 * point of the connection (resolving, connecting, just connected) must stop
 * it for good: no rdma_cm event, timer or callback may reach the endpoint or
 * its connection afterwards (they did: the connection's cm_id and QP were
 * torn down after the async context was unblocked, while the async thread
 * could be handling an event of that id; under valgrind this crashed with
 * SIGSEGV). The interfaces and the test's own endpoint keep working, and no
 * error is reported for an endpoint that is gone. */
TEST_F(Datapath, EndpointDestroyedWhileConnecting)
{
    /* how long a whole connection takes here, to spread the destroys over it */
    uct_ep_h e       = nullptr;
    const auto start = Clock::now();
    ASSERT_EQ(UCS_OK, b_->connect(b_->sender, b_->receiver, &e));
    const double connect_s = std::chrono::duration<double>(Clock::now() - start).count();
    uct_ep_destroy(e);

    /* round 0: at once; the last rounds: around the time it connects
     * (bounded: under valgrind a connection takes seconds) */
    constexpr int kRounds = 24;
    const double span     = std::min(connect_s * 1.2, 2.0);
    for (int k = 0; k < kRounds; ++k) {
        ASSERT_EQ(UCS_OK, b_->create_ep(b_->sender, b_->receiver, &e)) << "round " << k;
        b_->spin(span * k / kRounds);
        uct_ep_destroy(e);
    }
    /* whatever the destroyed connections still had in flight arrives now */
    b_->spin(std::min(2.0, connect_s));
    EXPECT_EQ(UCS_OK, b_->flush(ep()));
    const std::vector<uint8_t> msg = make_pattern(32, 1);
    PackArg pack{msg.data(), msg.size()};
    EXPECT_EQ(32, b_->post([&]() -> ssize_t {
        return uct_ep_am_bcopy(ep(), kAmId, pack_cb, &pack, 0);
    }));
    EXPECT_TRUE(b_->wait_for([&] { return !sink_.msgs.empty(); })) << "the test's own endpoint";
    EXPECT_EQ(std::vector<std::vector<uint8_t>>{msg}, sink_.msgs);
}

/* ------------------------------------------------------------------ requests while connecting */

/* uct_ep_create returns before the connection is up, and UCT users send at
 * once (UCX's uct_p2p_am_alignment does, and failed on the
 * UCS_ERR_NO_RESOURCE it got). Every kind of request made then is accepted,
 * goes out in order once the connection is up, before anything made later,
 * and carries the bytes the caller had at the call: inline data and AM
 * headers are copied, the caller's buffers are scribbled over afterwards. */
TEST_F(Datapath, RequestsMadeWhileConnectingGoOutInOrder)
{
    constexpr size_t kSlot = 512;
    Region remote(*b_, 8 * kSlot), local(*b_, 8 * kSlot);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, local.status());
    const std::vector<uint8_t> put_s = make_pattern(48, 21), put_b = make_pattern(kSlot, 22),
                               put_z = make_pattern(kSlot, 23), got = make_pattern(kSlot, 24),
                               am_s = make_pattern(40, 25), am_b = make_pattern(300, 26),
                               am_z = make_pattern(kSlot, 27);
    std::memcpy(remote.ptr(3 * kSlot), got.data(), kSlot);  /* get_bcopy reads it */
    std::memcpy(remote.ptr(4 * kSlot), got.data(), kSlot);  /* get_zcopy reads it */
    const uint64_t counter = 1000;
    std::memcpy(remote.ptr(5 * kSlot), &counter, sizeof(counter));
    std::memcpy(local.ptr(0), put_z.data(), kSlot);
    std::memcpy(local.ptr(2 * kSlot), am_z.data(), kSlot);

    uct_ep_h raw = nullptr;
    ASSERT_EQ(UCS_OK, b_->create_ep(b_->sender, b_->receiver, &raw));
    std::unique_ptr<uct_ep, decltype(&uct_ep_destroy)> e(raw, uct_ep_destroy);
    ASSERT_NE(XQP_CONN_CONNECTED, wireup_state(e.get())) << "connected before any request";

    std::vector<uint8_t> scratch = put_s; /* the callers' buffers, changed after the calls */
    EXPECT_EQ(UCS_OK, uct_ep_put_short(e.get(), scratch.data(), scratch.size(),
                                       remote.addr(0), remote.rkey()));
    std::fill(scratch.begin(), scratch.end(), 0);
    PackArg pb{put_b.data(), kSlot};
    EXPECT_EQ(static_cast<ssize_t>(kSlot),
              uct_ep_put_bcopy(e.get(), pack_cb, &pb, remote.addr(kSlot), remote.rkey()));
    Comp cz, cgb, cgz, cf, caz;
    uct_iov_t iov = {local.ptr(0), kSlot, local.memh(), 0, 1};
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(e.get(), &iov, 1, remote.addr(2 * kSlot),
                                               remote.rkey(), &cz.uct));
    std::vector<uint8_t> read_back(kSlot, 0);
    UnpackArg ub{read_back.data(), kSlot};
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_get_bcopy(e.get(), unpack_cb, &ub, kSlot,
                                               remote.addr(3 * kSlot), remote.rkey(), &cgb.uct));
    uct_iov_t giov = {local.ptr(kSlot), kSlot, local.memh(), 0, 1};
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_get_zcopy(e.get(), &giov, 1, remote.addr(4 * kSlot),
                                               remote.rkey(), &cgz.uct));
    uint64_t fetched = 0;
    const bool atomics = attr().cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_ADD);
    if (atomics) {
        EXPECT_EQ(UCS_INPROGRESS,
                  uct_ep_atomic64_fetch(e.get(), UCT_ATOMIC_OP_ADD, 5, &fetched,
                                        remote.addr(5 * kSlot), remote.rkey(), &cf.uct));
    }
    scratch = am_s;
    uint64_t header = 0x1122334455667788ull;
    EXPECT_EQ(UCS_OK, uct_ep_am_short(e.get(), kAmId, header, scratch.data(), scratch.size()));
    header = 0;
    std::fill(scratch.begin(), scratch.end(), 0);
    PackArg ab{am_b.data(), am_b.size()};
    EXPECT_EQ(static_cast<ssize_t>(am_b.size()), uct_ep_am_bcopy(e.get(), kAmId, pack_cb, &ab, 0));
    std::vector<uint8_t> am_hdr = make_pattern(16, 28), hdr_copy = am_hdr;
    uct_iov_t aiov = {local.ptr(2 * kSlot), kSlot, local.memh(), 0, 1};
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_am_zcopy(e.get(), kAmId, am_hdr.data(), am_hdr.size(),
                                              &aiov, 1, 0, &caz.uct));
    std::fill(am_hdr.begin(), am_hdr.end(), 0);
    /* the connection may have come up after the first requests: those made
     * then wait behind the deferred ones */
    EXPECT_EQ(0, cz.calls + cgb.calls + cgz.calls + cf.calls + caz.calls)
            << "nothing completes before the connection is up";

    ASSERT_EQ(UCS_OK, b_->flush(e.get()));
    for (Comp *c : {&cz, &cgb, &cgz, &caz}) {
        EXPECT_EQ(1, c->calls);
        EXPECT_EQ(UCS_OK, c->status);
    }
    EXPECT_TRUE(same_bytes(remote.ptr(0), put_s.data(), put_s.size(), "put_short"));
    EXPECT_TRUE(same_bytes(remote.ptr(kSlot), put_b.data(), kSlot, "put_bcopy"));
    EXPECT_TRUE(same_bytes(remote.ptr(2 * kSlot), put_z.data(), kSlot, "put_zcopy"));
    EXPECT_TRUE(same_bytes(read_back.data(), got.data(), kSlot, "get_bcopy"));
    EXPECT_TRUE(same_bytes(local.ptr(kSlot), got.data(), kSlot, "get_zcopy"));
    if (atomics) {
        EXPECT_EQ(1, cf.calls);
        EXPECT_EQ(counter, fetched);
        EXPECT_EQ(counter + 5, load64(remote.ptr(5 * kSlot)));
    }
    ASSERT_TRUE(b_->wait_for([&] { return sink_.msgs.size() >= 3; }));
    ASSERT_EQ(3u, sink_.msgs.size());
    std::vector<uint8_t> want_s(sizeof(uint64_t));
    const uint64_t sent_header = 0x1122334455667788ull;
    std::memcpy(want_s.data(), &sent_header, sizeof(sent_header));
    want_s.insert(want_s.end(), am_s.begin(), am_s.end());
    std::vector<uint8_t> want_z = hdr_copy;
    want_z.insert(want_z.end(), am_z.begin(), am_z.end());
    EXPECT_EQ(want_s, sink_.msgs[0]) << "am_short, first";
    EXPECT_EQ(am_b, sink_.msgs[1]) << "am_bcopy, second";
    EXPECT_EQ(want_z, sink_.msgs[2]) << "am_zcopy, third";
}

/* A connection that never comes up: the requests made while it tried end
 * with the endpoint's status (each completion once, the error handler once);
 * an endpoint destroyed first cancels them. Nothing leaks into the next
 * test (TearDown counts errors and stray messages). */
TEST_F(Datapath, RequestsMadeWhileConnectingEndWithItsFailure)
{
    Region local(*b_, 4 * kKiB);
    ASSERT_EQ(UCS_OK, local.status());
    uct_iface_h gone = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface(kRxHeadroom, nullptr, &gone));
    IfaceAddress addr;
    ASSERT_EQ(UCS_OK, iface_address(gone, &addr));
    uct_iface_close(gone); /* nobody listens there any more */

    uct_ep_h failing = nullptr, destroyed = nullptr;
    ASSERT_EQ(UCS_OK, create_ep_to(b_->sender, addr, &failing));
    ASSERT_EQ(UCS_OK, create_ep_to(b_->sender, addr, &destroyed));
    Comp cf, cd;
    uct_iov_t iov = {local.ptr(0), 256, local.memh(), 0, 1};
    const std::vector<uint8_t> msg = make_pattern(64, 3);
    PackArg pack{msg.data(), msg.size()};
    EXPECT_EQ(static_cast<ssize_t>(msg.size()),
              uct_ep_am_bcopy(failing, kAmId, pack_cb, &pack, 0));
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(failing, &iov, 1, 0x1000, 0, &cf.uct));
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(destroyed, &iov, 1, 0x1000, 0, &cd.uct));
    uct_ep_destroy(destroyed);
    EXPECT_EQ(1, cd.calls) << "a destroyed endpoint's request ends at once";
    EXPECT_EQ(UCS_ERR_CANCELED, cd.status);

    ASSERT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() > errors_at_start_; }))
            << "the connection to a closed interface never failed";
    EXPECT_EQ(failing, b_->ep_errors.back().first);
    const ucs_status_t failed = b_->ep_errors.back().second;
    EXPECT_TRUE(UCS_STATUS_IS_ERR(failed));
    EXPECT_EQ(1, cf.calls);
    EXPECT_EQ(failed, cf.status) << "the request ends with the endpoint's status";
    EXPECT_EQ(failed, uct_ep_flush(failing, 0, nullptr));
    EXPECT_EQ(failed, uct_ep_am_bcopy(failing, kAmId, pack_cb, &pack, 0));
    b_->spin(0.05);
    EXPECT_EQ(1, cf.calls);
    EXPECT_EQ(errors_at_start_ + 1, b_->ep_errors.size()) << "one error per endpoint";
    uct_ep_destroy(failing);
    EXPECT_EQ(1, cf.calls);
    errors_at_start_ = b_->ep_errors.size(); /* that error was the point */
}

/* uct_ep_flush(UCT_FLUSH_FLAG_CANCEL): the user stops an endpoint with
 * requests in flight (UCX's uct_cancel_test, and UCP's ep close in force
 * mode). They end, each once, with success or UCS_ERR_CANCELED; the flush
 * completes after them; no error is reported; the endpoint refuses new
 * requests; the peer is not disturbed. */
TEST_F(Datapath, FlushCancelEndsRequestsInFlight)
{
    constexpr size_t kSize = 64 * kKiB, kCount = 16;
    Region remote(*b_, kSize), local(*b_, kSize);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, local.status());
    uct_ep_h raw = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(b_->sender, b_->receiver, &raw));
    std::unique_ptr<uct_ep, decltype(&uct_ep_destroy)> e(raw, uct_ep_destroy);

    std::vector<Comp> comps(kCount);
    uct_iov_t iov = {local.ptr(), kSize, local.memh(), 0, 1};
    size_t posted = 0;
    for (; posted < kCount; ++posted) {
        const ucs_status_t st = uct_ep_put_zcopy(e.get(), &iov, 1, remote.addr(), remote.rkey(),
                                                 &comps[posted].uct);
        if (st == UCS_ERR_NO_RESOURCE) {
            break;
        }
        ASSERT_EQ(UCS_INPROGRESS, st) << "put " << posted;
    }
    const std::vector<uint8_t> msg = make_pattern(16, 9);
    EXPECT_EQ(UCS_OK, uct_ep_am_short(e.get(), kAmId, 1, msg.data(), msg.size()));
    Comp flushed;
    const ucs_status_t st = uct_ep_flush(e.get(), UCT_FLUSH_FLAG_CANCEL, &flushed.uct);
    ASSERT_TRUE((st == UCS_OK) || (st == UCS_INPROGRESS)) << ucs_status_string(st);
    if (st == UCS_INPROGRESS) {
        ASSERT_TRUE(b_->wait_for([&] { return flushed.calls > 0; })) << "the flush never completed";
    }
    for (size_t i = 0; i < posted; ++i) {
        EXPECT_EQ(1, comps[i].calls) << "put " << i;
        EXPECT_TRUE((comps[i].status == UCS_OK) || (comps[i].status == UCS_ERR_CANCELED))
                << "put " << i << ": " << ucs_status_string(comps[i].status);
    }
    EXPECT_EQ(UCS_ERR_CANCELED, uct_ep_put_short(e.get(), msg.data(), msg.size(), remote.addr(),
                                                 remote.rkey()))
            << "a canceled endpoint takes no new request";
    EXPECT_EQ(UCS_OK, uct_ep_flush(e.get(), UCT_FLUSH_FLAG_CANCEL, nullptr));
    b_->spin(0.05);
    EXPECT_EQ(errors_at_start_, b_->ep_errors.size()) << "a cancel is not an error";
    e.reset();
    b_->spin(0.05); /* the message, if it went out before the cancel */
    EXPECT_LE(sink_.msgs.size(), 1u);
    sink_.msgs.clear();
}

/* ------------------------------------------------------------------ malformed input */

TEST_F(Datapath, OversizedOperationsAreRefused)
{
    const auto &cap = attr().cap;
    const size_t big = std::max<size_t>({cap.put.max_short, cap.am.max_short,
                                         cap.get.max_bcopy, cap.am.max_zcopy}) + 64;
    Region remote(*b_, big);
    Region local(*b_, big);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, local.status());
    std::memset(remote.ptr(), 0x11, big);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_short(ep(), local.ptr(), static_cast<unsigned>(cap.put.max_short + 1),
                               remote.addr(), remote.rkey()));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_short(ep(), kAmId, 0, local.ptr(), static_cast<unsigned>(cap.am.max_short + 1)));
    UnpackArg unpack{local.ptr(), big};
    Comp comp;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_get_bcopy(ep(), unpack_cb, &unpack, cap.get.max_bcopy + 1, remote.addr(),
                               remote.rkey(), &comp.uct));
    uint64_t hdr  = 0;
    uct_iov_t one = {local.ptr(), cap.am.max_zcopy + 1 - sizeof(hdr), local.memh(), 0, 1};
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_am_zcopy(ep(), kAmId, &hdr, sizeof(hdr), &one, 1, 0, &comp.uct))
            << "header + payload beyond am.max_zcopy";
    /* more iovs than max_iov, and an iov without a memory handle */
    std::vector<uct_iov_t> many(cap.put.max_iov + 1);
    for (size_t i = 0; i < many.size(); ++i) {
        many[i] = {local.ptr(i * 8), 8, local.memh(), 0, 1};
    }
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_zcopy(ep(), many.data(), many.size(), remote.addr(), remote.rkey(),
                               &comp.uct));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_get_zcopy(ep(), many.data(), cap.get.max_iov + 1, remote.addr(),
                               remote.rkey(), &comp.uct));
    uct_iov_t nomemh = {local.ptr(), 8, UCT_MEM_HANDLE_NULL, 0, 1};
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_put_zcopy(ep(), &nomemh, 1, remote.addr(), remote.rkey(), &comp.uct));

    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    b_->spin(0.01);
    EXPECT_EQ(0, comp.calls);
    EXPECT_EQ(0, unpack.calls);
    EXPECT_EQ(0u, sink_.msgs.size());
    EXPECT_TRUE(all_bytes(remote.ptr(), big, 0x11, "remote memory")) << "a refused put wrote";

    /* and the endpoint still works */
    const uint64_t value = 0xfeedfacecafebeefull;
    ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
        return uct_ep_put_short(ep(), &value, sizeof(value), remote.addr(8), remote.rkey());
    }));
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    EXPECT_EQ(value, load64(remote.ptr(8)));
}

#if ENABLE_PARAMS_CHECK
/* The errors UCX's parameter checks (UCT_CHECK_*) log while a test runs. */
class LoggedErrors {
public:
    LoggedErrors() { ucs_log_push_handler(handler); }
    ~LoggedErrors() { ucs_log_pop_handler(); }
    /* the errors logged since the last call, then forgets them */
    std::vector<std::string> take() { return std::exchange(lines(), {}); }

private:
    static std::vector<std::string> &lines()
    {
        static std::vector<std::string> l;
        return l;
    }
    static ucs_log_func_rc_t handler(const char *, unsigned, const char *, ucs_log_level_t level,
                                     const ucs_log_component_config_t *, const char *message,
                                     va_list ap)
    {
        if (level != UCS_LOG_LEVEL_ERROR) {
            return UCS_LOG_FUNC_RC_CONTINUE;
        }
        char buf[512];
        vsnprintf(buf, sizeof(buf), message, ap);
        lines().push_back(buf);
        return UCS_LOG_FUNC_RC_STOP;
    }
};

/* UCX's own checks and messages (uct_p2p_err_test): an invalid AM id, or a
 * length beyond what the interface advertises (am.max_short counts the
 * 8-byte header), gives UCS_ERR_INVALID_PARAM and one error line saying so;
 * nothing is sent */
TEST_F(Datapath, ParameterErrorsAreUcxs)
{
    const auto &cap = attr().cap;
    Region local(*b_, cap.am.max_short + cap.am.max_hdr + 64);
    Region remote(*b_, cap.put.max_short + 64);
    ASSERT_EQ(UCS_OK, local.status());
    ASSERT_EQ(UCS_OK, remote.status());
    std::memset(remote.ptr(), 0x11, cap.put.max_short + 64);
    LoggedErrors errors;
    auto expect_one = [&](ucs_status_t status, const char *what, const char *words) {
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, status) << what;
        const auto got = errors.take();
        ASSERT_EQ(1u, got.size()) << what;
        EXPECT_NE(std::string::npos, got[0].find(words)) << what << ": " << got[0];
    };
    const uint8_t bad_id = UCT_AM_ID_MAX;
    uint64_t hdr         = 0;
    uct_iov_t one        = {local.ptr(), 4, local.memh(), 0, 1};
    PackArg pack{local.ptr(), 4};
    expect_one(uct_ep_am_short(ep(), bad_id, 0, local.ptr(), 4), "am_short id",
               "active message id");
    expect_one(uct_ep_am_short_iov(ep(), bad_id, &one, 1), "am_short_iov id", "active message id");
    expect_one(static_cast<ucs_status_t>(uct_ep_am_bcopy(ep(), bad_id, pack_cb, &pack, 0)),
               "am_bcopy id", "active message id");
    expect_one(uct_ep_am_zcopy(ep(), bad_id, &hdr, sizeof(hdr), &one, 1, 0, nullptr),
               "am_zcopy id", "active message id");

    /* header + payload one byte beyond am.max_short */
    expect_one(uct_ep_am_short(ep(), kAmId, 0, local.ptr(),
                               static_cast<unsigned>(cap.am.max_short + 1 - sizeof(uint64_t))),
               "am_short length", "length");
    uct_iov_t too_long = {local.ptr(), cap.am.max_short + 1, UCT_MEM_HANDLE_NULL, 0, 1};
    expect_one(uct_ep_am_short_iov(ep(), kAmId, &too_long, 1), "am_short_iov length", "length");
    expect_one(uct_ep_am_zcopy(ep(), kAmId, local.ptr(), static_cast<unsigned>(cap.am.max_hdr + 1),
                               &one, 1, 0, nullptr),
               "am_zcopy header length", "length");
    expect_one(uct_ep_put_short(ep(), local.ptr(), static_cast<unsigned>(cap.put.max_short + 1),
                                remote.addr(), remote.rkey()),
               "put_short length", "length");

    /* what the limits allow still goes */
    ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
        return uct_ep_am_short(ep(), kAmId, 0, local.ptr(),
                               static_cast<unsigned>(cap.am.max_short - sizeof(uint64_t)));
    }));
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    EXPECT_TRUE(errors.take().empty());
    b_->spin(0.01);
    EXPECT_EQ(1u, sink_.msgs.size()) << "only the valid message arrives";
    EXPECT_TRUE(all_bytes(remote.ptr(), cap.put.max_short + 64, 0x11, "remote memory"));
}
#endif

TEST_F(Datapath, AnInvalidatedRegistrationRefusesRemoteAccess)
{
    /* what UCP 1.22 asks of an interface-connected transport before it puts
     * rendezvous on it with error handling: a deregistration with
     * UCT_MD_MEM_DEREG_FLAG_INVALIDATE completes, and a put through the key
     * packed before fails at the sender instead of writing */
    ASSERT_TRUE(b_->md_attr.cap.flags & UCT_MD_FLAG_INVALIDATE);
    uct_iface_h peer = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface(kRxHeadroom, nullptr, &peer));
    uct_ep_h ep2 = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(b_->sender, peer, &ep2));
    Region target(*b_, 4096);
    ASSERT_EQ(UCS_OK, target.status());
    const uint64_t word = 0x1122334455667788ull;
    ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
        return uct_ep_put_short(ep2, &word, sizeof(word), target.addr(), target.rkey());
    }));
    ASSERT_EQ(UCS_OK, b_->flush(ep2));
    EXPECT_EQ(0, std::memcmp(target.ptr(), &word, sizeof(word))) << "the put before";

    Comp comp;
    ASSERT_EQ(UCS_OK, target.invalidate(&comp.uct));
    EXPECT_EQ(1, comp.calls) << "nothing else holds the registration";
    EXPECT_EQ(UCS_OK, comp.status);

    const uint64_t other = ~word;
    ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
        return uct_ep_put_short(ep2, &other, sizeof(other), target.addr(8), target.rkey());
    }));
    ASSERT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() > errors_at_start_; }))
            << "a put through an invalidated key must fail";
    EXPECT_EQ(ep2, b_->ep_errors.back().first);
    EXPECT_NE(UCS_OK, uct_ep_flush(ep2, 0, nullptr));
    EXPECT_TRUE(all_bytes(target.ptr(8), 8, kGuardByte, "memory behind the invalidated key"));
    uct_ep_destroy(ep2);
    uct_iface_close(peer);
    errors_at_start_ = b_->ep_errors.size(); /* that error was the point */
}

TEST_F(Datapath, ForeignRkeyIsRefused)
{
    const size_t len = b_->md_attr.rkey_packed_size;
    ASSERT_GT(len, 0u);
    Region region(*b_, 64);
    ASSERT_EQ(UCS_OK, region.status());

    uct_rkey_bundle_t bundle = {};
    std::vector<uint8_t> zeros(len, 0);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rkey_unpack(b_->component, zeros.data(), &bundle));
    std::vector<uint8_t> ones(len, 0xff);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rkey_unpack(b_->component, ones.data(), &bundle));
    /* a real key with its first byte changed */
    std::vector<uint8_t> tampered = region.packed();
    tampered[0] ^= 0x40;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rkey_unpack(b_->component, tampered.data(), &bundle));
    /* the untouched key unpacks to the same remote key as the region's */
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(b_->component, region.packed().data(), &bundle));
    EXPECT_EQ(region.rkey(), bundle.rkey);
    EXPECT_EQ(UCS_OK, uct_rkey_release(b_->component, &bundle));
}

} // namespace
