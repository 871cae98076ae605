/*
 * The async thread against the data path: connections failed from another
 * thread while the application's thread posts to them in a tight loop.
 *
 * A connection fails on UCX's async thread (rdma_cm events, the connect
 * timer) under the interface's wireup lock, while the data path posts and
 * polls without it. xqp_ep_inject_failure() fails a connection exactly the
 * way such an event does, from the calling thread, so the race can be run
 * thousands of times on demand. Whatever the interleaving, every post must
 * return success, no resources or the injected status; every zero-copy
 * completion must run exactly once; the error handler must report each
 * endpoint once; and nothing may crash.
 *
 * XQP_STRESS_ROUNDS sets the number of rounds (8 endpoints each).
 */
#include "bed.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <fstream>
#include <random>

namespace {

using namespace xqp_test;

using InjectFn = int (*)(uct_ep_h, ucs_status_t, unsigned);

constexpr ucs_status_t kInjected = UCS_ERR_ENDPOINT_TIMEOUT;

int env_int(const char *name, int fallback)
{
    const char *value = std::getenv(name);
    return (value != nullptr) ? std::atoi(value) : fallback;
}

class Threads : public Datapath {
protected:
    void SetUp() override
    {
        Datapath::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        inject_ = xqp_test::xqp_api<InjectFn>("xqp_ep_inject_failure");
        ASSERT_NE(nullptr, inject_) << "xqp_ep_inject_failure is not exported";
    }

    InjectFn inject_ = nullptr;
};

/* One request of kind k on e; zero-copy ones get a completion from comps. */
ucs_status_t post_one(uct_ep_h e, unsigned k, const Region &local, const Region &remote,
                      std::deque<Comp> &comps, size_t *inprogress)
{
    static const uint64_t word = 0x0123456789abcdefull;
    static const std::vector<uint8_t> msg = make_pattern(64, 3);
    PackArg pack{msg.data(), msg.size()};
    ucs_status_t status;
    switch (k % 5) {
    case 0:
        return uct_ep_put_short(e, &word, sizeof(word), remote.addr(), remote.rkey());
    case 1:
        return uct_ep_am_short(e, kAmId, word, &word, sizeof(word));
    case 2: {
        const ssize_t r = uct_ep_am_bcopy(e, kAmId, pack_cb, &pack, 0);
        return (r >= 0) ? UCS_OK : static_cast<ucs_status_t>(r);
    }
    case 3: {
        uct_iov_t iov = {local.ptr(), 4 * kKiB, local.memh(), 0, 1};
        comps.emplace_back();
        status = uct_ep_put_zcopy(e, &iov, 1, remote.addr(), remote.rkey(), &comps.back().uct);
        break;
    }
    default: {
        uct_iov_t iov = {local.ptr(), 256, local.memh(), 0, 1};
        comps.emplace_back();
        status = uct_ep_am_zcopy(e, kAmId, &word, sizeof(word), &iov, 1, 0, &comps.back().uct);
        break;
    }
    }
    if (status == UCS_INPROGRESS) {
        ++*inprogress;
    } else {
        comps.pop_back(); /* not started: no completion will come */
    }
    return status;
}

TEST_F(Threads, FailureFromAnotherThreadWhilePosting)
{
    const int rounds = env_int("XQP_STRESS_ROUNDS", 200);
    constexpr int kEps = 8;
    Region local(*b_, 64 * kKiB), remote(*b_, 64 * kKiB);
    ASSERT_EQ(UCS_OK, local.status());
    ASSERT_EQ(UCS_OK, remote.status());
    std::mt19937 rng(20261201);
    size_t posted = 0, refused = 0, injected_before_first_post = 0;

    for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        std::vector<uct_ep_h> eps(kEps, nullptr);
        for (auto &e : eps) {
            ASSERT_EQ(UCS_OK, b_->create_ep(b_->sender, b_->receiver, &e));
        }
        for (auto *e : eps) {
            ASSERT_EQ(UCS_OK, b_->flush(e)) << "connecting";
        }
        const size_t errors_before = b_->ep_errors.size();

        /* the injector fails the endpoints in a random order, starting at a
         * random moment while this thread posts */
        std::vector<int> order(kEps);
        for (int i = 0; i < kEps; ++i) {
            order[i] = i;
        }
        std::shuffle(order.begin(), order.end(), rng);
        const unsigned delay_us = rng() % 400;
        std::atomic<bool> go{false};
        std::atomic<int>  rc{0};
        std::thread injector([&] {
            while (!go.load(std::memory_order_acquire)) {
                std::this_thread::yield();
            }
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            for (const int i : order) {
                /* held between retiring the QP and failing the endpoint:
                 * the window where a poster would find its QP gone */
                rc |= inject_(eps[i], kInjected, 50 + delay_us % 200);
                std::this_thread::sleep_for(std::chrono::microseconds(delay_us % 37));
            }
        });

        std::deque<Comp> comps;
        size_t inprogress = 0;
        std::vector<bool> failed(kEps, false);
        int nfailed = 0;
        const auto deadline = Clock::now() + std::chrono::duration<double>(kTimeout);
        go.store(true, std::memory_order_release);
        for (unsigned k = 0; (nfailed < kEps) && (Clock::now() < deadline); ++k) {
            for (int i = 0; i < kEps; ++i) {
                if (failed[i]) {
                    continue;
                }
                const ucs_status_t status = post_one(eps[i], k + i, local, remote, comps,
                                                     &inprogress);
                if ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
                    ++posted;
                } else if (status != UCS_ERR_NO_RESOURCE) {
                    EXPECT_EQ(kInjected, status) << "ep " << i << ", request kind " << (k + i) % 5;
                    failed[i] = true;
                    ++nfailed;
                    ++refused;
                    injected_before_first_post += (k == 0) ? 1 : 0;
                }
            }
            b_->progress();
        }
        injector.join();
        ASSERT_EQ(0, rc.load()) << "xqp_ep_inject_failure refused an endpoint";
        ASSERT_EQ(kEps, nfailed) << "endpoints still accepting requests after the injection";

