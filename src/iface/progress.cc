/* xqp - the interface's send completions, progress, pending and dispatch
 * scheduling, drain, flush, fence and event arming */
#include "iface/iface.h"

#include "ep/ep.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace xqp::iface {

ep::Endpoint *Iface::ep_of_qp(uint32_t qp_num) const
{
    for (auto *ep : eps_) {
        if (ep->has_qp(qp_num)) {
            return ep;
        }
    }
    return nullptr;
}

UCS_F_ALWAYS_INLINE void Iface::finish_op_inl(TxOp *op, ucs_status_t status)
{
    if (status == UCS_OK) {
        if (op->kind == TxOp::Kind::GetBcopy) {
            op->unpack(op->unpack_arg, op->buf, op->length);
        } else if (op->kind == TxOp::Kind::Fetch64) {
            std::memcpy(op->result, op->buf, sizeof(uint64_t));
        }
    }
    /* the operation's own completion first: a flush waiting for this
     * request completes after it (on_send_completion) */
    if (op->comp != nullptr) {
        uct_invoke_completion(op->comp, status);
    }
    if (op->buf != nullptr) {
        tx_pool_->put(op->buf);
    }
    /* bounce buffers and TxOps are shared by all endpoints: any of them may
     * have been waiting for the ones just returned (tx_completed says so) */
    ep::Endpoint *ep = op->ep;
    const uint64_t sn = op->sn;
    if (ep != nullptr) {
        put_op(op);
        ep->on_send_completion(sn);
    } else {
        tx_completed(std::exchange(op->orphaned, 0)); /* an abandoned request */
        put_op(op);
    }
}

void Iface::handle_send_completion(const ibv_wc &wc, ep::Endpoint *draining)
{
    handle_send_completion_inl(wc, draining);
}

UCS_F_ALWAYS_INLINE void Iface::handle_send_completion_inl(const ibv_wc &wc,
                                                           ep::Endpoint *draining)
{
    if (ucs_likely((wc.status == IBV_WC_SUCCESS) && !(wc.wr_id & 1))) {
        finish_op_inl(reinterpret_cast<TxOp *>(wc.wr_id), UCS_OK);
        return;
    }
    send_unusual(wc, draining);
}

void Iface::send_unusual(const ibv_wc &wc, ep::Endpoint *draining)
{
    ucs_status_t status = UCS_OK;
    if (wc.status != IBV_WC_SUCCESS) {
        status = ((wc.status == IBV_WC_RETRY_EXC_ERR) || (wc.status == IBV_WC_RNR_RETRY_EXC_ERR)) ?
                         UCS_ERR_ENDPOINT_TIMEOUT :
                 (wc.status == IBV_WC_WR_FLUSH_ERR) ? UCS_ERR_CANCELED :
                                                      UCS_ERR_IO_ERROR;
    }
    if (wc.wr_id & 1) {
        /* an unsignaled request (see TxOp): only errors get here. Its
         * endpoint may be gone already (destroyed while it failed). */
        ep::Endpoint *ep = ((draining != nullptr) && draining->has_qp(wc.qp_num)) ?
                                   draining :
                                   ep_of_qp(wc.qp_num);
        if (ep != nullptr) {
            ep->completion_error(status, wc.status);
            ep->on_send_completion(wc.wr_id >> 1);
        }
        tx_returned_ = true;
        return;
    }
    auto *op = reinterpret_cast<TxOp *>(wc.wr_id);
    if (op->ep != nullptr) {
        status = op->ep->completion_error(status, wc.status);
    }
    finish_op_inl(op, status);
}

void Iface::finish_op(TxOp *op, ucs_status_t status)
{
    finish_op_inl(op, status);
}

unsigned Iface::progress_stash()
{
    std::vector<std::pair<bool, ibv_wc>> stash;
    stash.swap(stash_);
    for (const auto &[from_recv_cq, wc] : stash) {
        if (from_recv_cq) {
            handle_recv_completion(wc);
        } else {
            handle_send_completion(wc);
        }
    }
    return static_cast<unsigned>(stash.size());
}

unsigned Iface::progress_ready()
{
    unsigned count = 0;
    /* one at a time: a dispatch may destroy other endpoints (error
     * handlers do), and remove_ep takes them off this list */
    while (!ready_.empty()) {
        ep::Endpoint *ep = ready_.back();
        ready_.pop_back();
        count += ep->dispatch();
    }
    return count;
}

