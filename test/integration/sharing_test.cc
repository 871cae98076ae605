/*
 * Connection sharing (UCX_XQP_SHARE=y): the endpoint an interface creates
 * toward a peer that already connected to it sends on the accepted
 * connection, and a shared connection stays until neither side uses it.
 *
 * Each test opens its own pair of interfaces A and B with sharing on (the
 * Bed's sender and receiver do not share) and checks bytes on both
 * directions, the connections each interface accepted
 * (xqp_iface_passive_count), those it holds (xqp_iface_connection_count)
 * and the QP each endpoint sends on (xqp_ep_wireup_info).
 */
#include "bed.h"

#include <xqp/xqp.h>

namespace {

using namespace xqp_test;

using CountFn = int (*)(uct_iface_h);
using InfoFn  = int (*)(uct_ep_h, xqp_wireup_info_t *);
using PInfoFn = int (*)(uct_iface_h, unsigned, xqp_wireup_info_t *);

constexpr uint8_t kShareAm = 7;

class Sharing : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (expected_device().empty()) {
            GTEST_SKIP() << "XQP_EXPECT_DEVICE is not set (no RDMA device to test)";
        }
        b_ = Bed::get();
        ASSERT_TRUE(b_->failure.empty()) << b_->failure;
        passive_count_ = xqp_api<CountFn>("xqp_iface_passive_count");
        held_count_    = xqp_api<CountFn>("xqp_iface_connection_count");
        ep_info_       = xqp_api<InfoFn>("xqp_ep_wireup_info");
        passive_info_  = xqp_api<PInfoFn>("xqp_iface_passive_info");
        ASSERT_NE(nullptr, held_count_) << "xqp_iface_connection_count is not exported";
        ASSERT_NE(nullptr, passive_count_);
        ASSERT_NE(nullptr, ep_info_);
        ASSERT_NE(nullptr, passive_info_);
        errors_at_start_ = b_->ep_errors.size();
        for (auto *iface : {&a_, &b_iface_}) {
            ASSERT_EQ(UCS_OK, b_->open_iface_with(kRxHeadroom, {{"SHARE", share_}}, iface));
        }
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(a_, kShareAm, am_handler, &at_a_, 0));
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(b_iface_, kShareAm, am_handler, &at_b_, 0));
    }

    void TearDown() override
    {
        for (auto *ep : {&ab_, &ba_}) {
            if (*ep != nullptr) {
                uct_ep_destroy(*ep);
                *ep = nullptr;
            }
        }
        for (auto *iface : {&a_, &b_iface_}) {
            if (*iface != nullptr) {
                uct_iface_close(*iface);
                *iface = nullptr;
            }
        }
        if (b_ != nullptr) {
            EXPECT_EQ(errors_at_start_, b_->ep_errors.size()) << "an endpoint failed";
        }
    }

    /* an AM of n bytes (a pattern with salt) from ep, received whole by sink */
    void send_checked(uct_ep_h ep, AmSink &sink, size_t n, uint8_t salt)
    {
        const auto data   = make_pattern(n, salt);
        const size_t seen = sink.msgs.size();
        ucs_status_t status;
        ASSERT_TRUE(b_->wait_for([&] {
            status = uct_ep_am_short(ep, kShareAm, 0x5eedull + salt, data.data(),
                                     static_cast<unsigned>(n));
            return status != UCS_ERR_NO_RESOURCE;
        }));
        ASSERT_EQ(UCS_OK, status);
        ASSERT_EQ(UCS_OK, b_->flush(ep));
        ASSERT_TRUE(b_->wait_for([&] { return sink.msgs.size() > seen; }))
                << "the message did not arrive";
        const auto &msg = sink.msgs.back();
        ASSERT_EQ(sizeof(uint64_t) + n, msg.size());
        uint64_t header;
        std::memcpy(&header, msg.data(), sizeof(header));
        EXPECT_EQ(0x5eedull + salt, header);
        EXPECT_TRUE(std::equal(data.begin(), data.end(), msg.begin() + sizeof(header)))
                << "payload differs";
    }

    xqp_wireup_info_t info(uct_ep_h ep)
    {
        xqp_wireup_info_t i = {};
        EXPECT_EQ(0, ep_info_(ep, &i));
        return i;
    }

    /* both endpoints before either connection is up: A's first in even
     * rounds, B's first in odd ones */
    void create_both(int round)
    {
        if (round % 2 == 0) {
            ASSERT_EQ(UCS_OK, b_->create_ep(a_, b_iface_, &ab_));
            ASSERT_EQ(UCS_OK, b_->create_ep(b_iface_, a_, &ba_));
        } else {
            ASSERT_EQ(UCS_OK, b_->create_ep(b_iface_, a_, &ba_));
            ASSERT_EQ(UCS_OK, b_->create_ep(a_, b_iface_, &ab_));
        }
    }

    /* destroys both endpoints: then neither interface holds a connection */
    void destroy_both()
    {
        uct_ep_destroy(ab_);
        ab_ = nullptr;
        uct_ep_destroy(ba_);
        ba_ = nullptr;
        EXPECT_TRUE(b_->wait_for(
                [&] { return (held_count_(a_) == 0) && (held_count_(b_iface_) == 0); }))
                << "still held: A " << held_count_(a_) << ", B " << held_count_(b_iface_);
    }

    /* A connects to B and sends; then B creates its endpoint toward A */
    void connect_both()
    {
        ASSERT_EQ(UCS_OK, b_->connect(a_, b_iface_, &ab_));
        ASSERT_NO_FATAL_FAILURE(send_checked(ab_, at_b_, 24, 1));
        ASSERT_EQ(1, passive_count_(b_iface_));
        ASSERT_EQ(UCS_OK, b_->connect(b_iface_, a_, &ba_));
        ASSERT_NO_FATAL_FAILURE(send_checked(ba_, at_a_, 40, 2));
    }

    Bed        *b_       = nullptr;
    uct_iface_h a_       = nullptr;
    uct_iface_h b_iface_ = nullptr;
    uct_ep_h    ab_      = nullptr;
    uct_ep_h    ba_      = nullptr;
    AmSink      at_a_;
    AmSink      at_b_;
    std::string share_   = "y";
    size_t      errors_at_start_ = 0;
    CountFn     passive_count_ = nullptr;
    CountFn     held_count_    = nullptr;
    InfoFn      ep_info_       = nullptr;
    PInfoFn     passive_info_  = nullptr;
};

