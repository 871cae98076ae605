/* xqp - a large RDMA request cut into pieces that complete one by one.
 *
 * One work request completes only at its end: on a slow live link (loss
 * and retransmissions) a single large RDMA READ or WRITE can take longer
 * than the peer deadline (UCX_XQP_PEER_TIMEOUT) without a completion, and
 * the endpoint of a live peer would fail. Its pieces, each signaled, show
 * the transfer's progress. What is pure arithmetic lives here, where the
 * unit tests reach it without a device.
 */
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace xqp::ep {

/* a request longer than kRdmaWhole is cut (one of 64 KiB, the cost
 * table's, still takes one work request); into pieces no shorter than
 * kRdmaPiece, and no more than kMaxRdmaPieces of them (the send queue is
 * shared with the endpoint's other requests) */
inline constexpr size_t   kRdmaWhole     = 64 * 1024;
inline constexpr size_t   kRdmaPiece     = 32 * 1024;
inline constexpr unsigned kMaxRdmaPieces = 16;

/* the length of each piece of a request of total bytes (the last one takes
 * what remains); total itself when it stays whole */
inline size_t rdma_piece_length(size_t total)
{
    if (total <= kRdmaWhole) {
        return total;
    }
    return std::max(kRdmaPiece, (total + kMaxRdmaPieces - 1) / kMaxRdmaPieces);
}

/* the scatter/gather entries that carry bytes [offset, offset + length) of
 * the list sge[0, n): written to out (at most n of them); returns how many */
inline int slice_sge(const ibv_sge *sge, int n, size_t offset, size_t length, ibv_sge *out)
{
    int count = 0;
    for (int i = 0; (i < n) && (length > 0); ++i) {
        if (offset >= sge[i].length) {
            offset -= sge[i].length;
            continue;
        }
        const size_t take = std::min<size_t>(sge[i].length - offset, length);
        out[count].addr   = sge[i].addr + offset;
        out[count].length = static_cast<uint32_t>(take);
        out[count].lkey   = sge[i].lkey;
        ++count;
        length -= take;
        offset  = 0;
    }
    return count;
}

} // namespace xqp::ep
