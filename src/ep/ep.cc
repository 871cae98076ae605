#include "ep/ep.h"

#include "common/boundary.h"
#include "ep/pieces.h"
#include "iface/address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace xqp::ep {

static void set_rdma(ibv_send_wr &wr, ibv_wr_opcode opcode, uint64_t remote_addr, uct_rkey_t rkey);

/* a request built on the stack: the fields every provider reads whatever
 * the opcode (the opcode's own ones are set by the caller; zeroing all 128
 * bytes cost more than the rest of the setup) */
static inline void init_wr(ibv_send_wr &wr, ibv_sge *sg_list, int num_sge)
{
    wr.next       = nullptr;
    wr.sg_list    = sg_list;
    wr.num_sge    = num_sge;
    wr.send_flags = 0;
    wr.imm_data   = 0;
}

/* ------------------------------------------------------------------ data path */

ucs_status_t Endpoint::tx_check_all()
{
    const ucs_status_t status = tx_check();
    if ((status == UCS_OK) && (iface_->tx_pool().available() == 0)) {
        return UCS_ERR_NO_RESOURCE;
    }
    return status;
}

inline ucs_status_t Endpoint::post(ibv_send_wr *wr, iface::TxOp *op)
{
    if (ucs_unlikely(slow_ != 0)) {
        return post_slow(wr, op); /* a fence, a forced signal, a deferral */
    }
    /* selective signaling: a request that needs nothing at completion goes
     * unsignaled, but one in every tx_moderation_ is signaled so that its
     * completion returns the send queue slots of those before it */
    if ((op == nullptr) && ucs_unlikely(sig_countdown_ <= 1)) {
        op = iface_->get_op(); /* tx_check() made sure there is one */
    }
    prepare(wr, op);
    ibv_send_wr *bad;
    const int ret = ibv_post_send(qp_, wr, &bad);
    if (ucs_unlikely(ret != 0)) {
        return post_failed(ret, op);
    }
    posted(op);
    return UCS_OK;
}

ucs_status_t Endpoint::post_slow(ibv_send_wr *wr, iface::TxOp *op)
{
    if ((op == nullptr) && ((sig_countdown_ <= 1) || (slow_ & kSignal))) {
        op = iface_->get_op(); /* tx_check() made sure there is one */
    }
    prepare(wr, op);
    if (slow_ & kFence) {
        wr->send_flags |= IBV_SEND_FENCE;
    }
    ibv_send_wr *bad;
    const int ret = deferring() ? defer(*wr) : ibv_post_send(qp_, wr, &bad);
    if (ret != 0) {
        return post_failed(ret, op);
    }
    slow_ &= ~(kFence | kSignal);
    posted(op);
    return UCS_OK;
}

ucs_status_t Endpoint::post_failed(int ret, iface::TxOp *op)
{
    if (op != nullptr) {
        if (op->buf != nullptr) {
            iface_->tx_pool().put(op->buf);
        }
        op->ep = nullptr; /* not in flight (Iface::abandon looks) */
        iface_->put_op(op);
    }
    if (state() == State::Failed) {
        /* the connection failed after tx_check(): its QP is in the error
         * state, and the endpoint's status says why */
        ucs_debug("xqp: ep %p: ibv_post_send after the endpoint failed: %s", this,
                  strerror(ret));
        return fail_status_;
    }
    ucs_error("xqp: ep %p: ibv_post_send: %s", this, strerror(ret));
    return UCS_ERR_IO_ERROR;
}

ucs_status_t Endpoint::post_marker(uct_completion_t *comp)
{
    /* no address or key needed for zero bytes; the peer's HCA acknowledges
     * it like any write */
    iface::TxOp *op = iface_->get_op();
    op->comp        = comp;
    ibv_send_wr wr  = {};
    set_rdma(wr, IBV_WR_RDMA_WRITE, 0, 0);
    return post(&wr, op);
}