class NoSharing : public Sharing {
protected:
    void SetUp() override
    {
        share_ = "n";
        Sharing::SetUp();
    }
};

TEST_F(Sharing, TheReverseEndpointSendsOnTheAcceptedConnection)
{
    ASSERT_NO_FATAL_FAILURE(connect_both());
    /* A accepted nothing: B's endpoint made no handshake of its own */
    EXPECT_EQ(0, passive_count_(a_));
    EXPECT_EQ(1, passive_count_(b_iface_));
    xqp_wireup_info_t accepted = {};
    ASSERT_EQ(0, passive_info_(b_iface_, 0, &accepted));
    EXPECT_EQ(XQP_CONN_CONNECTED, accepted.state);
    EXPECT_EQ(accepted.qp_num, info(ba_).qp_num) << "B's endpoint sends on another QP";
    EXPECT_EQ(1u, info(ba_).attempts);
    /* both directions keep working, many messages in a row */
    for (uint8_t i = 0; i < 8; ++i) {
        ASSERT_NO_FATAL_FAILURE(send_checked(ba_, at_a_, 8 + i, 10 + i));
        ASSERT_NO_FATAL_FAILURE(send_checked(ab_, at_b_, 16 + i, 20 + i));
    }
}

TEST_F(NoSharing, EachSideConnectsItsOwnEndpoint)
{
    ASSERT_NO_FATAL_FAILURE(connect_both());
    EXPECT_EQ(1, passive_count_(a_));
    EXPECT_EQ(1, passive_count_(b_iface_));
}