        /* the error handler, once per endpoint, with the injected status;
         * every started zero-copy request completes exactly once */
        EXPECT_TRUE(b_->wait_for([&] {
            return (b_->ep_errors.size() >= errors_before + kEps) &&
                   std::all_of(comps.begin(), comps.end(), [](const Comp &c) {
                       return c.calls > 0;
                   });
        })) << b_->ep_errors.size() - errors_before << " error handler calls";
        ASSERT_EQ(errors_before + kEps, b_->ep_errors.size());
        for (size_t j = errors_before; j < b_->ep_errors.size(); ++j) {
            EXPECT_NE(eps.end(), std::find(eps.begin(), eps.end(), b_->ep_errors[j].first));
            EXPECT_EQ(kInjected, b_->ep_errors[j].second);
        }
        for (const auto &c : comps) {
            EXPECT_EQ(1, c.calls);
            EXPECT_TRUE((c.status == UCS_OK) || (c.status == kInjected))
                    << ucs_status_string(c.status);
        }
        EXPECT_EQ(inprogress, comps.size());
        for (auto *e : eps) {
            EXPECT_EQ(kInjected, uct_ep_flush(e, 0, nullptr));
            uct_ep_destroy(e);
        }
        b_->ep_errors.resize(errors_before); /* ours, checked above */
        sink_.msgs.clear();
        sink_.flags.clear();
        if (HasFatalFailure()) {
            return;
        }
    }
    /* what the failed connections delivered before they failed arrives now */
    b_->spin(0.2);
    std::printf("%d rounds x %d endpoints: %zu requests posted, %zu refused with the injected "
                "status (%zu before the first post)\n",
                rounds, kEps, posted, refused, injected_before_first_post);
}

} // namespace

/* ------------------------------------------------------------------ destroy vs connect */