ucs_status_t Endpoint::post_notice(uint32_t imm)
{
    iface::TxOp *op = iface_->get_op();
    ibv_send_wr wr;
    init_wr(wr, nullptr, 0);
    wr.opcode   = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(imm);
    return post(&wr, op);
}

void Endpoint::announce_bound()
{
    /* connecting, it is deferred like any request (and goes first) */
    announce_owed_ = (tx_check() != UCS_OK) || (post_notice(iface::kBoundImm) != UCS_OK);
    if (!announce_owed_) {
        notice_sn_ = posted_sn_;
    }
    if (announce_owed_ && (state() != State::Failed)) {
        iface_->wait_for_resources(this); /* dispatch() tries again */
    }
}

ucs_status_t Endpoint::completion_error(ucs_status_t status, ibv_wc_status wc_status)
{
    if (!destroying_ && (state() != State::Failed)) {
        /* the first error of a live connection, unless the async thread is
         * failing it right now (it retires the QP, which flushes requests,
         * before it marks the endpoint failed): decide under its lock */
        iface::WireupGuard guard(*iface_);
        if (ucs_unlikely(peer_closed_.load(std::memory_order_relaxed))) {
            return peer_closed_error(status, wc_status);
        }
        if (state() != State::Failed) {
            ucs_error("xqp: ep %p to %s: send completion error: %s", this,
                      iface::to_string(dst_).c_str(), ibv_wc_status_str(wc_status));
            fail_status_ = status;
            state_.store(State::Failed, std::memory_order_release);
            schedule_progress();
            return status;
        }
    }
    ucs_debug("xqp: ep %p: request ended with %s after the endpoint failed", this,
              ibv_wc_status_str(wc_status));
    return completion_status(status);
}

/* the bytes one iov entry carries */
static size_t iov_length(const uct_iov_t &iov)
{
    return iov.length * std::max<unsigned>(iov.count, 1);
}

/* what an iov array carries in all */
static size_t iov_bytes(const uct_iov_t *iov, size_t iovcnt)
{
    size_t total = 0;
    for (size_t i = 0; i < iovcnt; ++i) {
        total += iov_length(iov[i]);
    }
    return total;
}

/* scatter/gather entries of an iov of registered memory */
static UCS_F_ALWAYS_INLINE ucs_status_t iov_to_sge(const uct_iov_t *iov, size_t iovcnt,
                                                   ibv_sge *sge, size_t max_sge, int *num_sge,
                                                   size_t *total)
{
    *num_sge = 0;
    *total   = 0;
    for (size_t i = 0; i < iovcnt; ++i) {
        const size_t length = iov_length(iov[i]);
        if (length == 0) {
            continue;
        }
        if ((static_cast<size_t>(*num_sge) >= max_sge) || (iov[i].memh == UCT_MEM_HANDLE_NULL) ||
            (iov[i].count > 1)) {
            return UCS_ERR_INVALID_PARAM;
        }
        ibv_sge &s = sge[(*num_sge)++];
        s.addr     = reinterpret_cast<uintptr_t>(iov[i].buffer);
        s.length   = static_cast<uint32_t>(length);
        s.lkey     = static_cast<md::Memh *>(iov[i].memh)->mr->lkey;
        *total    += length;
    }
    return UCS_OK;
}

static void set_rdma(ibv_send_wr &wr, ibv_wr_opcode opcode, uint64_t remote_addr, uct_rkey_t rkey)
{
    wr.opcode              = opcode;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey        = static_cast<uint32_t>(rkey);
}

/* ------------------------------------------------------------------ operations */

/* Each operation starts with UCX's own parameter checks (UCT_CHECK_*: UCX's
 * status and error line). They check only in UCX builds with
 * ENABLE_PARAMS_CHECK, so the bounds the buffers and inline sends rely on
 * are checked again below them. */

