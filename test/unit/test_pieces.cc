/*
 * A large RDMA request's pieces (ep/pieces.h): their lengths, and the
 * scatter/gather entries of each, byte for byte.
 */
#include "ep/pieces.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using xqp::ep::kMaxRdmaPieces;
using xqp::ep::kRdmaPiece;
using xqp::ep::kRdmaWhole;
using xqp::ep::rdma_piece_length;
using xqp::ep::slice_sge;

TEST(RdmaPieces, ShortRequestsStayWhole)
{
    EXPECT_EQ(0u, rdma_piece_length(0));
    EXPECT_EQ(1u, rdma_piece_length(1));
    EXPECT_EQ(kRdmaWhole, rdma_piece_length(kRdmaWhole)) << "the cost table's 64 KiB";
}

TEST(RdmaPieces, LongRequestsAreCutIntoAtMostTheMaximumNumber)
{
    EXPECT_EQ(kRdmaPiece, rdma_piece_length(kRdmaWhole + 1)) << "three pieces, the last of 1 B";
    EXPECT_EQ(kRdmaPiece, rdma_piece_length(256 * 1024)) << "8 pieces";
    EXPECT_EQ(kRdmaPiece, rdma_piece_length(kRdmaPiece * kMaxRdmaPieces));
    for (size_t total : {size_t{1} << 20, size_t{3} << 20, (size_t{1} << 30) + 7}) {
        const size_t piece = rdma_piece_length(total);
        EXPECT_GE(piece, kRdmaPiece) << total;
        EXPECT_LE((total + piece - 1) / piece, kMaxRdmaPieces) << total;
        EXPECT_GT(piece * kMaxRdmaPieces, total - piece) << total << ": pieces not too long";
    }
}

/* the pieces of a list, put back together, are the list byte for byte:
 * each byte's address and key */
TEST(RdmaPieces, SlicesCoverTheListByteForByte)
{
    const ibv_sge list[3] = {{0x1000, 5000, 1}, {0x9000, 3, 2}, {0x20000, 70000, 3}};
    const size_t total    = 5000 + 3 + 70000;
    std::vector<std::pair<uint64_t, uint32_t>> expected;
    for (const auto &s : list) {
        for (uint32_t b = 0; b < s.length; ++b) {
            expected.emplace_back(s.addr + b, s.lkey);
        }
    }
    for (size_t piece : {size_t{1}, size_t{3}, size_t{4999}, size_t{5000}, size_t{5002},
                         size_t{32768}, total}) {
        std::vector<std::pair<uint64_t, uint32_t>> got;
        for (size_t offset = 0; offset < total; offset += piece) {
            const size_t length = std::min(piece, total - offset);
            ibv_sge out[3];
            const int n = slice_sge(list, 3, offset, length, out);
            ASSERT_GE(n, 1);
            ASSERT_LE(n, 3);
            size_t bytes = 0;
            for (int i = 0; i < n; ++i) {
                EXPECT_GT(out[i].length, 0u) << "no empty entry";
                for (uint32_t b = 0; b < out[i].length; ++b) {
                    got.emplace_back(out[i].addr + b, out[i].lkey);
                }
                bytes += out[i].length;
            }
            EXPECT_EQ(length, bytes) << "piece " << piece << " at " << offset;
        }
        EXPECT_EQ(expected, got) << "piece " << piece;
    }
}

TEST(RdmaPieces, ASliceSkipsEmptyEntries)
{
    const ibv_sge list[3] = {{0x1000, 0, 1}, {0x2000, 10, 2}, {0x3000, 0, 3}};
    ibv_sge out[3];
    ASSERT_EQ(1, slice_sge(list, 3, 2, 8, out));
    EXPECT_EQ(0x2002u, out[0].addr);
    EXPECT_EQ(8u, out[0].length);
    EXPECT_EQ(2u, out[0].lkey);
}

} // namespace
