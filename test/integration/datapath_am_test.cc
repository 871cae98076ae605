/*
 * The xqp data path through UCX's public UCT API: active messages. Bursts of
 * every kind (short, bcopy, zcopy with one or many iovs) arrive once, in
 * order and byte for byte, the descriptors the handler keeps intact with
 * their receive headroom; am_short_iov gathers its pieces; kept descriptors
 * are replaced and reposted, up to UCX_XQP_RX_MAX_BUFS.
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

#include "bed.h"

#include <initializer_list>

namespace {

using namespace xqp_test;

/* ------------------------------------------------------------------ active messages */

enum class Am { Short, Bcopy, Zcopy, ZcopyIov };

const char *am_name(Am op)
{
    switch (op) {
    case Am::Short:    return "AmShort";
    case Am::Bcopy:    return "AmBcopy";
    case Am::Zcopy:    return "AmZcopy";
    case Am::ZcopyIov: return "AmZcopyIov";
    }
    return "?";
}

class AmTest : public Datapath, public ::testing::WithParamInterface<std::tuple<Am, size_t>> {
protected:
    /* sends message k (bytes msg) and returns the operation's result */
    ssize_t send(Am op, const std::vector<uint8_t> &msg, size_t size, Region *slots,
                 size_t slot_len, size_t k, Comp *comp);
};

ssize_t AmTest::send(Am op, const std::vector<uint8_t> &msg, size_t size, Region *slots,
                     size_t slot_len, size_t k, Comp *comp)
{
    const auto &cap = attr().cap;
    switch (op) {
    case Am::Short:
        /* the header is the message's first 8 bytes, the payload the rest */
        return b_->post([&]() -> ssize_t {
            return uct_ep_am_short(ep(), kAmId, load64(msg.data()), msg.data() + 8,
                                   static_cast<unsigned>(size));
        });
    case Am::Bcopy: {
        PackArg pack{msg.data(), msg.size()};
        return b_->post([&]() -> ssize_t {
            return uct_ep_am_bcopy(ep(), kAmId, pack_cb, &pack, 0);
        });
    }
    case Am::Zcopy:
    case Am::ZcopyIov: {
        const size_t hdr = std::min<size_t>({size / 2, 8, cap.am.max_hdr});
        const size_t max_iov = (op == Am::ZcopyIov) ? cap.am.max_iov : 1;
        const size_t payload = msg.size() - hdr;
        std::vector<uct_iov_t> iovs;
        if (payload > 0) {
            size_t pos = hdr, at = k * slot_len;
            for (size_t len : split(payload, max_iov)) {
                std::memcpy(slots->ptr(at), msg.data() + pos, len);
                iovs.push_back({slots->ptr(at), len, slots->memh(), 0, 1});
                pos += len;
                at += len + kGap;
            }
        }
        return b_->post([&]() -> ssize_t {
            return uct_ep_am_zcopy(ep(), kAmId, msg.data(), static_cast<unsigned>(hdr),
                                   iovs.data(), iovs.size(), 0, &comp->uct);
        });
    }
    }
    return UCS_ERR_INVALID_PARAM;
}