UCS_F_ALWAYS_INLINE ucs_status_t Endpoint::put_short(const void *buffer, unsigned length,
                                                     uint64_t remote_addr, uct_rkey_t rkey)
{
    UCT_CHECK_LENGTH(length, 0, max_inline_, "put_short");
    if (ucs_unlikely(length > max_inline_)) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(!tx_ready(state()))) {
        return put_short_slow(buffer, length, remote_addr, rkey);
    }
    return put_short_post(buffer, length, remote_addr, rkey);
}

UCS_F_NOINLINE ucs_status_t Endpoint::put_short_slow(const void *buffer, unsigned length,
                                                     uint64_t remote_addr, uct_rkey_t rkey)
{
    const ucs_status_t status = tx_check_slow(state());
    if (status != UCS_OK) {
        return status;
    }
    return put_short_post(buffer, length, remote_addr, rkey);
}

inline ucs_status_t Endpoint::put_short_post(const void *buffer, unsigned length,
                                             uint64_t remote_addr, uct_rkey_t rkey)
{
    put_inl_sge_.addr      = reinterpret_cast<uintptr_t>(buffer);
    put_inl_sge_.length    = length;
    put_inl_wr_.send_flags = IBV_SEND_INLINE;
    set_rdma(put_inl_wr_, IBV_WR_RDMA_WRITE, remote_addr, rkey);
    return post(&put_inl_wr_, nullptr);
}

ssize_t Endpoint::bcopy(uct_pack_callback_t pack_cb, void *arg, ibv_send_wr *wr)
{
    ucs_status_t status = tx_check();
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    uint8_t *buf = iface_->tx_pool().get();
    if (ucs_unlikely(buf == nullptr)) {
        return UCS_ERR_NO_RESOURCE;
    }
    const size_t length = pack_cb(buf, arg);
    iface::TxOp *op     = iface_->get_op();
    op->buf             = buf;
    ibv_sge sge = {reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(length),
                   iface_->tx_pool().lkey()};
    wr->sg_list = &sge;
    wr->num_sge = 1;
    status      = post(wr, op);
    return (status == UCS_OK) ? static_cast<ssize_t>(length) : static_cast<ssize_t>(status);
}

ssize_t Endpoint::put_bcopy(uct_pack_callback_t pack_cb, void *arg, uint64_t remote_addr,
                            uct_rkey_t rkey)
{
    ibv_send_wr wr;
    init_wr(wr, nullptr, 0);
    set_rdma(wr, IBV_WR_RDMA_WRITE, remote_addr, rkey);
    return bcopy(pack_cb, arg, &wr);
}

ucs_status_t Endpoint::rdma_zcopy(ibv_wr_opcode opcode, const uct_iov_t *iov, size_t iovcnt,
                                  uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    UCT_CHECK_IOV_SIZE(iovcnt, iface_->max_send_sge(),
                       (opcode == IBV_WR_RDMA_WRITE) ? "put_zcopy" : "get_zcopy");
    ucs_status_t status = tx_check();
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    ibv_sge sge[8];
    int num_sge;
    size_t total;
    status = iov_to_sge(iov, iovcnt, sge, iface_->max_send_sge(), &num_sge, &total);
    if (status != UCS_OK) {
        return status;
    }
    if (ucs_unlikely(total > kRdmaWhole) && (slow_ == 0)) {
        return rdma_zcopy_pieces(opcode, sge, num_sge, total, remote_addr, rkey, comp);
    }
    status = post_rdma(opcode, sge, num_sge, total, remote_addr, rkey, comp);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}

/* one RDMA work request, signaled, with comp (or none) at its completion */
inline ucs_status_t Endpoint::post_rdma(ibv_wr_opcode opcode, ibv_sge *sge, int num_sge,
                                        size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                                        uct_completion_t *comp)
{
    iface::TxOp *op = iface_->get_op();
    op->comp        = comp;
    op->length      = static_cast<uint32_t>(length); /* the peer deadline's allowance */
    ibv_send_wr wr;
    init_wr(wr, sge, num_sge);
    set_rdma(wr, opcode, remote_addr, rkey);
    return post(&wr, op);
}