TEST_F(Sharing, TheConnectionOutlivesTheActiveSidesEndpoint)
{
    ASSERT_NO_FATAL_FAILURE(connect_both());
    uct_ep_destroy(ab_);
    ab_ = nullptr;
    /* A keeps the connection for B, which still sends on it */
    EXPECT_EQ(1, held_count_(a_));
    for (uint8_t i = 0; i < 4; ++i) {
        ASSERT_NO_FATAL_FAILURE(send_checked(ba_, at_a_, 32, 30 + i));
    }
    /* B's endpoint goes too: the connection is closed on both sides */
    uct_ep_destroy(ba_);
    ba_ = nullptr;
    EXPECT_TRUE(b_->wait_for([&] { return (held_count_(a_) == 0) && (held_count_(b_iface_) == 0); }))
            << "still held: A " << held_count_(a_) << ", B " << held_count_(b_iface_);
}

TEST_F(Sharing, TheConnectionOutlivesThePassiveSidesEndpoint)
{
    ASSERT_NO_FATAL_FAILURE(connect_both());
    uct_ep_destroy(ba_);
    ba_ = nullptr;
    /* B holds the connection it accepted: A still sends on it */
    for (uint8_t i = 0; i < 4; ++i) {
        ASSERT_NO_FATAL_FAILURE(send_checked(ab_, at_b_, 48, 40 + i));
    }
    EXPECT_EQ(1, held_count_(b_iface_));
    uct_ep_destroy(ab_);
    ab_ = nullptr;
    EXPECT_TRUE(b_->wait_for([&] { return (held_count_(a_) == 0) && (held_count_(b_iface_) == 0); }))
            << "still held: A " << held_count_(a_) << ", B " << held_count_(b_iface_);
}

TEST_F(Sharing, AConnectionWhoseEndpointsAreGoneIsNotBoundAgain)
{
    ASSERT_NO_FATAL_FAILURE(connect_both());
    uct_ep_destroy(ba_);
    ba_ = nullptr;
    /* B's second endpoint toward A is pair 2: A has not opened that one,
     * so it connects (A accepts it) */
    ASSERT_EQ(UCS_OK, b_->connect(b_iface_, a_, &ba_));
    ASSERT_NO_FATAL_FAILURE(send_checked(ba_, at_a_, 12, 50));
    EXPECT_EQ(1, passive_count_(a_));
    EXPECT_NE(info(ab_).qp_num, 0u);
}

