/*
 * xqp - the transport ("tl") and its interface.
 *
 * A transport resource exists for every ACTIVE port that rdma_cm can reach
 * through an IP address (verbs/discovery.h). Each interface owns:
 *  - an rdma_cm listener on that address (ephemeral port) whose event
 *    channel is driven by UCX's async context, so connections are accepted
 *    even when the application never calls progress;
 *  - the CQs of its data QPs, created by the wireup (wireup/connection.h) on
 *    the device rdma_cm resolved;
 *  - the passive connections it accepted (the active ones belong to eps).
 * The interface is UCT_IFACE_FLAG_CONNECT_TO_IFACE: its address is the
 * listener's (iface/address.h).
 *
 * Locking: the connections (eps' and passive ones) are guarded by the
 * interface's wireup lock (WireupGuard), not by the worker's async lock. The
 * rdma_cm handler and the connection timer run on UCX's async thread holding
 * only the wireup lock, a blocking mutex: the application holding the async
 * lock (UCP does, often) neither defers connection events into its own
 * progress nor spins against the async thread while a QP is being created.
 * The handlers never call back into UCX: they hand endpoints to the
 * interface's progress through a list and signal its event fd (see
 * WireupGuard and schedule_dispatch).
 */
#ifndef XQP_IFACE_IFACE_H
#define XQP_IFACE_IFACE_H

#include "common/fd.h"
#include "compat/ucx.h"
#include "iface/buffers.h"
#include "iface/config.h"
#include "iface/conn_table.h"
#include "md/md.h"
#include "wireup/cm_ops.h"
#include "wireup/connection.h"

#include <xqp/xqp.h>

#include <algorithm>
#include <memory>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace xqp::ep {
class Endpoint;
}

namespace xqp::iface {

/* The immediate data of sharing's two notices (conn_table.h), outside the
 * AM ids (< 32): "this side no longer sends on the shared connection"
 * (release) and "this side sends on the connection you opened" (bound). */
constexpr uint32_t kReleaseImm = 0x58510001u;
constexpr uint32_t kBoundImm   = 0x58510002u;

/*
 * One signaled work request in flight. wr_id points here; the completion
 * finds its endpoint, what to finish (user completion, bcopy unpack, fetched
 * atomic value) and the bounce buffer to return, and the endpoint's sequence
 * number of the request: the send queue completes in order, so it also
 * retires the unsignaled requests posted before it.
 *
 * Requests that need nothing at completion (inline puts and active
 * messages) go unsignaled, with wr_id = (sequence << 1) | 1 (a TxOp address
 * is even): only an error produces their completion, which then names the
 * request by its sequence number and the endpoint by its QP.
 */
struct TxOp {
    enum class Kind : uint8_t { Plain, GetBcopy, Fetch64 };
    ep::Endpoint         *ep     = nullptr;
    uint64_t              sn     = 0;
    uct_completion_t     *comp   = nullptr;
    uint8_t              *buf    = nullptr;
    Kind                  kind   = Kind::Plain;
    uct_unpack_callback_t unpack = nullptr;
    void                 *unpack_arg = nullptr;
    /* the bytes it moves, where they can be many (zcopy, get_bcopy): the
     * peer deadline allows for them (bytes_in_flight) */
    uint32_t              length = 0;
    uint64_t             *result = nullptr;
    TxOp                 *next_free = nullptr;
    /* a request whose endpoint went while it was in flight (Iface::abandon):
     * the interface's credits its completion returns (its own, and those of
     * the unsignaled requests before it) */
    uint32_t              orphaned = 0;
};

class Iface final {
public:
    struct Handle {
        uct_base_iface_t super;
        Iface           *owner;
    };

    Iface(md::MemoryDomain *md, uct_worker_h worker, const uct_iface_params_t *params,
          const Config &config);
    ~Iface();
    Iface(const Iface &) = delete;
    Iface &operator=(const Iface &) = delete;

    /* nullptr when iface is not an xqp interface */
    static Iface *from(uct_iface_h iface);
    static Iface *from_unchecked(uct_iface_h iface)
    {
        return reinterpret_cast<Handle *>(iface)->owner;
    }

    uct_iface_h handle() { return &handle_.super.super; }
    uct_base_iface_t *base() { return &handle_.super; }
    ucs_async_context_t *async() const { return async_; }
    uct_worker_h worker() const { return worker_; }

    void query(uct_iface_attr_t *attr);