TEST_P(AmTest, BurstArrivesOnceInOrderWithKeptDescriptors)
{
    const Am op       = std::get<0>(GetParam());
    const size_t size = std::get<1>(GetParam());
    const auto &cap   = attr().cap;

    if ((op == Am::Short) && (size + sizeof(uint64_t) > cap.am.max_short)) {
        std::vector<uint8_t> small(size);
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_am_short(ep(), kAmId, 0, small.data(),
                                                         static_cast<unsigned>(size)))
                << "am_short payload " << size << ", max_short " << cap.am.max_short;
        b_->spin(0.01);
        EXPECT_EQ(0u, sink_.msgs.size());
        return;
    }
    if (((op == Am::Zcopy) || (op == Am::ZcopyIov)) && (size > cap.am.max_zcopy)) {
        /* header + payload beyond max_zcopy */
        Region src(*b_, size);
        ASSERT_EQ(UCS_OK, src.status());
        const uint64_t hdr = 0;
        uct_iov_t iov      = {src.ptr(), size - sizeof(hdr), src.memh(), 0, 1};
        Comp comp;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_ep_am_zcopy(ep(), kAmId, &hdr, sizeof(hdr), &iov, 1, 0, &comp.uct))
                << "am_zcopy of " << size << " bytes, max_zcopy " << cap.am.max_zcopy;
        b_->spin(0.01);
        EXPECT_EQ(0, comp.calls);
        EXPECT_EQ(0u, sink_.msgs.size());
        return;
    }
    if ((op == Am::Bcopy) && (size > cap.am.max_bcopy)) {
        GTEST_SKIP() << size << " bytes > am.max_bcopy " << cap.am.max_bcopy;
    }
    if ((op == Am::ZcopyIov) && (cap.am.max_iov < 2)) {
        GTEST_SKIP() << "am.max_iov " << cap.am.max_iov;
    }

    const size_t count = 200;
    /* what the handler receives: am_short adds its 8-byte header */
    const size_t wire = (op == Am::Short) ? size + 8 : size;
    std::vector<std::vector<uint8_t>> msgs;
    for (size_t k = 0; k < count; ++k) {
        msgs.push_back(make_pattern(wire, k)); /* the sequence number is in every byte */
    }
    const bool zcopy        = (op == Am::Zcopy) || (op == Am::ZcopyIov);
    const size_t slot_len   = size + (cap.am.max_iov + 1) * kGap;
    std::unique_ptr<Region> slots;
    if (zcopy) {
        slots = std::make_unique<Region>(*b_, count * slot_len);
        ASSERT_EQ(UCS_OK, slots->status());
    }
    std::vector<Comp> comps(count);
    std::vector<ssize_t> results(count);

    sink_.keep_every = 7;
    sink_.keep_phase = 3;
    for (size_t k = 0; k < count; ++k) {
        results[k] = send(op, msgs[k], size, slots.get(), slot_len, k, &comps[k]);
        if (op == Am::Bcopy) {
            ASSERT_EQ(static_cast<ssize_t>(wire), results[k]) << "message " << k;
        } else if (op == Am::Short) {
            ASSERT_EQ(UCS_OK, results[k]) << "message " << k;
        } else {
            ASSERT_TRUE((results[k] == UCS_OK) || (results[k] == UCS_INPROGRESS))
                    << "message " << k << ": "
                    << ucs_status_string(static_cast<ucs_status_t>(results[k]));
        }
    }
    ASSERT_TRUE(b_->wait_for([&] { return sink_.msgs.size() >= count; }))
            << sink_.msgs.size() << " of " << count << " messages arrived";
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    b_->spin(0.02); /* duplicates would show up now */
    ASSERT_EQ(count, sink_.msgs.size()) << "every message exactly once";

    for (size_t k = 0; k < count; ++k) {
        ASSERT_EQ(wire, sink_.msgs[k].size()) << "length of message " << k;
        ASSERT_TRUE(same_bytes(sink_.msgs[k].data(), msgs[k].data(), wire,
                               "message " + std::to_string(k)));
        EXPECT_TRUE(sink_.flags[k] & UCT_CB_PARAM_FLAG_DESC) << "message " << k;
        if (zcopy) {
            EXPECT_EQ((results[k] == UCS_INPROGRESS) ? 1 : 0, comps[k].calls) << "message " << k;
            if (results[k] == UCS_INPROGRESS) {
                EXPECT_EQ(UCS_OK, comps[k].status) << "message " << k;
            }
        }
    }

    /* the kept descriptors were not reused for later messages */
    size_t expect_held = 0;
    for (size_t k = 0; k < count; ++k) {
        expect_held += (k % 7 == 3) ? 1 : 0;
    }
    ASSERT_EQ(expect_held, sink_.held.size());
    for (size_t i = 0; i < sink_.held.size(); ++i) {
        const Held &h = sink_.held[i];
        const size_t k = 7 * i + 3;
        ASSERT_EQ(wire, h.length);
        EXPECT_TRUE(same_bytes(h.data, msgs[k].data(), wire,
                               "kept descriptor of message " + std::to_string(k)));
        EXPECT_TRUE(all_bytes(h.data - kRxHeadroom, kRxHeadroom, 0xcc, "headroom"));
    }
    release_held(sink_);

    /* and the transport goes on with the released buffers */
    sink_ = AmSink{};
    for (size_t k = 0; k < 20; ++k) {
        const std::vector<uint8_t> after = make_pattern(32, 1000 + k);
        PackArg pack{after.data(), after.size()};
        ASSERT_EQ(32, b_->post([&]() -> ssize_t {
            return uct_ep_am_bcopy(ep(), kAmId, pack_cb, &pack, 0);
        }));
    }
    ASSERT_TRUE(b_->wait_for([&] { return sink_.msgs.size() >= 20; }));
    for (size_t k = 0; k < 20; ++k) {
        const std::vector<uint8_t> after = make_pattern(32, 1000 + k);
        EXPECT_EQ(after, sink_.msgs[k]) << "message " << k << " after the release";
    }
}

