/*
 * The peer deadline (UCX_XQP_PEER_TIMEOUT): requests in flight that see no
 * completion for that long fail their endpoint with UCS_ERR_ENDPOINT_TIMEOUT,
 * whatever the NIC reports. On one host the stall comes from a live peer
 * that takes no messages: its handler keeps every descriptor and its
 * receive pool is capped (UCX_XQP_RX_MAX_BUFS), so the sender's HCA retries
 * on receiver-not-ready without end (rnr_retry 7), as it would toward a
 * host that died where the NIC never gives up (rxe on the testbed's kernel).
 */
#include "bed.h"

#include <poll.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>

namespace {

using namespace xqp_test;

constexpr double kPeerTimeout = 1.0; /* s */
/* found within 1.5x the deadline (a look every quarter of it, the first one
 * up to a quarter after the stall began); 3x that for a loaded testbed */
constexpr double kFoundWithin = 3 * 1.5 * kPeerTimeout;

class PeerTimeout : public Datapath {
protected:
    void TearDown() override
    {
        if (ep_ != nullptr) {
            uct_ep_destroy(ep_);
        }
        release_held(stuck_);
        for (uct_iface_h i : {tx_, rx_}) {
            if (i != nullptr) {
                uct_iface_close(i);
            }
        }
        Datapath::TearDown();
    }

    /* tx (with the deadline) connected to rx, which keeps every message
     * and has no more than kRxMax receive buffers */
    void open_pair(double peer_timeout = kPeerTimeout)
    {
        ASSERT_EQ(UCS_OK, b_->open_iface_with(kRxHeadroom,
                                              {{"PEER_TIMEOUT", std::to_string(peer_timeout)}},
                                              &tx_));
        ASSERT_EQ(UCS_OK,
                  b_->open_iface_with(kRxHeadroom,
                                      {{"RX_QUEUE_LEN", "16"},
                                       {"RX_MAX_BUFS", std::to_string(kRxMax)}},
                                      &rx_));
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(rx_, kAmId, am_handler, &stuck_,
                                                   UCT_CB_FLAG_ASYNC));
        stuck_.keep_all = true;
        ASSERT_EQ(UCS_OK, b_->connect(tx_, rx_, &ep_));
    }

    /* more messages than rx can take: the rest wait on the wire */
    void overfill()
    {
        for (size_t k = 0; k < kRxMax + kBeyond; ++k) {
            const std::vector<uint8_t> msg = make_pattern(48, k);
            PackArg pack{msg.data(), msg.size()};
            ASSERT_EQ(48, b_->post([&]() -> ssize_t {
                return uct_ep_am_bcopy(ep_, kAmId, pack_cb, &pack, 0);
            })) << "message " << k;
        }
    }

    /* the one error this test expects, and no other */
    void expect_timed_out()
    {
        ASSERT_EQ(errors_at_start_ + 1, b_->ep_errors.size());
        EXPECT_EQ(ep_, b_->ep_errors.back().first);
        EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, b_->ep_errors.back().second)
                << ucs_status_string(b_->ep_errors.back().second);
        errors_at_start_ = b_->ep_errors.size();
    }

    /* tx (with the deadline) connected to the bed's receiver */
    void open_to_receiver()
    {
        ASSERT_EQ(UCS_OK, b_->open_iface_with(kRxHeadroom,
                                              {{"PEER_TIMEOUT", std::to_string(kPeerTimeout)}},
                                              &tx_));
        ASSERT_EQ(UCS_OK, b_->connect(tx_, b_->receiver, &ep_));
    }

    /* words 0..kWords-1 by put_short, which is signaled only every so many
     * requests: these need no completion */
    void put_words(const Region &remote)
    {
        for (uint64_t k = 0; k < kWords; ++k) {
            ASSERT_EQ(UCS_OK, uct_ep_put_short(ep_, &k, sizeof(k), remote.addr(8 * k),
                                               remote.rkey()));
        }
    }

    void expect_words(const Region &remote)
    {
        for (uint64_t k = 0; k < kWords; ++k) {
            uint64_t got = ~0ull;
            std::memcpy(&got, remote.ptr(8 * k), sizeof(got));
            EXPECT_EQ(k, got) << "word " << k;
        }
    }

    static constexpr uint64_t kWords = 3;
    static constexpr size_t kRxMax  = 16;
    static constexpr size_t kBeyond = 8;
    uct_iface_h tx_ = nullptr;
    uct_iface_h rx_ = nullptr;
    uct_ep_h    ep_ = nullptr;
    AmSink      stuck_;
};