    /* data path (main thread) */
    unsigned progress();
    ucs_status_t flush(unsigned flags, uct_completion_t *comp);
    void fence_all();
    /* an epoll set of the completion channel, wakeup_fd_ and watch_fd_:
     * readable when a completion or a connection event needs the
     * application's progress, or the peer deadline a look */
    int event_fd() const { return event_fd_.get(); }
    ucs_status_t event_arm(unsigned events);
    /* the peer deadline: looks at the endpoints with requests in flight
     * when a watch period has passed (main thread) */
    void watch_peers();
    /* the bytes of ep's requests after completed_sn still in flight (the
     * peer deadline's allowance; walks every TxOp) */
    uint64_t bytes_in_flight(const ep::Endpoint *ep, uint64_t completed_sn) const;
    /* event_arm: the timerfd wakes the application for the next look */
    void arm_watch_timer();
    /* a deadline is set and requests are in flight */
    bool watching() const { return (peer_timeout_ != 0) && (tx_spare_ != tx_spare_idle_); }

    TxOp *get_op()
    {
        TxOp *op = free_ops_;
        if (op != nullptr) {
            /* what finish_op reads for every kind (ep and sn are set when
             * the request is posted; the other fields only by their kind) */
            free_ops_ = op->next_free;
            op->comp  = nullptr;
            op->buf   = nullptr;
            op->kind   = TxOp::Kind::Plain;
            op->length = 0;
        }
        return op;
    }
    void put_op(TxOp *op)
    {
        op->next_free = free_ops_;
        free_ops_     = op;
    }
    bool has_free_op() const { return free_ops_ != nullptr; }
    bool has_free_ops(unsigned n) const
    {
        const TxOp *op = free_ops_;
        for (; (op != nullptr) && (n > 0); op = op->next_free) {
            --n;
        }
        return n == 0;
    }
    /* Work requests posted on all the interface's QPs and not yet known to
     * be complete (main thread), at most the send CQ's size: a failure of
     * every QP at once completes each of them, unsignaled ones too, and
     * must not overrun the CQ; and the peers' shared receive queues see no
     * more than that from us at once (receiver-not-ready retries thrashed
     * with 128 endpoints, UCX's test_uct_pending.pending_fairness). */
    bool has_tx_credit() const { return tx_spare_ > -static_cast<int64_t>(tx_moderation_); }
    /* near the bound every request is signaled: the one that takes the
     * last credit then completes and returns credits, whatever the
     * unsignaled requests of other endpoints hold */
    bool tx_credit_low() const { return tx_spare_ <= 0; }
    /* credits, and not near the bound: the data path's one test */
    bool tx_credit_ample() const { return tx_spare_ > 0; }
    /* n requests can go and leave credits ample */
    bool tx_credit_for(int64_t n) const { return tx_spare_ >= n; }
    void tx_posted() { --tx_spare_; }
    void tx_completed(uint64_t count)
    {
        tx_spare_    += static_cast<int64_t>(count);
        tx_returned_  = true;
    }
    BufferPool &tx_pool() { return *tx_pool_; }
    size_t max_inline() const { return max_inline_; }
    size_t seg_size() const { return seg_size_; }
    /* the largest am_zcopy header (cap.am.max_hdr) */
    size_t max_am_hdr() const { return std::min<size_t>(seg_size_ / 2, 128); }
    uint32_t max_send_sge() const { return max_send_sge_; }
    bool atomics() const { return atomics_; }
    uint32_t tx_queue_len() const { return tx_queue_len_; }
    /* one request in this many is signaled when none needs a completion */
    unsigned tx_moderation() const { return tx_moderation_; }

    /* The connection timer runs only while an endpoint's connection is
     * attempted, so that an interface whose connections are up never wakes
     * the async thread. arm_timer(): wireup lock held, when an endpoint
     * starts connecting (retries follow attempts at once, so the timer is
     * armed throughout). disarm_timer_if_idle(): on the application's
     * thread WITHOUT the wireup lock (its handler takes it, and the removal
     * waits for the handler), when connections changed state. */
    ucs_status_t arm_timer();
    void disarm_timer_if_idle();