/* A large request goes in pieces (ep/pieces.h), each signaled, so that the
 * peer deadline sees a slow live link progress. A piece goes only while
 * the send queue, the interface's credits and TxOps have room for it and
 * for the last one, which carries comp and all that remains: short of
 * room, the request has fewer and longer pieces (at worst one, as before).
 * A request with a fence or a forced signal to apply, or deferred while
 * connecting, stays whole (rdma_zcopy). */
ucs_status_t Endpoint::rdma_zcopy_pieces(ibv_wr_opcode opcode, const ibv_sge *sge, int num_sge,
                                         size_t total, uint64_t remote_addr, uct_rkey_t rkey,
                                         uct_completion_t *comp)
{
    const size_t piece = rdma_piece_length(total);
    ibv_sge part[8];
    size_t offset = 0;
    while (((total - offset) > piece) && has_room_for_two()) {
        const ucs_status_t status =
                post_rdma(opcode, part, slice_sge(sge, num_sge, offset, piece, part), piece,
                          remote_addr + offset, rkey, nullptr);
        if (status != UCS_OK) {
            return status; /* the pieces posted end unseen: none has comp */
        }
        offset += piece;
    }
    const ucs_status_t status =
            post_rdma(opcode, part, slice_sge(sge, num_sge, offset, total - offset, part),
                      total - offset, remote_addr + offset, rkey, comp);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}

ucs_status_t Endpoint::put_zcopy(const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                                 uct_rkey_t rkey, uct_completion_t *comp)
{
    return rdma_zcopy(IBV_WR_RDMA_WRITE, iov, iovcnt, remote_addr, rkey, comp);
}

ucs_status_t Endpoint::get_bcopy(uct_unpack_callback_t unpack_cb, void *arg, size_t length,
                                 uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    UCT_CHECK_LENGTH(length, 0, iface_->seg_size(), "get_bcopy");
    ucs_status_t status = tx_check();
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    if (ucs_unlikely(length > iface_->seg_size())) {
        return UCS_ERR_INVALID_PARAM;
    }
    uint8_t *buf = iface_->tx_pool().get();
    if (ucs_unlikely(buf == nullptr)) {
        return UCS_ERR_NO_RESOURCE;
    }
    iface::TxOp *op = iface_->get_op();
    op->buf         = buf;
    op->comp        = comp;
    op->kind        = iface::TxOp::Kind::GetBcopy;
    op->unpack      = unpack_cb;
    op->unpack_arg  = arg;
    op->length      = static_cast<uint32_t>(length);
    ibv_sge sge     = {reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(length),
                       iface_->tx_pool().lkey()};
    ibv_send_wr wr;
    init_wr(wr, &sge, 1);
    set_rdma(wr, IBV_WR_RDMA_READ, remote_addr, rkey);
    status = post(&wr, op);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}

ucs_status_t Endpoint::get_zcopy(const uct_iov_t *iov, size_t iovcnt, uint64_t remote_addr,
                                 uct_rkey_t rkey, uct_completion_t *comp)
{
    return rdma_zcopy(IBV_WR_RDMA_READ, iov, iovcnt, remote_addr, rkey, comp);
}

/* active messages: SEND with the AM id as immediate data (see the receive
 * side in iface.cc). Flow control: all connections of an interface share one
 * receive queue, and the QPs retry forever on RNR (rnr_retry 7), so a burst
 * that finds no receive buffer waits in the sender's hardware until progress
 * reposts one: no message is dropped, and RC never duplicates. The wait is
 * bounded by UCX_XQP_PEER_TIMEOUT (Endpoint::watch). */
static void set_send(ibv_send_wr &wr, uint8_t id)
{
    wr.opcode   = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(id);
}

UCS_F_ALWAYS_INLINE ucs_status_t Endpoint::am_short(uint8_t id, uint64_t header,
                                                    const void *payload, unsigned length)
{
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(sizeof(header) + length, 0, max_inline_, "am_short");
    if (ucs_unlikely(length + sizeof(header) > max_inline_)) {
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(!tx_ready(state()))) {
        return am_short_slow(id, header, payload, length);
    }
    return am_short_post(id, header, payload, length);
}