INSTANTIATE_TEST_SUITE_P(
        Ops, AmTest,
        ::testing::Combine(::testing::Values(Am::Short, Am::Bcopy, Am::Zcopy, Am::ZcopyIov),
                           ::testing::ValuesIn(kSizes)),
        [](const ::testing::TestParamInfo<std::tuple<Am, size_t>> &param) {
            return std::string(am_name(std::get<0>(param.param))) + "_" +
                   size_name(std::get<1>(param.param));
        });

/* am_short_iov: the pieces arrive as one message, in order */
TEST_F(Datapath, AmShortIovGathersPieces)
{
    const size_t max = attr().cap.am.max_short;
    size_t seq = 0;
    std::vector<std::vector<uint8_t>> sent;
    for (size_t size : {size_t(1), size_t(9), size_t(64), max}) {
        const std::vector<uint8_t> msg = make_pattern(size, 500 + seq++);
        const std::vector<size_t> lens = split(size, 4);
        std::vector<std::vector<uint8_t>> pieces;
        std::vector<uct_iov_t> iovs;
        size_t pos = 0;
        for (size_t len : lens) {
            pieces.emplace_back(msg.begin() + pos, msg.begin() + pos + len);
            pos += len;
        }
        for (auto &piece : pieces) {
            iovs.push_back({piece.data(), piece.size(), UCT_MEM_HANDLE_NULL, 0, 1});
        }
        ASSERT_EQ(UCS_OK, b_->post([&]() -> ssize_t {
            return uct_ep_am_short_iov(ep(), kAmId, iovs.data(), iovs.size());
        })) << size << " bytes in " << iovs.size() << " pieces";
        sent.push_back(msg);
    }
    /* beyond what fits inline */
    std::vector<uint8_t> big(attr().cap.put.max_short + 1);
    uct_iov_t too_long[2] = {{big.data(), 8, UCT_MEM_HANDLE_NULL, 0, 1},
                             {big.data() + 8, big.size() - 8, UCT_MEM_HANDLE_NULL, 0, 1}};
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_am_short_iov(ep(), kAmId, too_long, 2));
    ASSERT_TRUE(b_->wait_for([&] { return sink_.msgs.size() >= sent.size(); }));
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    b_->spin(0.01);
    ASSERT_EQ(sent.size(), sink_.msgs.size());
    for (size_t k = 0; k < sent.size(); ++k) {
        EXPECT_EQ(sent[k], sink_.msgs[k]) << "message " << k;
    }
}

/* An interface with only 16 receive buffers whose handler keeps every
 * descriptor: other buffers take the kept ones' places (the pool grows), so
 * 5x the queue arrives, nothing lost; released, the kept ones serve again.
 * Before, the 17th message waited on receiver-not-ready until a release,
 * and UCP, which keeps the descriptor of every unexpected message, hung
 * (UCX's test_ucp_tag_perf.multi_unexp, 8192 unexpected messages). */
TEST_F(Datapath, KeptDescriptorsAreReplacedAndReposted)
{
    uct_iface_h small = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface(kRxHeadroom, "16", &small));
    AmSink sink;
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(small, kAmId, am_handler, &sink, UCT_CB_FLAG_ASYNC));
    uct_ep_h ep2 = nullptr;
    const ucs_status_t connected = b_->connect(b_->sender, small, &ep2);
    EXPECT_EQ(UCS_OK, connected);

    if (connected == UCS_OK) {
        auto send = [&](size_t seq) {
            const std::vector<uint8_t> msg = make_pattern(48, seq);
            PackArg pack{msg.data(), msg.size()};
            return b_->post([&]() -> ssize_t {
                return uct_ep_am_bcopy(ep2, kAmId, pack_cb, &pack, 0);
            });
        };
        /* the handler keeps every descriptor, as UCP does for unexpected
         * messages: 5x the receive queue must still arrive, other buffers
         * taking the kept ones' places (before, the 17th waited for good) */
        sink.keep_all = true;
        for (size_t k = 0; k < 80; ++k) {
            EXPECT_EQ(48, send(k));
        }
        EXPECT_TRUE(b_->wait_for([&] { return sink.msgs.size() >= 80; }))
                << sink.msgs.size() << " of 80 with every descriptor kept";
        EXPECT_EQ(80u, sink.held.size());

        sink.keep_all = false;
        for (size_t i = 0; i < sink.held.size(); ++i) {
            EXPECT_TRUE(same_bytes(sink.held[i].data, make_pattern(48, i).data(), 48,
                                   "kept message " + std::to_string(i)));
        }
        release_held(sink);
        /* 3x the receive queue more: the released buffers serve again */
        for (size_t k = 80; k < 128; ++k) {
            EXPECT_EQ(48, send(k));
        }
        EXPECT_TRUE(b_->wait_for([&] { return sink.msgs.size() >= 128; }))
                << sink.msgs.size() << " of 128";
        EXPECT_EQ(UCS_OK, b_->flush(ep2));
        b_->spin(0.02);
        ASSERT_EQ(128u, sink.msgs.size());
        for (size_t k = 0; k < 128; ++k) {
            EXPECT_EQ(make_pattern(48, k), sink.msgs[k]) << "message " << k;
        }
        uct_ep_destroy(ep2);
    }
    release_held(sink);
    uct_iface_close(small);
}