    /* add/remove with the wireup lock held */
    void add_ep(ep::Endpoint *ep) { eps_.push_back(ep); }
    void remove_ep(ep::Endpoint *ep);
    /* an endpoint whose pending queue may run now */
    void schedule_pending(ep::Endpoint *ep);
    /* shared tx resources came back: the endpoints waiting for them */
    void schedule_waiting();
    /* with the wireup lock held: an endpoint whose connection changed state
     * (pending requests to send, or an error to report) is dispatched by the
     * interface's progress */
    void schedule_dispatch(ep::Endpoint *ep);
    /* an endpoint whose pending requests wait for shared tx resources */
    void wait_for_resources(ep::Endpoint *ep);
    /* a request ended with status (main thread): its results, completion,
     * buffer and TxOp, then its endpoint's send queue accounting */
    void finish_op(TxOp *op, ucs_status_t status);
    /* its body, inlined into the completion path */
    inline void finish_op_inl(TxOp *op, ucs_status_t status);
    /* polls the send CQ until ep has no work request in flight (or timeout) */
    void drain(ep::Endpoint *ep);
    /* ep goes while its connection stays (a hand-over): its requests in
     * flight are not waited for. Their completions run now with
     * UCS_ERR_CANCELED; their work requests complete when the peer takes
     * them, and return their credits then. (A zero-copy request's memory
     * is read or written until then, as on any QP that stays up: UCP
     * flushes an endpoint before it destroys it.) */
    void abandon(ep::Endpoint *ep);
    /* no TxOp or stashed completion refers to ep any more */
    void unlink(ep::Endpoint *ep);
    /* polls the send CQ until done() holds, 5 s at most; false on timeout */
    template <typename Done> bool reap_until(Done done, ep::Endpoint *draining = nullptr)
    {
        const ucs_time_t deadline = ucs_get_time() + ucs_time_from_sec(5.0);
        ibv_wc wcs[16];
        while (!done()) {
            const int n = ibv_poll_cq(send_cq_.get(), 16, wcs);
            for (int i = 0; i < n; ++i) {
                handle_send_completion(wcs[i], draining);
            }
            if ((n <= 0) && (ucs_get_time() > deadline)) {
                return false;
            }
        }
        return true;
    }
    void get_device_address(uint8_t *addr) const;
    void get_address(uint8_t *addr) const;
    /* when not, why says why (when given) */
    bool is_reachable(const uint8_t *dev_addr, const uint8_t *iface_addr,
                      std::string *why = nullptr) const;

    const std::string &resource_name() const { return resource_name_; }
    const wireup::WireupConfig &wireup_config() const { return wireup_config_; }
    wireup::CmOps &cm() { return *cm_; }
    wireup::EceProvider &ece_provider() { return ece_provider_; }
    uint32_t next_conn_id() { return ++conn_seq_; }

    /* every connection of the interface, and their sharing (conn_table.h;
     * wireup lock held) */
    ConnTable &conns() { return *conns_; }
    /* a notice (kBoundImm: sends true; kReleaseImm: false) came on the QP
     * numbered qp_num (main thread; takes the wireup lock) */
    void on_peer_notice(uint32_t qp_num, bool sends);

    /* introspection (include/xqp/xqp.h) */
    int passive_count() const;
    /* the connections held now (wireup lock held) */
    int connection_count() const { return static_cast<int>(conns_->held()); }
    int passive_info(unsigned index, xqp_wireup_info_t *info) const;

private:
    friend class WireupGuard;

    /* the constructor's steps, in order */
    ibv_device_attr query_device();
    void configure(const Config &config, const ibv_device_attr &dev_attr,
                   const uct_iface_params_t *params);
    void open_event_fds();
    void create_queues(const Config &config, const ibv_device_attr &dev_attr);
    void create_pools(const Config &config);
    void open_listener(const std::string &device, unsigned port, const Config &config);
    void start(const uct_iface_params_t *params, const Config &config);

    /* draining: the endpoint being destroyed (no longer in eps_) */
    void handle_send_completion(const ibv_wc &wc, ep::Endpoint *draining = nullptr);
    /* its body, inlined into progress's loop */
    inline void handle_send_completion_inl(const ibv_wc &wc, ep::Endpoint *draining);
    /* the rare cases: an error, or an unsignaled request's completion */
    void send_unusual(const ibv_wc &wc, ep::Endpoint *draining);
    ep::Endpoint *ep_of_qp(uint32_t qp_num) const;
    void handle_recv_completion(const ibv_wc &wc);
    /* its body, inlined into handle_recv_completions' loop; the rare
     * cases (errors, sharing's notices, malformed messages) are
     * recv_unusual's */
    inline void handle_recv_completion_inl(const ibv_wc &wc);
    void recv_unusual(const ibv_wc &wc, uint8_t *buf);
    /* the receive buffers' layout from the AM alignment parameters; throws
     * Error (UCS_ERR_INVALID_PARAM) on invalid ones */
    void rx_layout(const uct_iface_params_t *params);
    uint8_t *rx_data(uint8_t *buf) const { return buf + rx_data_offset_; }
    /* a buffer of the receive pool, with its release descriptor pointer
     * (written here once: nothing else writes before the headroom, so the
     * buffer keeps it through every repost); nullptr when the pool is empty */
    uint8_t *take_rx_buffer();
    /* the receive batch's requests, built once (create_pools): each repost
     * writes only the buffer's address, its key and wr_id */
    void init_rx_batch();
    /* into the shared receive queue, or back to the pool when it is full */
    void post_rx(uint8_t *buf);
    /* its body, inlined into the receive path */
    inline void post_rx_inl(uint8_t *buf);
    /* post_rx_inl for a buffer that left the queue since the last post
     * (rx_posted_ + rx_batched_ < rx_queue_len_ holds: no test for room) */
    inline void repost_rx_inl(uint8_t *buf);
    /* posts the gathered buffers */
    void post_rx_batch();
    /* a descriptor was kept: another buffer (the pool grows) takes its place */
    void replace_kept_rx();
    static void release_desc(uct_recv_desc_t *self, void *desc);
    void probe_qp_caps(const Config &config);