UCS_F_NOINLINE ucs_status_t Endpoint::am_short_slow(uint8_t id, uint64_t header,
                                                    const void *payload, unsigned length)
{
    const ucs_status_t status = tx_check_slow(state());
    if (status != UCS_OK) {
        return status;
    }
    return am_short_post(id, header, payload, length);
}

inline ucs_status_t Endpoint::am_short_post(uint8_t id, uint64_t header, const void *payload,
                                            unsigned length)
{
    am_inl_sge_[0].addr   = reinterpret_cast<uintptr_t>(&header);
    am_inl_sge_[1].addr   = reinterpret_cast<uintptr_t>(payload);
    am_inl_sge_[1].length = length;
    am_inl_wr_.num_sge    = (length > 0) ? 2 : 1;
    am_inl_wr_.send_flags = IBV_SEND_INLINE;
    set_send(am_inl_wr_, id);
    return post(&am_inl_wr_, nullptr);
}

ucs_status_t Endpoint::am_short_iov(uint8_t id, const uct_iov_t *iov, size_t iovcnt)
{
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(iov_bytes(iov, iovcnt), 0, max_inline_, "am_short_iov");
    ucs_status_t status = tx_check();
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    ibv_sge sge[8];
    int num_sge  = 0;
    size_t total = 0;
    for (size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].length == 0) {
            continue;
        }
        if ((num_sge >= 8) || (iov[i].count > 1)) {
            return UCS_ERR_INVALID_PARAM;
        }
        sge[num_sge++] = {reinterpret_cast<uintptr_t>(iov[i].buffer),
                          static_cast<uint32_t>(iov[i].length), 0};
        total += iov[i].length;
    }
    if (total > max_inline_) {
        return UCS_ERR_INVALID_PARAM;
    }
    ibv_send_wr wr;
    init_wr(wr, sge, num_sge);
    wr.send_flags  = IBV_SEND_INLINE;
    set_send(wr, id);
    return post(&wr, nullptr);
}

ssize_t Endpoint::am_bcopy(uint8_t id, uct_pack_callback_t pack_cb, void *arg)
{
    UCT_CHECK_AM_ID(id);
    ibv_send_wr wr;
    init_wr(wr, nullptr, 0);
    set_send(wr, id);
    return bcopy(pack_cb, arg, &wr);
}

ucs_status_t Endpoint::am_zcopy(uint8_t id, const void *header, unsigned header_length,
                                const uct_iov_t *iov, size_t iovcnt, uct_completion_t *comp)
{
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(header_length, 0, iface_->max_am_hdr(), "am_zcopy header");
    UCT_CHECK_LENGTH(header_length + iov_bytes(iov, iovcnt), 0, iface_->seg_size(),
                     "am_zcopy");
    ucs_status_t status = tx_check();
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    ibv_sge sge[8];
    int num_sge;
    size_t total;
    const size_t max_sge = iface_->max_send_sge() - ((header_length > 0) ? 1 : 0);
    status = iov_to_sge(iov, iovcnt, sge + 1, max_sge, &num_sge, &total);
    if (status != UCS_OK) {
        return status;
    }
    if (total + header_length > iface_->seg_size()) {
        return UCS_ERR_INVALID_PARAM;
    }
    iface::TxOp *op = iface_->get_op();
    op->comp        = comp;
    ibv_send_wr wr;
    init_wr(wr, nullptr, 0);
    if (header_length > 0) {
        uint8_t *buf = iface_->tx_pool().get();
        if (ucs_unlikely(buf == nullptr)) {
            iface_->put_op(op);
            return UCS_ERR_NO_RESOURCE;
        }
        std::memcpy(buf, header, header_length);
        op->buf = buf;
        sge[0]  = {reinterpret_cast<uintptr_t>(buf), header_length, iface_->tx_pool().lkey()};
        wr.sg_list = sge;
        wr.num_sge = num_sge + 1;
    } else {
        wr.sg_list = sge + 1;
        wr.num_sge = num_sge;
    }
    set_send(wr, id);
    status = post(&wr, op);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}