unsigned Iface::handle_send_completions(const ibv_wc *wcs, int n)
{
    for (int i = 0; i < n; ++i) {
        handle_send_completion_inl(wcs[i], nullptr);
    }
    return static_cast<unsigned>(n);
}

unsigned Iface::progress()
{
    unsigned count = 0;
    ibv_wc wcs[16];

    /* completions event_arm took out of the CQs first */
    if (ucs_unlikely(stashed_)) {
        stashed_ = false;
        count += progress_stash();
    }

    /* receives first: in a ping-pong the answer is what the caller waits
     * for. As UCX's rc_verbs does, a call that found some leaves the send
     * CQ to the next one; of kRxFirstPolls calls that find receives, the
     * last polls it too, so that a stream of receives cannot hold back
     * the resources send completions return. */
    int n = ibv_poll_cq(recv_cq_.get(), 16, wcs);
    bool poll_tx = true;
    if (n > 0) {
        count += handle_recv_completions(wcs, n);
        if (ucs_likely(--rx_first_left_ != 0)) {
            poll_tx = false;
        } else {
            rx_first_left_ = kRxFirstPolls;
        }
    }
    if (poll_tx) {
        n = ibv_poll_cq(send_cq_.get(), 16, wcs);
        if (n > 0) {
            count += handle_send_completions(wcs, n);
        } else if (ucs_unlikely(--idle_polls_left_ == 0)) {
            idle_polls_left_ = kWatchPolls;
            watch_peers();
        }
    }

    if (ucs_unlikely(tx_returned_)) {
        tx_returned_ = false;
        if (ucs_unlikely(!waiting_.empty())) {
            schedule_waiting();
        }
    }
    /* endpoints whose connection changed state on the async thread */
    if (ucs_unlikely(async_ready_flag_.load(std::memory_order_acquire))) {
        take_async_ready();
    }
    if (ucs_unlikely(!ready_.empty())) {
        count += progress_ready();
    }

    /* in the poll and signal modes our handlers belong to the worker's
     * async context: events it could not deliver while the application
     * held it run here (in the thread modes they never wait for it) */
    if (ucs_unlikely((handler_async_ != nullptr) && !ucs_mpmc_queue_is_empty(&async_->missed))) {
        UCS_ASYNC_BLOCK(async_);
        ucs_async_check_miss(async_);
        UCS_ASYNC_UNBLOCK(async_);
        ++count;
    }
    return count;
}

void Iface::schedule_waiting()
{
    /* only endpoints that queued requests for lack of resources */
    for (auto *ep : waiting_) {
        schedule_pending(ep);
    }
    waiting_.clear();
}

void Iface::watch_peers()
{
    if (!watching()) {
        return;
    }
    const ucs_time_t now = ucs_get_time();
    /* the deadline counts only time the interface was progressed: after a
     * gap of more than half of it (the application computed, or the host
     * stalled) every endpoint's count starts over. Else an endpoint whose
     * count began at the last look before the gap, with requests that need
     * no completion, would fail at the first look after it: no look was
     * left to post the probe its live peer answers. */
    const bool resumed = (now - last_watch_call_) > (peer_timeout_ / 2);
    last_watch_call_   = now;
    if (!resumed && (now < next_watch_)) {
        return;
    }
    next_watch_ = now + watch_period_;
    /* an endpoint that times out only schedules its error handler */
    for (auto *ep : eps_) {
        ep->watch(now, peer_timeout_, resumed);
    }
}

uint64_t Iface::bytes_in_flight(const ep::Endpoint *ep, uint64_t completed_sn) const
{
    /* a TxOp keeps ep and sn once free: a completed request's sn is not
     * above completed_sn, and drain() clears ep for destroyed endpoints */
    uint64_t bytes = 0;
    for (const auto &op : ops_) {
        if ((op.ep == ep) && (op.sn > completed_sn)) {
            bytes += op.length;
        }
    }
    return bytes;
}

void Iface::schedule_pending(ep::Endpoint *ep)
{
    if (std::find(ready_.begin(), ready_.end(), ep) == ready_.end()) {
        ready_.push_back(ep);
    }
}