namespace {

struct Counts {
    int qps, cm_ids, mrs, fds;
    bool operator==(const Counts &o) const
    {
        return (qps == o.qps) && (cm_ids == o.cm_ids) && (mrs == o.mrs) && (fds == o.fds);
    }
};

Counts own_counts()
{
    return {count_rdma_resources("qp"), count_rdma_resources("cm_id"),
            count_rdma_resources("mr"), count_fds()};
}

/*
 * Endpoints and interfaces destroyed while their connections are in
 * flight on the async thread: each round opens a client and a server
 * interface and connects endpoints, then tears one side down at a random
 * moment of the handshake. The four kinds of round, in turn:
 *   0  the client's endpoints and interface go (connecting, just connected)
 *   1  the server's interface goes while it accepts (the client's
 *      endpoints see a reject or a disconnect), then the client's
 *   2  the endpoints connect to an interface already closed (rejects and
 *      retries in flight) and are destroyed
 *   3  both interfaces go at once
 *   4  the endpoints connect to a silent address inside the guest (nobody
 *      answers the CM request) with a short connect timeout: the timer
 *      abandons and retries attempts on the async thread while the
 *      endpoints and the interface are destroyed around that moment
 * Nothing may crash, hang or reach a destroyed object, and the process'
 * QP, cm_id, MR and fd counts must be back where they were.
 * XQP_RACE_ROUNDS sets the number of rounds.
 */
TEST_F(Threads, DestroyRacesConnect)
{
    const int rounds = env_int("XQP_RACE_ROUNDS", 200);
    /* the counts come from `rdma resource show` run through popen: a shell
     * must not preload the plugin (a sanitized one does not load there) */
    unsetenv("LD_PRELOAD");
    constexpr int kEps = 3;
    const size_t errors_before = b_->ep_errors.size();
    std::mt19937 rng(12345);
    std::uniform_real_distribution<double> delay(0, 0.03);
    const Counts before = own_counts();
    ASSERT_GE(before.cm_ids, 2) << "the counts must see the bed's listeners";
    int connected = 0;
    for (int r = 0; r < rounds; ++r) {
        SCOPED_TRACE("round " + std::to_string(r));
        const int kind = r % 5;
        uct_iface_h client = nullptr, server = nullptr;
        /* kind 4: attempts abandoned after 0.1 s, on the 0.25 s timer */
        ASSERT_EQ(UCS_OK, (kind == 4) ? b_->open_iface_with(0, {{"RX_QUEUE_LEN", "64"},
                                                               {"CONNECT_TIMEOUT", "0.1s"},
                                                               {"CONNECT_RETRIES", "1"}},
                                                            &client) :
                                        b_->open_iface(0, "64", &client));
        ASSERT_EQ(UCS_OK, b_->open_iface(0, "64", &server));
        /* the address of a closed interface: nobody listens there */
        IfaceAddress addr;
        ASSERT_EQ(UCS_OK, iface_address(server, &addr));
        if ((kind == 2) || (kind == 4)) {
            uct_iface_close(server);
            server = nullptr;
        }
        if (kind == 4) {
            /* 10.77.0.99 on the guest's dummy network: nothing answers */
            ASSERT_EQ(4, addr.dev.at(0)) << "an IPv4 device address";
            const uint8_t silent[4] = {10, 77, 0, 99};
            std::memcpy(&addr.dev[1], silent, sizeof(silent));
        }
        std::vector<uct_ep_h> eps(kEps, nullptr);
        for (auto &e : eps) {
            ASSERT_EQ(UCS_OK, create_ep_to(client, addr, &e));
        }
        /* kind 4: around the timer ticks that abandon the first attempts */
        b_->spin((kind == 4) ? 0.2 + 10 * delay(rng) : delay(rng));
        if (((kind == 1) || (kind == 3)) && (server != nullptr)) {
            uct_iface_close(server);
            server = nullptr;
            if (kind == 1) {
                b_->spin(delay(rng));
            }
        }
        for (auto e : eps) {
            connected += (uct_ep_flush(e, 0, nullptr) == UCS_OK);
            uct_ep_destroy(e);
        }
        uct_iface_close(client);
        if (server != nullptr) {
            uct_iface_close(server);
        }
    }
    b_->spin(0.2);
    /* the kernel releases cm_ids and QPs synchronously; fds at once */
    Counts after = own_counts();
    for (int i = 0; (i < 50) && !(after == before); ++i) {
        b_->spin(0.1);
        after = own_counts();
    }
    std::printf("%d rounds x %d endpoints (%d connected before their destroy): qps %d -> %d, "
                "cm_ids %d -> %d, mrs %d -> %d, fds %d -> %d\n", rounds, kEps, connected,
                before.qps, after.qps, before.cm_ids, after.cm_ids, before.mrs, after.mrs,
                before.fds, after.fds);
    EXPECT_EQ(before, after) << "resources leaked";
    /* errors of the endpoints destroyed here are not the fixture's */
    b_->ep_errors.resize(errors_before);
    EXPECT_GT(connected, 0) << "no round let a connection finish: the delays prove nothing";
}

/* voluntary context switches of UCX's async thread ("async") in this
 * process: how often it went to sleep, so how often it woke; -1 without one */
long async_thread_wakeups()
{
    long total = -1;
    DIR *tasks = opendir("/proc/self/task");
    if (tasks == nullptr) {
        return -1;
    }
    while (const dirent *t = readdir(tasks)) {
        const std::string dir = std::string("/proc/self/task/") + t->d_name;
        std::ifstream comm(dir + "/comm");
        std::string name;
        if (!std::getline(comm, name) || (name != "async")) {
            continue;
        }
        std::ifstream status(dir + "/status");
        for (std::string line; std::getline(status, line);) {
            if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
                total = std::max(total, 0L) + std::atol(line.c_str() + line.find(':') + 1);
            }
        }
    }
    closedir(tasks);
    return total;
}