/* until pred() holds or seconds pass, with nobody progressing */
template <class Pred>
bool wait_without_progress(Pred &&pred, double seconds)
{
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (!pred() && (Clock::now() < until)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
}

TEST_F(Sharing, AReleasedConnectionIsNotBound)
{
    /* A connects and goes before B opens an endpoint toward it: B never
     * said it sends on the connection, so A closes it at once (no release
     * notice, nothing kept), and B's async thread ends it without B's
     * progress. Before, A kept it and sent a release that B read only in
     * its progress. */
    ASSERT_EQ(UCS_OK, b_->connect(a_, b_iface_, &ab_));
    ASSERT_NO_FATAL_FAILURE(send_checked(ab_, at_b_, 16, 60));
    uct_ep_destroy(ab_);
    ab_ = nullptr;
    EXPECT_EQ(0, held_count_(a_)) << "A kept a connection B never sent on";
    EXPECT_TRUE(wait_without_progress([&] { return held_count_(b_iface_) == 0; }, 10))
            << "B still holds " << held_count_(b_iface_) << " connection(s) A closed";
    /* B's first endpoint toward A (pair 1) connects on its own: A accepts */
    ASSERT_EQ(UCS_OK, b_->connect(b_iface_, a_, &ba_));
    ASSERT_NO_FATAL_FAILURE(send_checked(ba_, at_a_, 20, 61));
    EXPECT_EQ(1, passive_count_(a_));
}

TEST_F(Sharing, ABindRacingThePeersCloseConnectsAgain)
{
    /* B binds an endpoint to the connection A opened just as A destroys
     * its own: A has not read B's bound notice, so it closes the
     * connection. B's endpoint sent nothing else: it connects again on its
     * own, with no error and nothing lost (UCX 1.13.1's
     * test_ucp_am_nbx.max_short_thresh_* met this in UCP's ordinary close:
     * its flush failed with UCS_ERR_ENDPOINT_TIMEOUT). Before, B's
     * endpoint failed. */
    ASSERT_EQ(UCS_OK, b_->connect(a_, b_iface_, &ab_));
    ASSERT_NO_FATAL_FAILURE(send_checked(ab_, at_b_, 16, 62));
    ASSERT_EQ(UCS_OK, b_->create_ep(b_iface_, a_, &ba_)); /* binds; no progress */
    EXPECT_EQ(0, passive_count_(a_)) << "B's endpoint made a connection of its own";
    const uint32_t shared_qp = info(ba_).qp_num;
    uct_ep_destroy(ab_);
    ab_ = nullptr;
    /* the disconnect reaches B's async thread in its own time */
    EXPECT_TRUE(b_->wait_for([&] { return passive_count_(a_) == 1; }))
            << "B's endpoint did not connect again";
    EXPECT_EQ(UCS_OK, b_->flush(ba_)) << "a flush of B's endpoint fails";
    ASSERT_NO_FATAL_FAILURE(send_checked(ba_, at_a_, 20, 63));
    EXPECT_NE(shared_qp, info(ba_).qp_num);
    EXPECT_EQ(XQP_CONN_CONNECTED, info(ba_).state);
    uct_ep_destroy(ba_);
    ba_ = nullptr;
    EXPECT_TRUE(b_->wait_for([&] { return (held_count_(a_) == 0) && (held_count_(b_iface_) == 0); }))
            << "still held: A " << held_count_(a_) << ", B " << held_count_(b_iface_);
}

TEST_F(Sharing, ABindThatSentRacingThePeersCloseFailsCleanly)
{
    /* As above, but B's endpoint sent a message before A's close: that
     * message reached A's interface, and B's endpoint fails as when a peer
     * destroys its endpoint (UCS_ERR_ENDPOINT_TIMEOUT to the error
     * handler, later requests refused). Nothing hangs and nothing stays
     * held. */
    ASSERT_EQ(UCS_OK, b_->connect(a_, b_iface_, &ab_));
    ASSERT_NO_FATAL_FAILURE(send_checked(ab_, at_b_, 16, 64));
    ASSERT_EQ(UCS_OK, b_->create_ep(b_iface_, a_, &ba_)); /* binds; no progress */
    const uint64_t word = 1;
    ASSERT_EQ(UCS_OK, uct_ep_am_short(ba_, kShareAm, 0, &word, sizeof(word)));
    uct_ep_destroy(ab_);
    ab_ = nullptr;
    const size_t before = errors_at_start_;
    ucs_status_t status = UCS_OK;
    EXPECT_TRUE(b_->wait_for([&] {
        for (size_t i = before; i < b_->ep_errors.size(); ++i) {
            if (b_->ep_errors[i].first == ba_) {
                status = b_->ep_errors[i].second;
                return true;
            }
        }
        return false;
    })) << "B's endpoint did not fail";
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, status) << ucs_status_string(status);
    EXPECT_NE(UCS_OK, uct_ep_am_short(ba_, kShareAm, 0, &word, sizeof(word)));
    errors_at_start_ = b_->ep_errors.size(); /* expected */
    uct_ep_destroy(ba_);
    ba_ = nullptr;
    EXPECT_TRUE(b_->wait_for([&] { return (held_count_(a_) == 0) && (held_count_(b_iface_) == 0); }))
            << "still held: A " << held_count_(a_) << ", B " << held_count_(b_iface_);
}