void Iface::schedule_dispatch(ep::Endpoint *ep)
{
    if (std::find(async_ready_.begin(), async_ready_.end(), ep) == async_ready_.end()) {
        async_ready_.push_back(ep);
    }
    /* the flag, then armed_; event_arm stores armed_, then loads the flag
     * (both sequentially consistent): either it sees the flag and says
     * busy, or this sees it armed and wakes it */
    async_ready_flag_.store(true, std::memory_order_seq_cst);
    if (!armed_.exchange(false, std::memory_order_seq_cst)) {
        return;
    }
    const uint64_t one = 1;
    if ((write(wakeup_fd_.get(), &one, sizeof(one)) < 0) && (errno != EAGAIN)) {
        ucs_warn("xqp: %s: cannot signal the event fd: %s", resource_name_.c_str(),
                 strerror(errno));
    }
}

void Iface::take_async_ready()
{
    async_ready_flag_.store(false, std::memory_order_relaxed);
    /* an endpoint still on async_ready_ is alive: its destructor takes it
     * off under the same lock. On ready_ it stays safe: destruction runs
     * on this thread and takes it off that list too. */
    {
        WireupGuard guard(*this);
        for (auto *ep : async_ready_) {
            schedule_pending(ep);
        }
        async_ready_.clear();
    }
    /* connections were established or failed: maybe none is left to time */
    disarm_timer_if_idle();
}

void Iface::wait_for_resources(ep::Endpoint *ep)
{
    if (std::find(waiting_.begin(), waiting_.end(), ep) == waiting_.end()) {
        waiting_.push_back(ep);
    }
}

void Iface::remove_ep(ep::Endpoint *ep)
{
    eps_.erase(std::remove(eps_.begin(), eps_.end(), ep), eps_.end());
    ready_.erase(std::remove(ready_.begin(), ready_.end(), ep), ready_.end());
    async_ready_.erase(std::remove(async_ready_.begin(), async_ready_.end(), ep),
                       async_ready_.end());
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), ep), waiting_.end());
}

void Iface::drain(ep::Endpoint *ep)
{
    /* bounded: a QP in the error state flushes every request quickly */
    if (!reap_until([ep] { return (ep->outstanding() == 0) || !ep->qp_completes(); }, ep)) {
        ucs_warn("xqp: %s: %u requests of ep %p did not complete", resource_name_.c_str(),
                 ep->outstanding(), ep);
    }
    unlink(ep);
}

void Iface::abandon(ep::Endpoint *ep)
{
    /* what completed already ends as usual */
    ibv_wc wcs[16];
    int n;
    while ((ep->outstanding() > 0) && ((n = ibv_poll_cq(send_cq_.get(), 16, wcs)) > 0)) {
        for (int i = 0; i < n; ++i) {
            handle_send_completion(wcs[i], ep);
        }
    }
    /* the signaled requests still in flight, in the order they complete */
    std::vector<TxOp *> in_flight;
    for (auto &op : ops_) {
        if ((op.ep == ep) && (op.sn > ep->completed_sn())) {
            in_flight.push_back(&op);
        }
    }
    std::sort(in_flight.begin(), in_flight.end(),
              [](const TxOp *a, const TxOp *b) { return a->sn < b->sn; });
    uint64_t retired = ep->completed_sn();
    for (TxOp *op : in_flight) {
        if (op->comp != nullptr) {
            uct_invoke_completion(op->comp, UCS_ERR_CANCELED);
            op->comp = nullptr;
        }
        op->kind     = TxOp::Kind::Plain; /* nothing written to the user's memory */
        op->orphaned = static_cast<uint32_t>(op->sn - retired);
        op->ep       = nullptr;
        retired      = op->sn;
    }
    /* unsignaled ones after the last signaled one report nothing when they
     * complete: their credits return now */
    tx_completed(ep->forget_in_flight() - retired);
    unlink(ep);
}

void Iface::unlink(ep::Endpoint *ep)
{
    /* completions still queued for it (none expected) must not find it */
    for (auto &op : ops_) {
        if (op.ep == ep) {
            op.ep = nullptr;
        }
    }
    for (auto &[from_recv_cq, wc] : stash_) {
        if (from_recv_cq || (wc.wr_id & 1)) {
            continue; /* no TxOp (unsignaled: found by QP number, which is gone) */
        }
        auto *op = reinterpret_cast<TxOp *>(wc.wr_id);
        if (op->ep == ep) {
            op->ep = nullptr;
        }
    }
}