ucs_status_t Endpoint::atomic64(ibv_wr_opcode opcode, uint64_t compare_add, uint64_t swap,
                                uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                                uct_completion_t *comp)
{
    ucs_status_t status = tx_check();
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }
    if (ucs_unlikely(!iface_->atomics() || (remote_addr % sizeof(uint64_t) != 0))) {
        return !iface_->atomics() ? UCS_ERR_UNSUPPORTED : UCS_ERR_INVALID_PARAM;
    }
    uint8_t *buf = iface_->tx_pool().get(); /* the fetched value lands here */
    if (ucs_unlikely(buf == nullptr)) {
        return UCS_ERR_NO_RESOURCE;
    }
    iface::TxOp *op = iface_->get_op();
    op->buf         = buf;
    op->comp        = comp;
    op->result      = result;
    op->kind        = (result != nullptr) ? iface::TxOp::Kind::Fetch64 : iface::TxOp::Kind::Plain;
    ibv_sge sge     = {reinterpret_cast<uintptr_t>(buf), sizeof(uint64_t), iface_->tx_pool().lkey()};
    ibv_send_wr wr;
    init_wr(wr, &sge, 1);
    wr.opcode       = opcode;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap        = swap;
    wr.wr.atomic.rkey        = static_cast<uint32_t>(rkey);
    status = post(&wr, op);
    if (status != UCS_OK) {
        return status;
    }
    return (result != nullptr) ? UCS_INPROGRESS : UCS_OK;
}

/* ------------------------------------------------------------------ uct ops */

ucs_status_t ep_create(const uct_ep_params_t *params, uct_ep_h *ep_p)
{
    return boundary("ep_create", [&] {
        const uint64_t need = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                              UCT_EP_PARAM_FIELD_IFACE_ADDR;
        if ((params->field_mask & need) != need) {
            throw Error(UCS_ERR_INVALID_PARAM,
                        "ep_create needs the interface, device and interface address");
        }
        auto *iface = iface::Iface::from_unchecked(params->iface);
        std::string why;
        const auto dst = iface::unpack_address(
                reinterpret_cast<const uint8_t *>(params->dev_addr),
                reinterpret_cast<const uint8_t *>(params->iface_addr), &why);
        if (!dst) {
            throw Error(UCS_ERR_INVALID_ADDR, "invalid peer address: " + why);
        }
        auto ep = std::make_unique<Endpoint>(iface, *dst);
        *ep_p   = ep.release()->handle();
        return UCS_OK;
    });
}

void ep_destroy(uct_ep_h ep)
{
    delete Endpoint::from_unchecked(ep);
}

int ep_is_connected(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                    const uct_iface_addr_t *iface_addr)
{
    std::string why;
    const auto dst = iface::unpack_address(reinterpret_cast<const uint8_t *>(dev_addr),
                                           reinterpret_cast<const uint8_t *>(iface_addr), &why);
    return dst && Endpoint::from_unchecked(ep)->connects_to(*dst);
}

ucs_status_t ep_flush(uct_ep_h ep, unsigned flags, uct_completion_t *comp)
{
    return Endpoint::from_unchecked(ep)->flush(flags, comp);
}

ucs_status_t ep_fence(uct_ep_h ep, unsigned)
{
    /* the next request waits for earlier RDMA reads and atomics */
    Endpoint::from_unchecked(ep)->fence();
    return UCS_OK;
}

ucs_status_t ep_check(uct_ep_h ep, unsigned flags, uct_completion_t *comp)
{
    if (flags != 0) {
        return UCS_ERR_INVALID_PARAM;
    }
    return Endpoint::from_unchecked(ep)->check(comp);
}