TEST_F(Sharing, ReleasesNeedNothingFromAPeerThatDoesNotProgress)
{
    /* UCX's test_uct_pending.pending_ucs_ok_dc_arbiter_bug: many endpoints
     * toward a peer that never creates one back and does not progress while
     * they are destroyed. The peer never sent on those connections, so they
     * close with no word to it. Before, each sent a release that needed a
     * receive buffer there: C posts 16, and every release after the 16th
     * waited out the drain's 5 s (receiver not ready). */
    uct_iface_h c = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface_with(kRxHeadroom, {{"SHARE", "y"}, {"RX_QUEUE_LEN", "16"}},
                                          &c));
    constexpr int kEps = 48;
    std::vector<uct_ep_h> eps(kEps, nullptr);
    for (auto &ep : eps) {
        ASSERT_EQ(UCS_OK, b_->connect(a_, c, &ep));
    }
    EXPECT_EQ(kEps, passive_count_(c));
    const auto start = Clock::now();
    int destroyed    = 0;
    double seconds   = 0;
    for (auto &ep : eps) {
        uct_ep_destroy(ep); /* nothing progresses C meanwhile */
        ep = nullptr;
        ++destroyed;
        seconds = std::chrono::duration<double>(Clock::now() - start).count();
        if (seconds > 5.0) {
            break; /* a drain timed out: the rest would too */
        }
    }
    for (auto &ep : eps) {
        if (ep != nullptr) {
            uct_ep_destroy(ep);
        }
    }
    EXPECT_EQ(kEps, destroyed) << "after " << destroyed << " endpoints, " << seconds
                               << " s: a destroy waited for the peer";
    EXPECT_EQ(0, held_count_(a_)) << "A kept connections C never sent on";
    EXPECT_TRUE(wait_without_progress([&] { return held_count_(c) == 0; }, 20))
            << "C still holds " << held_count_(c) << " connection(s)";
    /* a new endpoint to C gets a connection of its own */
    uct_ep_h again = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(a_, c, &again));
    EXPECT_TRUE(b_->wait_for([&] { return (held_count_(a_) == 0) && (held_count_(c) == 1); }))
            << "still held: A " << held_count_(a_) << ", C " << held_count_(c);
    uct_ep_destroy(again);
    uct_iface_close(c);
}

TEST_F(Sharing, AHandOverWaitsForNothingFromAPeerThatDoesNotProgress)
{
    /* UCX's test_uct_pending.pending_ucs_ok_dc_arbiter_bug when the peer
     * connects back: the connection is shared, so it outlives the endpoint,
     * and the requests still in flight wait for receive buffers the peer
     * does not repost while it does not progress. Before, the destroy
     * waited 5 s for them and warned ("requests of ep ... did not
     * complete"). Now it returns at once; the completions of those requests
     * run with UCS_ERR_CANCELED, and the requests themselves still go to
     * the peer once it progresses. */
    uct_iface_h c = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface_with(kRxHeadroom, {{"SHARE", "y"}, {"RX_QUEUE_LEN", "16"}},
                                          &c));
    AmSink at_c;
    ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(c, kShareAm, am_handler, &at_c, 0));
    uct_ep_h ac = nullptr;
    uct_ep_h ca = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(a_, c, &ac));
    ASSERT_NO_FATAL_FAILURE(send_checked(ac, at_c, 16, 3));
    ASSERT_EQ(UCS_OK, b_->connect(c, a_, &ca)); /* C sends on A's connection */
    ASSERT_NO_FATAL_FAILURE(send_checked(ca, at_a_, 16, 4));
    EXPECT_EQ(0, passive_count_(a_)) << "C's endpoint sends on A's connection";
    const size_t before = at_c.msgs.size();

    /* C stops progressing: past its 16 receive buffers the sends wait */
    constexpr int kMsgs = 40;
    std::vector<std::vector<uint8_t>> sent;
    for (int i = 0; i < kMsgs; ++i) {
        sent.push_back(make_pattern(24, static_cast<uint8_t>(i)));
        ASSERT_EQ(UCS_OK, uct_ep_am_short(ac, kShareAm, 0xabc0ull + i, sent.back().data(),
                                          static_cast<unsigned>(sent.back().size())))
                << "message " << i;
    }
    Region local(*b_, 4096);
    Region remote(*b_, 4096);
    ASSERT_EQ(UCS_OK, local.status());
    ASSERT_EQ(UCS_OK, remote.status());
    const auto put = make_pattern(4096, 9);
    std::memcpy(local.ptr(), put.data(), put.size());
    uct_iov_t iov = {local.ptr(), put.size(), local.memh(), 0, 1};
    Comp comp;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ac, &iov, 1, remote.addr(), remote.rkey(),
                                               &comp.uct));

    const auto start = Clock::now();
    uct_ep_destroy(ac); /* nothing progresses C meanwhile */
    ac = nullptr;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_LT(seconds, 2.5) << "the destroy waited for the peer";
    EXPECT_EQ(1, comp.calls) << "the put's completion must run once, at the destroy";
    EXPECT_EQ(UCS_ERR_CANCELED, comp.status);

    /* C progresses: every message arrives, in order and byte-exact, then
     * the put (the requests were not lost with the endpoint) */
    ASSERT_TRUE(b_->wait_for([&] { return at_c.msgs.size() >= before + kMsgs; }))
            << (at_c.msgs.size() - before) << " of " << kMsgs << " messages arrived";
    EXPECT_EQ(before + kMsgs, at_c.msgs.size());
    for (int i = 0; i < kMsgs; ++i) {
        const auto &msg = at_c.msgs[before + i];
        ASSERT_EQ(sizeof(uint64_t) + sent[i].size(), msg.size()) << "message " << i;
        uint64_t header;
        std::memcpy(&header, msg.data(), sizeof(header));
        EXPECT_EQ(0xabc0ull + i, header) << "message " << i;
        EXPECT_TRUE(std::equal(sent[i].begin(), sent[i].end(), msg.begin() + sizeof(header)))
                << "message " << i;
    }
    EXPECT_TRUE(b_->wait_for([&] { return std::memcmp(remote.ptr(), put.data(), put.size()) == 0; }))
            << "the put did not land";
    EXPECT_EQ(1, comp.calls) << "and not again when the request completed";
    /* C still sends on the connection, which A keeps for it */
    ASSERT_NO_FATAL_FAILURE(send_checked(ca, at_a_, 32, 5));
    uct_ep_destroy(ca);
    EXPECT_TRUE(b_->wait_for([&] { return (held_count_(a_) == 0) && (held_count_(c) == 0); }))
            << "still held: A " << held_count_(a_) << ", C " << held_count_(c);
    uct_iface_close(c);
}