ucs_status_t Iface::flush(unsigned flags, uct_completion_t *comp)
{
    if (comp != nullptr) {
        return UCS_ERR_UNSUPPORTED;
    }
    for (auto *ep : eps_) {
        const ucs_status_t status = ep->flush(flags, nullptr);
        if ((status == UCS_INPROGRESS) || (status == UCS_ERR_NO_RESOURCE)) {
            return UCS_INPROGRESS;
        }
    }
    return UCS_OK;
}

void Iface::fence_all()
{
    for (auto *ep : eps_) {
        ep->fence();
    }
}

ucs_status_t Iface::event_arm(unsigned events)
{
    /* consume the notifications that woke the caller */
    ibv_cq *cq;
    void *ctx;
    while (ibv_get_cq_event(comp_channel_.get(), &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
    }
    /* one read returns the eventfd's count and clears it (EAGAIN: was 0);
     * the same for the timerfd's expirations */
    uint64_t wakeups;
    for (const int fd : {wakeup_fd_.get(), watch_fd_.get()}) {
        const ssize_t got = read(fd, &wakeups, sizeof(wakeups));
        (void)got;
    }
    /* before the checks below: an endpoint that times out here is
     * dispatched (its error handler) by the progress they ask for */
    watch_peers();
    /* endpoints the async thread handed over, or ones whose pending
     * requests may run: progress has work now. Armed first: a hand-over
     * after the check writes the eventfd (schedule_dispatch). */
    armed_.store(true, std::memory_order_seq_cst);
    if (!stash_.empty() || async_ready_flag_.load(std::memory_order_seq_cst) || !ready_.empty()) {
        armed_.store(false, std::memory_order_relaxed);
        return UCS_ERR_BUSY;
    }
    const bool send = events & UCT_EVENT_SEND_COMP;
    const bool recv = events & (UCT_EVENT_RECV | UCT_EVENT_RECV_SIG);
    if ((send && (ibv_req_notify_cq(send_cq_.get(), 0) != 0)) ||
        (recv && (ibv_req_notify_cq(recv_cq_.get(), 0) != 0))) {
        return UCS_ERR_IO_ERROR;
    }
    /* completions that arrived before the CQs were armed raise no event:
     * take them out now (progress handles them) and report busy */
    ibv_wc wcs[16];
    for (const bool from_recv_cq : {false, true}) {
        if (from_recv_cq ? !recv : !send) {
            continue;
        }
        const int n = ibv_poll_cq(from_recv_cq ? recv_cq_.get() : send_cq_.get(), 16, wcs);
        for (int i = 0; i < n; ++i) {
            stash_.emplace_back(from_recv_cq, wcs[i]);
        }
    }
    if (!stash_.empty()) {
        stashed_ = true;
        return UCS_ERR_BUSY;
    }
    arm_watch_timer();
    return UCS_OK;
}

void Iface::arm_watch_timer()
{
    if (!watching()) {
        /* no deadline, or nothing in flight: a timer armed before must not wake the
         * application for nothing (an expired one was read above) */
        if (watch_armed_) {
            const itimerspec off = {};
            (void)timerfd_settime(watch_fd_.get(), 0, &off, nullptr);
            watch_armed_ = false;
        }
        return;
    }
    const double s = ucs_time_to_sec(watch_period_);
    itimerspec its = {};
    its.it_value.tv_sec  = static_cast<time_t>(s);
    its.it_value.tv_nsec = static_cast<long>((s - static_cast<double>(its.it_value.tv_sec)) * 1e9);
    if ((its.it_value.tv_sec == 0) && (its.it_value.tv_nsec == 0)) {
        its.it_value.tv_nsec = 1;
    }
    watch_armed_ = true;
    if (timerfd_settime(watch_fd_.get(), 0, &its, nullptr) != 0) {
        ucs_warn("xqp: %s: cannot set the peer deadline's timer: %s", resource_name_.c_str(),
                 strerror(errno));
    }
}

} // namespace xqp::iface
