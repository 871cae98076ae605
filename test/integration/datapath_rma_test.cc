/*
 * The xqp data path through UCX's public UCT API: RMA. Every put and get the
 * interface advertises (short, bcopy, zcopy with one or many iovs) is
 * checked byte for byte, from 1 byte to 4 MiB, at odd addresses between
 * guard bytes; lengths beyond the advertised limits are refused. Here too,
 * once for the whole program, the gtest environment that tears the test bed
 * down at exit.
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

namespace {

using namespace xqp_test;

class BedEnvironment : public ::testing::Environment {
public:
    void TearDown() override
    {
        if (Bed::instance != nullptr) {
            Bed::instance->teardown();
            delete Bed::instance;
            Bed::instance = nullptr;
        }
    }
};

[[maybe_unused]] ::testing::Environment *const g_environment =
        ::testing::AddGlobalTestEnvironment(new BedEnvironment);

/* ------------------------------------------------------------------ RMA */

enum class Rma { PutShort, PutBcopy, PutZcopy, PutZcopyIov, GetBcopy, GetZcopy, GetZcopyIov };

const char *rma_name(Rma op)
{
    switch (op) {
    case Rma::PutShort:    return "PutShort";
    case Rma::PutBcopy:    return "PutBcopy";
    case Rma::PutZcopy:    return "PutZcopy";
    case Rma::PutZcopyIov: return "PutZcopyIov";
    case Rma::GetBcopy:    return "GetBcopy";
    case Rma::GetZcopy:    return "GetZcopy";
    case Rma::GetZcopyIov: return "GetZcopyIov";
    }
    return "?";
}

class RmaTest : public Datapath, public ::testing::WithParamInterface<std::tuple<Rma, size_t>> {};