TEST_F(Datapath, RxMaxBufsAnswersToTheBareNameUcxTestsSet)
{
    /* UCX's own gtest (uct_p2p_am_misc.no_rx_buffs) bounds the receive
     * buffers with uct_config_modify(config, "RX_MAX_BUFS", ...). The bare
     * name must reach xqp's option on every UCX release: UCX 1.22 matches a
     * top-level field only with the transport's prefix (XQP_RX_MAX_BUFS),
     * and the test skipped there ("m_rx_buf_limit_failed"). A value below
     * RX_QUEUE_LEN shows that it arrived: the open fails, naming it. */
    uct_iface_h iface = nullptr;
    ucs_status_t status = b_->open_iface_with(kRxHeadroom, {{"RX_MAX_BUFS", "8"}}, &iface, {},
                                              /* bare_only */ true);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, status) << ucs_status_string(status);
    if (status == UCS_OK) {
        uct_iface_close(iface);
    }
    /* and a valid one (RX_QUEUE_LEN's default) by the bare name opens */
    status = b_->open_iface_with(kRxHeadroom, {{"RX_MAX_BUFS", "1024"}}, &iface, {},
                                 /* bare_only */ true);
    ASSERT_EQ(UCS_OK, status) << ucs_status_string(status);
    uct_iface_close(iface);
}

TEST_F(Datapath, KeptDescriptorsStopAtRxMaxBufs)
{
    /* UCX_XQP_RX_MAX_BUFS bounds the receive buffers: with every
     * descriptor kept, 2x the limit sent, the receiver gets the limit's
     * worth, then the senders wait (receiver-not-ready); once the
     * descriptors are released the rest arrives, byte-exact and in order
     * (before the limit existed, all of them arrived into a growing pool) */
    constexpr size_t kMax = 32;
    uct_iface_h small = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface_with(kRxHeadroom, {{"RX_QUEUE_LEN", "16"},
                                                        {"RX_MAX_BUFS", std::to_string(kMax)}},
                                          &small));
    AmSink sink;
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(small, kAmId, am_handler, &sink, UCT_CB_FLAG_ASYNC));
    uct_ep_h ep2 = nullptr;
    const ucs_status_t connected = b_->connect(b_->sender, small, &ep2);
    EXPECT_EQ(UCS_OK, connected);

    if (connected == UCS_OK) {
        sink.keep_all = true;
        for (size_t k = 0; k < 2 * kMax; ++k) {
            const std::vector<uint8_t> msg = make_pattern(48, k);
            PackArg pack{msg.data(), msg.size()};
            EXPECT_EQ(48, b_->post([&]() -> ssize_t {
                return uct_ep_am_bcopy(ep2, kAmId, pack_cb, &pack, 0);
            }));
        }
        EXPECT_TRUE(b_->wait_for([&] { return sink.msgs.size() >= kMax; }))
                << sink.msgs.size() << " of " << kMax << " with every descriptor kept";
        b_->spin(1.0); /* time for more to arrive, were the pool to grow */
        EXPECT_EQ(kMax, sink.msgs.size()) << "more buffers than UCX_XQP_RX_MAX_BUFS";
        EXPECT_EQ(kMax, sink.held.size());

        sink.keep_all = false;
        release_held(sink);
        EXPECT_TRUE(b_->wait_for([&] { return sink.msgs.size() >= 2 * kMax; }))
                << sink.msgs.size() << " of " << 2 * kMax << " after the release";
        EXPECT_EQ(UCS_OK, b_->flush(ep2));
        ASSERT_EQ(2 * kMax, sink.msgs.size());
        for (size_t k = 0; k < 2 * kMax; ++k) {
            EXPECT_EQ(make_pattern(48, k), sink.msgs[k]) << "message " << k;
        }
        uct_ep_destroy(ep2);
    }
    release_held(sink);
    uct_iface_close(small);
}

} // namespace