/* Once its connections are up, an interface leaves UCX's async thread
 * asleep: the connection timer runs only while a connection is attempted.
 * It used to tick 4 times a second for good, each tick a wakeup that took
 * the wireup lock, in every process using xqp: noise for the application's
 * threads (unpinned, ucx_perftest's async thread woke 40-117 times in its
 * first 6 s over xqp, 1-3 times over rc_verbs). An endpoint created later
 * arms it again: its attempt to a silent address still times out. */
TEST_F(Threads, AsyncThreadSleepsWhileNoConnectionIsAttempted)
{
    const size_t errors_before = b_->ep_errors.size();
    uct_iface_h client = nullptr, server = nullptr;
    ASSERT_EQ(UCS_OK, b_->open_iface_with(0, {{"RX_QUEUE_LEN", "64"},
                                              {"CONNECT_TIMEOUT", "0.5s"},
                                              {"CONNECT_RETRIES", "0"}},
                                          &client));
    ASSERT_EQ(UCS_OK, b_->open_iface(0, "64", &server));
    uct_ep_h e = nullptr;
    ASSERT_EQ(UCS_OK, b_->connect(client, server, &e));
    ASSERT_EQ(UCS_OK, b_->flush(e));
    b_->spin(0.1); /* progress hands the established connections over */

    const long before = async_thread_wakeups();
    ASSERT_GE(before, 0) << "no thread named async in this process";
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    const long woke = async_thread_wakeups() - before;
    EXPECT_LE(woke, 1) << "UCX's async thread woke " << woke
                       << " times in 2 s while every connection was up";

    /* 10.77.0.99 on the guest's dummy network: nothing answers */
    IfaceAddress addr;
    ASSERT_EQ(UCS_OK, iface_address(server, &addr));
    ASSERT_EQ(4, addr.dev.at(0)) << "an IPv4 device address";
    const uint8_t silent[4] = {10, 77, 0, 99};
    std::memcpy(&addr.dev[1], silent, sizeof(silent));
    uct_ep_h lost = nullptr;
    ASSERT_EQ(UCS_OK, create_ep_to(client, addr, &lost));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(b_->wait_for([&] { return b_->ep_errors.size() > errors_before; }, 5.0))
            << "the attempt to a silent address was not timed out";
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                                .count();
    std::printf("connection to a silent address failed after %.2f s (timeout 0.5 s)\n", took);
    if (b_->ep_errors.size() > errors_before) {
        EXPECT_EQ(lost, b_->ep_errors.back().first);
        EXPECT_EQ(UCS_ERR_UNREACHABLE, b_->ep_errors.back().second)
                << ucs_status_string(b_->ep_errors.back().second);
    }
    uct_ep_destroy(lost);
    uct_ep_destroy(e);
    uct_iface_close(client);
    uct_iface_close(server);
    /* errors of the endpoints destroyed here are not the fixture's */
    b_->ep_errors.resize(errors_before);
}

} // namespace