/* a peer that takes no more messages: the endpoint fails after the
 * deadline, its requests end with the error, the handler runs once, and
 * what arrived is intact (before the deadline, the sender waited forever) */
TEST_F(PeerTimeout, APeerThatTakesNoMessagesFailsTheEndpoint)
{
    open_pair();
    overfill();
    Comp flushed;
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_flush(ep_, 0, &flushed.uct));
    const auto start = Clock::now();
    EXPECT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() > errors_at_start_; },
                             kFoundWithin + 5))
            << "no error " << kFoundWithin + 5 << " s after the stall";
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GE(took, 0.9 * kPeerTimeout) << "failed before the deadline";
    EXPECT_LE(took, kFoundWithin) << "found later than 1.5x the deadline (3x for load)";
    ASSERT_TRUE(b_->wait_for([&] { return flushed.calls > 0; }));
    EXPECT_EQ(1, flushed.calls);
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, flushed.status) << ucs_status_string(flushed.status);
    b_->spin(0.5);
    expect_timed_out(); /* once */
    uint64_t word = 1;
    EXPECT_EQ(UCS_ERR_ENDPOINT_TIMEOUT, uct_ep_put_short(ep_, &word, sizeof(word), 0x1000, 0));
    ASSERT_EQ(kRxMax, stuck_.msgs.size()) << "what the receiver could take";
    for (size_t k = 0; k < kRxMax; ++k) {
        EXPECT_EQ(make_pattern(48, k), stuck_.msgs[k]) << "message " << k;
    }
}

/* The same for an application asleep on the interface's event fd: nothing
 * completes, yet it is woken to find the failure (as UCP's worker_wait). */
TEST_F(PeerTimeout, WakesAnApplicationAsleepOnTheEventFd)
{
    open_pair();
    overfill();
    int fd = -1;
    ASSERT_EQ(UCS_OK, uct_iface_event_fd_get(tx_, &fd));
    const auto start = Clock::now();
    const auto limit = start + std::chrono::duration<double>(kFoundWithin + 5);
    unsigned sleeps  = 0;
    for (;;) {
        b_->progress(); /* where the error handler runs */
        if ((b_->ep_errors.size() > errors_at_start_) || (Clock::now() > limit)) {
            break;
        }
        if (uct_iface_event_arm(tx_, UCT_EVENT_SEND_COMP | UCT_EVENT_RECV) != UCS_OK) {
            continue;
        }
        pollfd p = {fd, POLLIN, 0};
        const int n = poll(&p, 1, static_cast<int>((kFoundWithin + 5) * 1000));
        ASSERT_EQ(1, n) << "asleep on the event fd: never woken (after " << sleeps
                        << " wakeups)";
        ++sleeps;
    }
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    ASSERT_GT(b_->ep_errors.size(), errors_at_start_) << "no error after " << took << " s";
    EXPECT_GE(sleeps, 1u) << "the test never slept";
    EXPECT_LE(took, kFoundWithin);
    expect_timed_out();
}

/* Once nothing is in flight the deadline's timer is off: an application
 * asleep on the event fd is not woken for it (it was armed while requests
 * waited on the receiver; they complete well before it would expire). */