TEST_P(RmaTest, TransfersExactBytes)
{
    const Rma op      = std::get<0>(GetParam());
    const size_t size = std::get<1>(GetParam());
    const auto &cap   = attr().cap;
    const bool put    = (op == Rma::PutShort) || (op == Rma::PutBcopy) ||
                        (op == Rma::PutZcopy) || (op == Rma::PutZcopyIov);
    const bool iov    = (op == Rma::PutZcopyIov) || (op == Rma::GetZcopyIov);

    /* beyond the advertised limits: refused where the length is an argument */
    if ((op == Rma::PutShort) && (size > cap.put.max_short)) {
        std::vector<uint8_t> small(size);
        Region remote(*b_, 64);
        ASSERT_EQ(UCS_OK, remote.status());
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_ep_put_short(ep(), small.data(), static_cast<unsigned>(size), remote.addr(),
                                   remote.rkey()))
                << "put_short of " << size << " bytes, max_short " << cap.put.max_short;
        return;
    }
    if ((op == Rma::GetBcopy) && (size > cap.get.max_bcopy)) {
        Region remote(*b_, size);
        ASSERT_EQ(UCS_OK, remote.status());
        std::vector<uint8_t> dst(size);
        UnpackArg unpack{dst.data(), dst.size()};
        Comp comp;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_ep_get_bcopy(ep(), unpack_cb, &unpack, size,
                                                          remote.addr(), remote.rkey(), &comp.uct))
                << "get_bcopy of " << size << " bytes, max_bcopy " << cap.get.max_bcopy;
        b_->spin(0.01);
        EXPECT_EQ(0, unpack.calls);
        EXPECT_EQ(0, comp.calls);
        return;
    }
    if ((op == Rma::PutBcopy) && (size > cap.put.max_bcopy)) {
        GTEST_SKIP() << size << " bytes > put.max_bcopy " << cap.put.max_bcopy;
    }
    if ((put && (op != Rma::PutShort) && (op != Rma::PutBcopy) && (size > cap.put.max_zcopy)) ||
        (!put && (op != Rma::GetBcopy) && (size > cap.get.max_zcopy))) {
        GTEST_SKIP() << size << " bytes > max_zcopy";
    }
    const size_t max_iov = put ? cap.put.max_iov : cap.get.max_iov;
    if (iov && (max_iov < 2)) {
        GTEST_SKIP() << "max_iov " << max_iov;
    }

    const size_t n_pieces           = iov ? std::min(max_iov, size) : 1;
    const std::vector<size_t> lens  = split(size, n_pieces);
    std::vector<size_t> offsets;   /* of each piece in the local region */
    size_t at = kGuard + kLocalMisalign;
    for (size_t len : lens) {
        offsets.push_back(at);
        at += len + kGap;
    }
    const size_t local_len  = at + kGuard;
    const size_t remote_off = kGuard + kRemoteMisalign;
    Region remote(*b_, remote_off + size + kGuard);
    Region local(*b_, local_len);
    ASSERT_EQ(UCS_OK, remote.status());
    ASSERT_EQ(UCS_OK, local.status());

    /* the data goes to/comes from remote_off: its pattern depends on both */
    const std::vector<uint8_t> want = make_pattern(size, remote_off);
    std::vector<uint8_t> inverse(size);
    for (size_t i = 0; i < size; ++i) {
        inverse[i] = static_cast<uint8_t>(~want[i]);
    }
    std::memcpy(remote.ptr(remote_off), put ? inverse.data() : want.data(), size);
    {
        size_t pos = 0;
        for (size_t j = 0; j < lens.size(); ++j) {
            std::memcpy(local.ptr(offsets[j]), (put ? want.data() : inverse.data()) + pos, lens[j]);
            pos += lens[j];
        }
    }
    std::vector<uct_iov_t> iovs(lens.size());
    for (size_t j = 0; j < lens.size(); ++j) {
        iovs[j] = {local.ptr(offsets[j]), lens[j], local.memh(), 0, 1};
    }

    PackArg pack{local.ptr(offsets[0]), size};
    UnpackArg unpack{local.ptr(offsets[0]), size};
    Comp comp;
    const uint64_t raddr = remote.addr(remote_off);
    const ssize_t r = b_->post([&]() -> ssize_t {
        switch (op) {
        case Rma::PutShort:
            return uct_ep_put_short(ep(), local.ptr(offsets[0]), static_cast<unsigned>(size),
                                    raddr, remote.rkey());
        case Rma::PutBcopy:
            return uct_ep_put_bcopy(ep(), pack_cb, &pack, raddr, remote.rkey());
        case Rma::PutZcopy:
        case Rma::PutZcopyIov:
            return uct_ep_put_zcopy(ep(), iovs.data(), iovs.size(), raddr, remote.rkey(),
                                    &comp.uct);
        case Rma::GetBcopy:
            return uct_ep_get_bcopy(ep(), unpack_cb, &unpack, size, raddr, remote.rkey(),
                                    &comp.uct);
        case Rma::GetZcopy:
        case Rma::GetZcopyIov:
            return uct_ep_get_zcopy(ep(), iovs.data(), iovs.size(), raddr, remote.rkey(),
                                    &comp.uct);
        }
        return UCS_ERR_INVALID_PARAM;
    });

    bool expect_comp = false;
    switch (op) {
    case Rma::PutShort:
        ASSERT_EQ(UCS_OK, r) << ucs_status_string(static_cast<ucs_status_t>(r));
        break;
    case Rma::PutBcopy:
        ASSERT_EQ(static_cast<ssize_t>(size), r) << "put_bcopy returns the packed length";
        EXPECT_EQ(1, pack.calls);
        break;
    default:
        ASSERT_TRUE((r == UCS_OK) || (r == UCS_INPROGRESS))
                << ucs_status_string(static_cast<ucs_status_t>(r));
        expect_comp = (r == UCS_INPROGRESS);
        break;
    }
    if (expect_comp) {
        ASSERT_TRUE(b_->wait_for([&] { return comp.calls > 0; })) << "no completion";
    }
    ASSERT_EQ(UCS_OK, b_->flush(ep()));
    b_->spin(0.005);
    EXPECT_EQ(expect_comp ? 1 : 0, comp.calls) << "the completion must fire exactly once";
    if (expect_comp) {
        EXPECT_EQ(UCS_OK, comp.status);
    }
    if (op == Rma::GetBcopy) {
        EXPECT_EQ(1, unpack.calls) << "unpack exactly once";
        EXPECT_EQ(size, unpack.length);
    }

    if (put) {
        EXPECT_TRUE(same_bytes(remote.ptr(remote_off), want.data(), size, "remote target"));
        EXPECT_TRUE(all_bytes(remote.ptr(0), remote_off, kGuardByte, "guard before the target"));
        EXPECT_TRUE(all_bytes(remote.ptr(remote_off + size), kGuard, kGuardByte,
                              "guard after the target"));
        /* the source is not modified */
        size_t pos = 0;
        for (size_t j = 0; j < lens.size(); ++j) {
            EXPECT_TRUE(same_bytes(local.ptr(offsets[j]), want.data() + pos, lens[j], "source"));
            pos += lens[j];
        }
    } else {
        size_t pos = 0;
        EXPECT_TRUE(all_bytes(local.ptr(0), offsets[0], kGuardByte, "guard before the result"));
        for (size_t j = 0; j < lens.size(); ++j) {
            EXPECT_TRUE(same_bytes(local.ptr(offsets[j]), want.data() + pos, lens[j],
                                   "result piece " + std::to_string(j)));
            pos += lens[j];
            EXPECT_TRUE(all_bytes(local.ptr(offsets[j] + lens[j]), kGap, kGuardByte,
                                  "gap after piece " + std::to_string(j)));
        }
        EXPECT_TRUE(same_bytes(remote.ptr(remote_off), want.data(), size, "remote source"));
    }
}

INSTANTIATE_TEST_SUITE_P(
        Ops, RmaTest,
        ::testing::Combine(::testing::Values(Rma::PutShort, Rma::PutBcopy, Rma::PutZcopy,
                                             Rma::PutZcopyIov, Rma::GetBcopy, Rma::GetZcopy,
                                             Rma::GetZcopyIov),
                           ::testing::ValuesIn(kSizes)),
        [](const ::testing::TestParamInfo<std::tuple<Rma, size_t>> &param) {
            return std::string(rma_name(std::get<0>(param.param))) + "_" +
                   size_name(std::get<1>(param.param));
        });

} // namespace