TEST_F(Sharing, AFailureOfTheSharedConnectionFailsBothEndpoints)
{
    ASSERT_NO_FATAL_FAILURE(connect_both());
    using InjectFn = int (*)(uct_ep_h, ucs_status_t, unsigned);
    auto inject    = xqp_api<InjectFn>("xqp_ep_inject_failure");
    ASSERT_NE(nullptr, inject);
    /* B's endpoint sends on the connection B accepted: failing it there
     * fails B's endpoint, and A's through the disconnect */
    ASSERT_EQ(0, inject(ba_, UCS_ERR_ENDPOINT_TIMEOUT, 0));
    const size_t before = errors_at_start_;
    EXPECT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() >= before + 2; }))
            << b_->ep_errors.size() - before << " endpoint errors";
    bool saw_ab = false, saw_ba = false;
    for (size_t i = before; i < b_->ep_errors.size(); ++i) {
        saw_ab = saw_ab || (b_->ep_errors[i].first == ab_);
        saw_ba = saw_ba || (b_->ep_errors[i].first == ba_);
    }
    EXPECT_TRUE(saw_ab) << "A's endpoint was not failed";
    EXPECT_TRUE(saw_ba) << "B's endpoint was not failed";
    errors_at_start_ = b_->ep_errors.size(); /* expected */
    destroy_both();
}

TEST_F(Sharing, ACancelFailsThePeersEndpointAtOnce)
{
    /* UCP discards a failed lane with a flush cancel, and destroys it from
     * a later progress. A cancel takes the QP to the error state: on a
     * shared connection the peer's endpoint must see the end now, or its
     * requests wait (rxe never reports retry-exceeded) until this side's
     * endpoint is destroyed: UCX's test_ucp_sockaddr.close_callback waited
     * out a 5 s drain there */
    ASSERT_NO_FATAL_FAILURE(connect_both());
    ASSERT_EQ(UCS_OK, b_->flush(ab_));
    EXPECT_EQ(UCS_OK, uct_ep_flush(ab_, UCT_FLUSH_FLAG_CANCEL, nullptr));
    const auto deadline = Clock::now() + std::chrono::duration<double>(5.0);
    while ((info(ba_).state == XQP_CONN_CONNECTED) && (Clock::now() < deadline)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1)); /* no progress */
    }
    EXPECT_NE(XQP_CONN_CONNECTED, info(ba_).state)
            << "B's endpoint still sends on a connection A cancelled";
    b_->spin(0.05);
    errors_at_start_ = b_->ep_errors.size(); /* B's failure was the point */
    uct_ep_destroy(ab_);
    ab_ = nullptr;
    uct_ep_destroy(ba_);
    ba_ = nullptr;
}