TEST_F(PeerTimeout, AnIdleInterfaceSleepsUndisturbed)
{
    constexpr double kDeadline = 4.0; /* a look every 1 s */
    open_pair(kDeadline);
    overfill();
    ASSERT_TRUE(b_->wait_for([&] { return stuck_.msgs.size() >= kRxMax; }));
    ucs_status_t armed = UCS_ERR_BUSY;
    for (int i = 0; (i < 1000) && (armed != UCS_OK); ++i) {
        b_->progress();
        armed = uct_iface_event_arm(tx_, UCT_EVENT_SEND_COMP | UCT_EVENT_RECV);
    }
    ASSERT_EQ(UCS_OK, armed) << "requests in flight: the timer is armed now";
    stuck_.keep_all = false;
    release_held(stuck_); /* the receiver takes the rest */
    ASSERT_EQ(UCS_OK, b_->flush(ep_));
    ASSERT_TRUE(b_->wait_for([&] {
        b_->progress();
        return uct_iface_event_arm(tx_, UCT_EVENT_SEND_COMP | UCT_EVENT_RECV) == UCS_OK;
    })) << "the interface never became idle";
    int fd = -1;
    ASSERT_EQ(UCS_OK, uct_iface_event_fd_get(tx_, &fd));
    pollfd p    = {fd, POLLIN, 0};
    const int n = poll(&p, 1, 2000);
    EXPECT_EQ(0, n) << "woken with nothing in flight";
    EXPECT_EQ(kRxMax + kBeyond, stuck_.msgs.size());
}

/* Requests that need no completion (put_short is signaled only every so
 * many) do not make a live, idle peer look dead: a probe goes behind them. */
TEST_F(PeerTimeout, RequestsWithoutCompletionDoNotTripIt)
{
    ASSERT_NO_FATAL_FAILURE(open_to_receiver());
    Region remote(*b_, 8 * kWords);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_NO_FATAL_FAILURE(put_words(remote));
    b_->spin(4 * kPeerTimeout);
    EXPECT_EQ(errors_at_start_, b_->ep_errors.size())
            << "an idle endpoint whose last requests needed no completion timed out";
    EXPECT_EQ(UCS_OK, b_->flush(ep_));
    expect_words(remote);
}

/* An application that does not progress for longer than the deadline (it
 * computes, or the host stalls) finds its endpoint to a live peer intact
 * when it comes back. Here the one look before the gap begins the count
 * for requests that need no completion (put_short), and the gap leaves no
 * look to send the probe behind them. Before, the first look after the gap
 * failed the endpoint, silently for UCP without error handling, whose
 * receives then waited forever (a suspect of #38's tag hang). */
TEST_F(PeerTimeout, AGapInProgressIsNotAFailure)
{
    ASSERT_NO_FATAL_FAILURE(open_to_receiver());
    Region remote(*b_, 8 * kWords);
    ASSERT_EQ(UCS_OK, remote.status());
    /* no progress for longer than the looks' period (a quarter of the
     * deadline): the next look is due */
    std::this_thread::sleep_for(std::chrono::duration<double>(kPeerTimeout / 3));
    ASSERT_NO_FATAL_FAILURE(put_words(remote));
    /* 4 x 64 idle polls (a look every 64, at most one per period): one
     * look, well within the period */
    for (int i = 0; i < 4 * 64; ++i) {
        uct_iface_progress(tx_);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * kPeerTimeout));
    b_->spin(2 * kPeerTimeout);
    EXPECT_EQ(errors_at_start_, b_->ep_errors.size())
            << "an endpoint to a live peer failed after a gap in progress";
    EXPECT_EQ(UCS_OK, b_->flush(ep_));
    expect_words(remote);
}

/* Bad values are errors naming the variable. */
TEST_F(PeerTimeout, ABadValueIsAnError)
{
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              b_->open_iface_with(kRxHeadroom, {{"PEER_TIMEOUT", "-1s"}}, &tx_));
    EXPECT_EQ(tx_, nullptr);
    EXPECT_NE(UCS_OK, b_->open_iface_with(kRxHeadroom, {{"PEER_TIMEOUT", "soon"}}, &tx_));
    EXPECT_EQ(tx_, nullptr);
}

} // namespace