ucs_status_t ep_pending_add(uct_ep_h ep, uct_pending_req_t *req, unsigned flags)
{
    return Endpoint::from_unchecked(ep)->pending_add(req, flags);
}

void ep_pending_purge(uct_ep_h ep, uct_pending_purge_callback_t cb, void *arg)
{
    Endpoint::from_unchecked(ep)->pending_purge(cb, arg);
}

} // namespace xqp::ep

namespace xqp::ep {

ucs_status_t ep_put_short(uct_ep_h ep, const void *buffer, unsigned length,
                          uint64_t remote_addr, uct_rkey_t rkey)
{
    return Endpoint::from_unchecked(ep)->put_short(buffer, length, remote_addr, rkey);
}

ssize_t ep_put_bcopy(uct_ep_h ep, uct_pack_callback_t pack_cb, void *arg,
                     uint64_t remote_addr, uct_rkey_t rkey)
{
    return Endpoint::from_unchecked(ep)->put_bcopy(pack_cb, arg, remote_addr, rkey);
}

ucs_status_t ep_put_zcopy(uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                          uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    return Endpoint::from_unchecked(ep)->put_zcopy(iov, iovcnt, remote_addr, rkey, comp);
}

ucs_status_t ep_get_bcopy(uct_ep_h ep, uct_unpack_callback_t unpack_cb, void *arg,
                          size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                          uct_completion_t *comp)
{
    return Endpoint::from_unchecked(ep)->get_bcopy(unpack_cb, arg, length, remote_addr, rkey,
                                                   comp);
}

ucs_status_t ep_get_zcopy(uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                          uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    return Endpoint::from_unchecked(ep)->get_zcopy(iov, iovcnt, remote_addr, rkey, comp);
}

ucs_status_t ep_am_short(uct_ep_h ep, uint8_t id, uint64_t header, const void *payload,
                         unsigned length)
{
    return Endpoint::from_unchecked(ep)->am_short(id, header, payload, length);
}

ucs_status_t ep_am_short_iov(uct_ep_h ep, uint8_t id, const uct_iov_t *iov, size_t iovcnt)
{
    return Endpoint::from_unchecked(ep)->am_short_iov(id, iov, iovcnt);
}

ssize_t ep_am_bcopy(uct_ep_h ep, uint8_t id, uct_pack_callback_t pack_cb, void *arg, unsigned)
{
    return Endpoint::from_unchecked(ep)->am_bcopy(id, pack_cb, arg);
}

ucs_status_t ep_am_zcopy(uct_ep_h ep, uint8_t id, const void *header, unsigned header_length,
                         const uct_iov_t *iov, size_t iovcnt, unsigned, uct_completion_t *comp)
{
    return Endpoint::from_unchecked(ep)->am_zcopy(id, header, header_length, iov, iovcnt, comp);
}

ucs_status_t ep_atomic_cswap64(uct_ep_h ep, uint64_t compare, uint64_t swap,
                               uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                               uct_completion_t *comp)
{
    return Endpoint::from_unchecked(ep)->atomic64(IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap,
                                                  remote_addr, rkey, result, comp);
}

ucs_status_t ep_atomic64_post(uct_ep_h ep, unsigned opcode, uint64_t value,
                              uint64_t remote_addr, uct_rkey_t rkey)
{
    if (opcode != UCT_ATOMIC_OP_ADD) {
        return UCS_ERR_UNSUPPORTED;
    }
    return Endpoint::from_unchecked(ep)->atomic64(IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0,
                                                  remote_addr, rkey, nullptr, nullptr);
}

ucs_status_t ep_atomic64_fetch(uct_ep_h ep, unsigned opcode, uint64_t value, uint64_t *result,
                               uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    if (opcode != UCT_ATOMIC_OP_ADD) {
        return UCS_ERR_UNSUPPORTED;
    }
    return Endpoint::from_unchecked(ep)->atomic64(IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0,
                                                  remote_addr, rkey, result, comp);
}

} // namespace xqp::ep
