/*
 * The xqp data path through UCX's public UCT API: 64-bit atomics. Fetch-add
 * and compare-and-swap return the old value, posted adds accumulate, and
 * unsupported or misaligned atomics are refused; the neighbouring words are
 * never touched.
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

/* ------------------------------------------------------------------ atomics */

class Atomics : public Datapath {
protected:
    void SetUp() override
    {
        Datapath::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        const auto &a64 = attr().cap.atomic64;
        const uint64_t fop = UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_CSWAP);
        if (((a64.fop_flags & fop) != fop) || !(a64.op_flags & UCS_BIT(UCT_ATOMIC_OP_ADD))) {
            GTEST_SKIP() << "the interface reports no 64-bit fetch-add/cswap";
        }
        remote_ = std::make_unique<Region>(*b_, 64);
        ASSERT_EQ(UCS_OK, remote_->status());
    }

    /* the word at offset 8; its neighbours keep the guard pattern */
    uint64_t word() const { return load64(remote_->ptr(8)); }
    void set_word(uint64_t v) { std::memcpy(remote_->ptr(8), &v, sizeof(v)); }
    uint64_t waddr() const { return remote_->addr(8); }
    void check_neighbours()
    {
        EXPECT_TRUE(all_bytes(remote_->ptr(0), 8, kGuardByte, "word before"));
        EXPECT_TRUE(all_bytes(remote_->ptr(16), 48, kGuardByte, "words after"));
    }

    /* runs a fetching atomic; returns the fetched value */
    void fetch(const std::function<ucs_status_t(uint64_t *, uct_completion_t *)> &op,
               uint64_t *result)
    {
        Comp comp;
        *result = 0x5555555555555555ull;
        const ssize_t r = b_->post([&]() -> ssize_t { return op(result, &comp.uct); });
        ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS))
                << ucs_status_string(static_cast<ucs_status_t>(r));
        if (r == UCS_INPROGRESS) {
            ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; })) << "no completion";
        }
        ASSERT_EQ(UCS_OK, b_->flush(ep()));
        b_->spin(0.005);
        EXPECT_EQ((r == UCS_INPROGRESS) ? 1 : 0, comp.calls) << "exactly once";
        if (r == UCS_INPROGRESS) {
            EXPECT_EQ(UCS_OK, comp.status);
        }
    }

    std::unique_ptr<Region> remote_;
};

TEST_F(Atomics, FetchAddReturnsOldValue)
{
    struct Case {
        uint64_t start, add;
    } cases[] = {{0x0123456789abcdefull, 0x1111}, {0, 1}, {UINT64_MAX - 1, 5}, {42, UINT64_MAX}};
    for (const auto &c : cases) {
        set_word(c.start);
        uint64_t result;
        ASSERT_NO_FATAL_FAILURE(fetch(
                [&](uint64_t *res, uct_completion_t *comp) {
                    return uct_ep_atomic64_fetch(ep(), UCT_ATOMIC_OP_ADD, c.add, res, waddr(),
                                                 remote_->rkey(), comp);
                },
                &result));
        EXPECT_EQ(c.start, result) << "fetched value";
        EXPECT_EQ(c.start + c.add, word()) << "remote word (wraps around)";
    }
    check_neighbours();
}

TEST_F(Atomics, CompareSwapSucceedsAndFails)
{
    const uint64_t a = 0x1122334455667788ull, b = 0x99aabbccddeeff00ull;
    set_word(a);
    uint64_t result;
    /* success: compare matches */
    ASSERT_NO_FATAL_FAILURE(fetch(
            [&](uint64_t *res, uct_completion_t *comp) {
                return uct_ep_atomic_cswap64(ep(), a, b, waddr(), remote_->rkey(), res, comp);
            },
            &result));
    EXPECT_EQ(a, result);
    EXPECT_EQ(b, word());
    /* failure: compare differs (by one bit), nothing is written */
    ASSERT_NO_FATAL_FAILURE(fetch(
            [&](uint64_t *res, uct_completion_t *comp) {
                return uct_ep_atomic_cswap64(ep(), b ^ 1, 7, waddr(), remote_->rkey(), res, comp);
            },
            &result));
    EXPECT_EQ(b, result) << "a failed cswap returns the current value";
    EXPECT_EQ(b, word()) << "a failed cswap writes nothing";
    check_neighbours();
}

TEST_F(Atomics, PostAddAccumulates)
{
    set_word(1000);
    uint64_t sum = 1000;
    for (uint64_t i = 1; i <= 100; ++i) {
        const ssize_t r = b_->post([&]() -> ssize_t {
            return uct_ep_atomic64_post(ep(), UCT_ATOMIC_OP_ADD, i * 3, waddr(), remote_->rkey());
        });
        ASSERT_EQ(UCS_OK, r) << ucs_status_string(static_cast<ucs_status_t>(r));
        sum += i * 3;
    }
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    EXPECT_EQ(sum, word());
    check_neighbours();
}

TEST_F(Atomics, UnsupportedOrMisalignedAreRefused)
{
    set_word(5);
    uint64_t result = 0;
    Comp comp;
    const auto &a64 = attr().cap.atomic64;
    for (auto opc : {UCT_ATOMIC_OP_AND, UCT_ATOMIC_OP_OR, UCT_ATOMIC_OP_XOR, UCT_ATOMIC_OP_SWAP}) {
        if (!(a64.op_flags & UCS_BIT(opc)) && (opc != UCT_ATOMIC_OP_SWAP)) {
            EXPECT_EQ(UCS_ERR_UNSUPPORTED,
                      uct_ep_atomic64_post(ep(), opc, 1, waddr(), remote_->rkey()))
                    << "post op " << opc;
        }
        if (!(a64.fop_flags & UCS_BIT(opc))) {
            EXPECT_EQ(UCS_ERR_UNSUPPORTED, uct_ep_atomic64_fetch(ep(), opc, 1, &result, waddr(),
                                                                 remote_->rkey(), &comp.uct))
                    << "fetch op " << opc;
        }
    }
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_atomic64_fetch(ep(), UCT_ATOMIC_OP_ADD, 1, &result,
                                                           waddr() + 4, remote_->rkey(), &comp.uct));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_atomic_cswap64(ep(), 5, 6, waddr() + 1, remote_->rkey(), &result, &comp.uct));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_ep_atomic64_post(ep(), UCT_ATOMIC_OP_ADD, 1, waddr() + 2, remote_->rkey()));
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    b_->spin(0.01);
    EXPECT_EQ(0, comp.calls);
    EXPECT_EQ(5u, word()) << "nothing was executed";
    check_neighbours();
}

} // namespace