    static void cm_event_handler(int id, ucs_event_set_types_t events, void *arg);
    static void timer_handler(int id, ucs_event_set_types_t events, void *arg);
    void progress_cm_events();
    /* moves the endpoints schedule_dispatch() listed to ready_; without
     * the wireup lock (it disarms the timer) */
    void take_async_ready();
    /* the rare parts of progress(): completions event_arm stashed, and
     * endpoints whose pending requests may run (ready_) */
    unsigned progress_stash();
    /* the completions progress() polled, out of line: the call that finds
     * nothing then keeps fewer registers */
    UCS_F_NOINLINE unsigned handle_recv_completions(const ibv_wc *wcs, int n);
    UCS_F_NOINLINE unsigned handle_send_completions(const ibv_wc *wcs, int n);
    unsigned progress_ready();
    /* RDMA_CM_EVENT_DEVICE_REMOVAL on the listener (wireup lock held) */
    void on_device_removal();

    Handle              handle_;
    md::MemoryDomain   *md_;
    uct_worker_h        worker_;
    ucs_async_context_t *async_;
    /* the async context the handlers are registered with: none in the
     * thread modes (they take only the wireup lock), the worker's in the
     * poll and signal modes (UCX runs them where the application allows) */
    ucs_async_context_t *handler_async_ = nullptr;
    mutable std::recursive_mutex wireup_mutex_;
    /* guarded by the wireup lock; the flag tells progress to look */
    std::vector<ep::Endpoint *> async_ready_;
    std::atomic<bool>   async_ready_flag_{false};
    std::string         resource_name_;
    unsigned            port_num_  = 0;
    double              bandwidth_ = 0; /* bytes/s of the port */
    sockaddr_storage    listen_addr_ = {};
    wireup::WireupConfig wireup_config_;