TEST_F(Sharing, SimultaneousConnectsConvergeToOneConnection)
{
    for (int round = 0; round < 6; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const int accepted = passive_count_(a_) + passive_count_(b_iface_);
        ASSERT_NO_FATAL_FAILURE(create_both(round));
        ASSERT_EQ(UCS_OK, b_->flush(ab_));
        ASSERT_EQ(UCS_OK, b_->flush(ba_));
        /* one handshake: one side accepted, and its endpoint sends on it */
        EXPECT_EQ(accepted + 1, passive_count_(a_) + passive_count_(b_iface_));
        const auto ia = info(ab_), ib = info(ba_);
        EXPECT_EQ(XQP_CONN_CONNECTED, ia.state);
        EXPECT_EQ(XQP_CONN_CONNECTED, ib.state);
        /* ECE was negotiated once: both report the same agreement */
        EXPECT_EQ(ia.ece_agreed.vendor_id, ib.ece_agreed.vendor_id);
        EXPECT_EQ(ia.ece_agreed.options, ib.ece_agreed.options);
        ASSERT_NO_FATAL_FAILURE(send_checked(ab_, at_b_, 20, 60 + round));
        ASSERT_NO_FATAL_FAILURE(send_checked(ba_, at_a_, 28, 70 + round));
        destroy_both();
    }
}

TEST_F(Sharing, SimultaneousConnectsRefusedForEceFailBothEndpoints)
{
    /* One side requires an ECE option (0x8) the other does not offer
     * (0x1|0x4). Whichever connection survives the crossing, its
     * negotiation refuses it: the requiring side rejects a request
     * (rdma_reject_ece) or fails the reply. Both endpoints must fail, the
     * one bound to the peer's connection included, and nothing stays held.
     * Rounds: either side requires it, either endpoint first. */
    using Vars = std::vector<std::pair<std::string, std::string>>;
    const Vars requires_8 = {{"SHARE", "y"}, {"ECE", "on"}, {"ECE_REQUIRED", "0x8"},
                             {"ECE_LOCAL", "0x15b3:0xb"}};
    const Vars offers_5   = {{"SHARE", "y"}, {"ECE_LOCAL", "0x15b3:0x5"}};
    for (int round = 0; round < 4; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        for (auto *iface : {&a_, &b_iface_}) {
            uct_iface_close(*iface);
            *iface = nullptr;
        }
        const bool a_requires = (round / 2 == 0);
        ASSERT_EQ(UCS_OK, b_->open_iface_with(kRxHeadroom, a_requires ? requires_8 : offers_5, &a_));
        ASSERT_EQ(UCS_OK,
                  b_->open_iface_with(kRxHeadroom, a_requires ? offers_5 : requires_8, &b_iface_));
        const size_t before = b_->ep_errors.size();
        ASSERT_NO_FATAL_FAILURE(create_both(round));
        bool failed_ab = false, failed_ba = false;
        EXPECT_TRUE(b_->wait_for([&] {
            for (size_t i = before; i < b_->ep_errors.size(); ++i) {
                failed_ab = failed_ab || (b_->ep_errors[i].first == ab_);
                failed_ba = failed_ba || (b_->ep_errors[i].first == ba_);
            }
            return failed_ab && failed_ba;
        })) << "A's endpoint failed: " << failed_ab << ", B's: " << failed_ba;
        for (size_t i = before; i < b_->ep_errors.size(); ++i) {
            EXPECT_NE(UCS_OK, b_->ep_errors[i].second);
        }
        /* the requiring side names what was missing */
        const auto required = info(a_requires ? ab_ : ba_);
        EXPECT_NE(nullptr, std::strstr(required.error, "0x8")) << required.error;
        EXPECT_NE(UCS_OK, b_->flush(ab_)) << "a refused endpoint flushed fine";
        EXPECT_NE(UCS_OK, b_->flush(ba_)) << "a refused endpoint flushed fine";
        errors_at_start_ = b_->ep_errors.size(); /* expected */
        destroy_both();
    }
}

} // namespace