    verbs::EventChannel channel_;
    verbs::CmId         listener_;
    verbs::CompChannel  comp_channel_;
    /* the async thread writes wakeup_fd_ when it hands endpoints to
     * progress (schedule_dispatch), so that an application asleep on
     * event_fd() wakes up to dispatch them; only once per event_arm, as a
     * CQ notifies once per ibv_req_notify_cq: before an arm the fd stays
     * quiet (armed_: set by event_arm, taken by the write) */
    UniqueFd            wakeup_fd_;
    std::atomic<bool>   armed_{false};
    /* a timerfd event_arm sets while requests are in flight, so that an
     * application asleep on event_fd() looks at the peer deadline too */
    UniqueFd            watch_fd_;
    bool                watch_armed_ = false;
    UniqueFd            event_fd_;
    verbs::Cq           send_cq_;
    verbs::Cq           recv_cq_;
    std::unique_ptr<BufferPool> tx_pool_;
    std::unique_ptr<BufferPool> rx_pool_;
    /* receive buffers in the shared receive queue (main thread): kept at
     * rx_queue_len_ while the application keeps descriptors, the pool
     * growing as needed up to rx_max_bufs_, as UCX's receive pools do */
    size_t              rx_posted_    = 0;
    size_t              rx_queue_len_ = 0;
    /* UCX_XQP_RX_MAX_BUFS: the pool grows no further (SIZE_MAX: no limit);
     * the queue then holds fewer while descriptors are kept */
    size_t              rx_max_bufs_  = SIZE_MAX;
    /* buffers to post, gathered so that one ibv_post_srq_recv posts
     * rx_batch_len_ of them (the queue holds at least rx_queue_len_ -
     * rx_batch_len_ + 1 meanwhile); one post per message cost more than the
     * rest of the receive. The first rx_batched_ of rx_wrs_ (a chain, each
     * with its own entry of rx_sges_) are filled in. */
    static constexpr unsigned kRxBatchMax = 16;
    unsigned            rx_batch_len_ = 1;
    unsigned            rx_batched_   = 0;
    ibv_recv_wr         rx_wrs_[kRxBatchMax]  = {};
    ibv_sge             rx_sges_[kRxBatchMax] = {};
    /* after the pools: destroyed first, with receive buffers still posted */
    verbs::Srq          srq_;
    std::vector<TxOp>   ops_;
    TxOp               *free_ops_ = nullptr;
    /* completions event_arm polled early: (from the receive CQ, wc) */
    std::vector<std::pair<bool, ibv_wc>> stash_;
    bool                stashed_ = false; /* stash_ holds some: progress's one test */
    size_t              rx_headroom_ = 0;
    /* where a receive buffer's payload starts: after the alignment pad, the
     * release descriptor pointer and the headroom (see rx_layout) */
    size_t              rx_data_offset_ = 0;
    size_t              rx_align_       = 64;
    struct RecvDesc {
        uct_recv_desc_t super;
        Iface          *iface;
    } recv_desc_;
    size_t              seg_size_    = 0;
    size_t              max_inline_  = 0;
    uint32_t            max_send_sge_ = 1;
    uint32_t            tx_queue_len_ = 0;
    unsigned            tx_moderation_ = 1;
    bool                atomics_     = false;
    std::vector<ep::Endpoint *> eps_;
    std::vector<ep::Endpoint *> ready_;
    std::vector<ep::Endpoint *> waiting_; /* pending requests, no resources yet */
    bool                tx_returned_ = false; /* shared tx resources came back */
    /* the bound on requests in flight, less tx_moderation_, less the
     * requests in flight: one counter, so that the data path tests one
     * value (has_tx_credit, tx_credit_low) */
    int64_t             tx_spare_ = 0;
    int64_t             tx_spare_idle_ = 0; /* tx_spare_ with nothing in flight */
    /* UCX_XQP_PEER_TIMEOUT (0: none): requests in flight that see no
     * completion this long fail their endpoint (Endpoint::watch); the
     * endpoints are looked at every watch_period_, from progress (after
     * kWatchPolls polls that found no send completion) and event_arm */
    static constexpr unsigned kWatchPolls = 64;
    ucs_time_t          peer_timeout_ = 0;
    ucs_time_t          watch_period_ = 0;
    ucs_time_t          next_watch_   = 0;
    ucs_time_t          last_watch_call_ = 0; /* watch_peers(), throttled or not */
    unsigned            idle_polls_left_ = kWatchPolls;
    /* progress: calls that find receives and may still leave the send CQ
     * to the next call */
    static constexpr unsigned kRxFirstPolls = 8;
    unsigned            rx_first_left_ = kRxFirstPolls;
    std::unique_ptr<wireup::RdmaCmOps> cm_;
    wireup::VerbsEceProvider ece_provider_;
    bool                async_handler_ = false;
    int                 timer_id_      = -1; /* wireup lock; -1: not armed */
    uint32_t            conn_seq_      = 0;

    /* every connection: endpoints' own ones and the accepted ones
     * (wireup lock held) */
    std::unique_ptr<ConnTable> conns_;
};


/*
 * Holds an interface's wireup lock (recursive). In the poll and signal async
 * modes, where the handlers run inside the application's thread, it also
 * blocks the worker's async context first, so a handler never interrupts a
 * thread that holds the mutex.
 *
 * Lock order: the worker's async lock, then the wireup lock. UCP calls into
 * xqp holding its async lock, and closes interfaces holding it (waiting for
 * a running handler to return): so nothing done under the wireup lock, and
 * nothing a handler does at all, may take the worker's async lock. That is
 * why handlers hand endpoints to the interface's progress through a list
 * instead of uct_worker_progress_register_safe().
 */
class WireupGuard {
public:
    explicit WireupGuard(const Iface &iface)
        : iface_(iface), blocked_(iface.handler_async_)
    {
        if (blocked_ != nullptr) {
            UCS_ASYNC_BLOCK(blocked_);
        }
        iface_.wireup_mutex_.lock();
    }
    ~WireupGuard()
    {
        iface_.wireup_mutex_.unlock();
        if (blocked_ != nullptr) {
            UCS_ASYNC_UNBLOCK(blocked_);
        }
    }
    WireupGuard(const WireupGuard &) = delete;
    WireupGuard &operator=(const WireupGuard &) = delete;

private:
    const Iface         &iface_;
    ucs_async_context_t *blocked_;
};

/* The transport definition registered with the component. */
extern uct_tl_t tl;

} // namespace xqp::iface

#endif
