#include "iface/iface.h"

#include "common/boundary.h"
#include "compat/ops.h"
#include "ep/ep.h"
#include "iface/address.h"
#include "verbs/discovery.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace xqp::iface {

/* ------------------------------------------------------------------ ops */

static void iface_close(uct_iface_h tl_iface)
{
    delete Iface::from_unchecked(tl_iface);
}

static ucs_status_t iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr)
{
    return boundary("iface_query", [&] {
        Iface::from_unchecked(tl_iface)->query(attr);
        return UCS_OK;
    });
}

static ucs_status_t iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr)
{
    Iface::from_unchecked(tl_iface)->get_device_address(reinterpret_cast<uint8_t *>(addr));
    return UCS_OK;
}

static ucs_status_t iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr)
{
    Iface::from_unchecked(tl_iface)->get_address(reinterpret_cast<uint8_t *>(addr));
    return UCS_OK;
}

/* uct_iface_is_reachable_v2: with the reason when not (its info string) */
static int iface_is_reachable_why(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                                  const uct_iface_addr_t *iface_addr, char *why, size_t why_len)
{
    std::string reason;
    const bool ok = Iface::from_unchecked(tl_iface)->is_reachable(
            reinterpret_cast<const uint8_t *>(dev_addr),
            reinterpret_cast<const uint8_t *>(iface_addr), (why != nullptr) ? &reason : nullptr);
    if (!ok && (why != nullptr) && (why_len > 0)) {
        std::snprintf(why, why_len, "%s", reason.c_str());
    }
    return ok;
}

static int iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                              const uct_iface_addr_t *iface_addr)
{
    return iface_is_reachable_why(tl_iface, dev_addr, iface_addr, nullptr, 0);
}

/* for UCX's "same device" reachability scope: the peer listens on our address */
static int iface_is_same_device(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr)
{
    uint8_t own[kDeviceAddrLen];
    Iface::from_unchecked(tl_iface)->get_device_address(own);
    return std::memcmp(own, dev_addr, sizeof(own)) == 0;
}

static unsigned iface_progress(uct_iface_h tl_iface)
{
    return Iface::from_unchecked(tl_iface)->progress();
}

static ucs_status_t iface_flush(uct_iface_h tl_iface, unsigned flags, uct_completion_t *comp)
{
    return Iface::from_unchecked(tl_iface)->flush(flags, comp);
}

static ucs_status_t iface_fence(uct_iface_h tl_iface, unsigned)
{
    Iface::from_unchecked(tl_iface)->fence_all();
    return UCS_OK;
}

static ucs_status_t iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    *fd_p = Iface::from_unchecked(tl_iface)->event_fd();
    return UCS_OK;
}

static ucs_status_t iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    return Iface::from_unchecked(tl_iface)->event_arm(events);
}

using Ops = uct_iface_ops_t;

static uct_iface_ops_t iface_ops = {
    .ep_put_short             = ep::ep_put_short,
    .ep_put_bcopy             = ep::ep_put_bcopy,
    .ep_put_zcopy             = ep::ep_put_zcopy,
    .ep_get_short             = compat::unsupported<decltype(Ops::ep_get_short)>,
    .ep_get_bcopy             = ep::ep_get_bcopy,
    .ep_get_zcopy             = ep::ep_get_zcopy,
    .ep_am_short              = ep::ep_am_short,
    .ep_am_short_iov          = ep::ep_am_short_iov,
    .ep_am_bcopy              = ep::ep_am_bcopy,
    .ep_am_zcopy              = ep::ep_am_zcopy,
    .ep_atomic_cswap64        = ep::ep_atomic_cswap64,
    .ep_atomic_cswap32        = compat::unsupported<decltype(Ops::ep_atomic_cswap32)>,
    .ep_atomic32_post         = compat::unsupported<decltype(Ops::ep_atomic32_post)>,
    .ep_atomic64_post         = ep::ep_atomic64_post,
    .ep_atomic32_fetch        = compat::unsupported<decltype(Ops::ep_atomic32_fetch)>,
    .ep_atomic64_fetch        = ep::ep_atomic64_fetch,
    .ep_tag_eager_short       = compat::unsupported<decltype(Ops::ep_tag_eager_short)>,
    .ep_tag_eager_bcopy       = compat::unsupported<decltype(Ops::ep_tag_eager_bcopy)>,
    .ep_tag_eager_zcopy       = compat::unsupported<decltype(Ops::ep_tag_eager_zcopy)>,
    .ep_tag_rndv_zcopy        = compat::unsupported<decltype(Ops::ep_tag_rndv_zcopy)>,
    .ep_tag_rndv_cancel       = compat::unsupported<decltype(Ops::ep_tag_rndv_cancel)>,
    .ep_tag_rndv_request      = compat::unsupported<decltype(Ops::ep_tag_rndv_request)>,
    .iface_tag_recv_zcopy     = compat::unsupported<decltype(Ops::iface_tag_recv_zcopy)>,
    .iface_tag_recv_cancel    = compat::unsupported<decltype(Ops::iface_tag_recv_cancel)>,
    .ep_pending_add           = ep::ep_pending_add,
    .ep_pending_purge         = ep::ep_pending_purge,
    .ep_flush                 = ep::ep_flush,
    .ep_fence                 = ep::ep_fence,
    .ep_check                 = ep::ep_check,
    .ep_create                = ep::ep_create,
    .ep_connect               = compat::unsupported<decltype(Ops::ep_connect)>,
    .ep_disconnect            = compat::unsupported<decltype(Ops::ep_disconnect)>,
    .cm_ep_conn_notify        = compat::unsupported<decltype(Ops::cm_ep_conn_notify)>,
    .ep_destroy               = ep::ep_destroy,
    .ep_get_address           = compat::unsupported<decltype(Ops::ep_get_address)>,
    .ep_connect_to_ep         = compat::unsupported<decltype(Ops::ep_connect_to_ep)>,
    .iface_accept             = compat::unsupported<decltype(Ops::iface_accept)>,
    .iface_reject             = compat::unsupported<decltype(Ops::iface_reject)>,
    .iface_flush              = iface_flush,
    .iface_fence              = iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = iface_progress,
    .iface_event_fd_get       = iface_event_fd_get,
    .iface_event_arm          = iface_event_arm,
    .iface_close              = iface_close,
    .iface_query              = iface_query,
    .iface_get_device_address = iface_get_device_address,
    .iface_get_address        = iface_get_address,
    .iface_is_reachable       = iface_is_reachable,
};

Iface *Iface::from(uct_iface_h iface)
{
    if ((iface == nullptr) || (iface->ops.iface_close != iface_close)) {
        return nullptr;
    }
    return from_unchecked(iface);
}

/* ------------------------------------------------------------------ setup */

/* What inline size the provider really grants (it may round down, or
 * refuse): a throw-away QP of the real shape tells. */
static size_t probe_max_inline(ibv_pd *pd, const wireup::QpShape &shape)
{
    for (uint32_t want = shape.max_inline_data;; want /= 2) {
        ibv_qp_init_attr attr    = {};
        attr.send_cq             = shape.send_cq;
        attr.recv_cq             = shape.recv_cq;
        attr.srq                 = shape.srq;
        attr.qp_type             = IBV_QPT_RC;
        attr.cap.max_send_wr     = shape.max_send_wr;
        attr.cap.max_send_sge    = shape.max_send_sge;
        attr.cap.max_recv_sge    = 1;
        attr.cap.max_inline_data = want;
        ibv_qp *qp               = ibv_create_qp(pd, &attr);
        if (qp != nullptr) {
            const size_t got = std::min(attr.cap.max_inline_data, 1024u);
            ibv_destroy_qp(qp);
            return got;
        }
        if (want == 0) {
            throw_errno("ibv_create_qp (probing the QP shape)", errno);
        }
    }
}

/* The address the listener binds: IPv4 first, then a non-link-local IPv6
 * (a link-local one would need the peer to know our interface index). */
static sockaddr_storage pick_listen_address(const std::string &device, unsigned port)
{
    const auto addresses = verbs::scan_cm_addresses();
    auto it              = addresses.find(verbs::PortKey(device, port));
    if (it == addresses.end()) {
        throw Error(UCS_ERR_NO_DEVICE, "no IP address that rdma_cm can bind to " +
                                       verbs::resource_name(device, port));
    }
    std::vector<sockaddr_storage> candidates;
    for (const auto &text : it->second) {
        sockaddr_storage ss = {};
        auto *sin           = reinterpret_cast<sockaddr_in *>(&ss);
        auto *sin6          = reinterpret_cast<sockaddr_in6 *>(&ss);
        if (inet_pton(AF_INET, text.c_str(), &sin->sin_addr) == 1) {
            sin->sin_family = AF_INET;
            return ss;
        }
        if ((inet_pton(AF_INET6, text.c_str(), &sin6->sin6_addr) == 1) &&
            !IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) {
            sin6->sin6_family = AF_INET6;
            candidates.push_back(ss);
        }
    }
    if (candidates.empty()) {
        throw Error(UCS_ERR_NO_DEVICE, "only link-local addresses on " +
                                       verbs::resource_name(device, port));
    }
    return candidates.front();
}

Iface::Iface(md::MemoryDomain *md, uct_worker_h worker, const uct_iface_params_t *params,
             const Config &config)
    : handle_{}, md_(md), worker_(worker),
      async_(compat::worker_async(worker))
{
    if (!(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE) ||
        !(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        throw Error(UCS_ERR_UNSUPPORTED, "only device open mode is supported");
    }
    resource_name_ = params->mode.device.dev_name;
    const auto [device, port] = verbs::parse_resource_name(resource_name_);
    if (device != md->device_name()) {
        throw Error(UCS_ERR_NO_DEVICE, "transport device '" + resource_name_ +
                                       "' does not belong to memory domain " +
                                       md->device_name());
    }
    port_num_ = port;

    const ibv_device_attr dev_attr = query_device();
    configure(config, dev_attr, params);
    open_event_fds();
    create_queues(config, dev_attr);
    create_pools(config);
    open_listener(device, port, config);
    start(params, config);
    ucs_debug("xqp: %s listening on %s", resource_name_.c_str(), to_string(listen_addr_).c_str());
}

/* the port's bandwidth; the device's limits */
ibv_device_attr Iface::query_device()
{
    ibv_port_attr port_attr = {};
    int ret = ibv_query_port(md_->context(), static_cast<uint8_t>(port_num_), &port_attr);
    if (ret != 0) {
        throw Error(UCS_ERR_NO_DEVICE, errno_message("ibv_query_port(" + resource_name_ + ")", ret));
    }
    bandwidth_ = verbs::port_bandwidth(port_attr.active_width, port_attr.active_speed);
    if (bandwidth_ <= 0) {
        /* a code newer than this table: assume 1x SDR rather than nothing */
        ucs_debug("xqp: %s reports unknown width %u / speed %u", resource_name_.c_str(),
                  port_attr.active_width, port_attr.active_speed);
        bandwidth_ = verbs::port_bandwidth(1, 1);
    }

    ibv_device_attr dev_attr = {};
    ret = ibv_query_device(md_->context(), &dev_attr);
    if (ret != 0) {
        throw Error(UCS_ERR_NO_DEVICE, errno_message("ibv_query_device", ret));
    }
    return dev_attr;
}

/* the options, checked: bad values are errors naming the variable */
void Iface::configure(const Config &config, const ibv_device_attr &dev_attr,
                      const uct_iface_params_t *params)
{
    wireup_config_.ece              = ece_policy_from_config(config);
    wireup_config_.addr_timeout_ms  = to_timeout_ms("ADDR_RESOLVE_TIMEOUT",
                                                    config.addr_resolve_timeout);
    wireup_config_.route_timeout_ms = to_timeout_ms("ROUTE_RESOLVE_TIMEOUT",
                                                    config.route_resolve_timeout);
    wireup_config_.max_retries      = config.connect_retries;
    wireup_config_.connect_window   = config.connect_window;
    wireup_config_.share            = (config.share != 0);
    wireup_config_.connect_timeout_s = to_timeout_ms("CONNECT_TIMEOUT", config.connect_timeout) / 1000.0;
    if (!(config.peer_timeout >= 0)) {
        throw config_error("PEER_TIMEOUT", std::to_string(config.peer_timeout) + "s",
                           "must be a time (0 or inf: no deadline)");
    }
    if ((config.peer_timeout > 0) && std::isfinite(config.peer_timeout)) {
        peer_timeout_ = std::max<ucs_time_t>(1, ucs_time_from_sec(config.peer_timeout));
        watch_period_ = std::max<ucs_time_t>(1, peer_timeout_ / 4);
    }
    std::random_device rd;
    wireup_config_.iface_uuid  = (uint64_t(rd()) << 32) | rd();
    wireup_config_.max_am_size = 1;
    wireup_config_.responder_resources = static_cast<uint8_t>(std::min(dev_attr.max_qp_rd_atom, 16));
    wireup_config_.initiator_depth     = static_cast<uint8_t>(std::min(dev_attr.max_qp_init_rd_atom, 16));

    if ((config.tx_queue_len == 0) || (config.tx_queue_len > 16384)) {
        throw config_error("TX_QUEUE_LEN", std::to_string(config.tx_queue_len), "must be 1..16384");
    }
    if ((config.rx_queue_len < 16) || (config.rx_queue_len > static_cast<unsigned>(dev_attr.max_srq_wr))) {
        throw config_error("RX_QUEUE_LEN", std::to_string(config.rx_queue_len),
                           "must be 16.." + std::to_string(dev_attr.max_srq_wr));
    }
    const int rx_max_bufs = config.bare.rx_max_bufs;
    if ((rx_max_bufs != -1) &&
        ((rx_max_bufs < 0) || (static_cast<unsigned>(rx_max_bufs) < config.rx_queue_len))) {
        throw config_error("RX_MAX_BUFS", std::to_string(rx_max_bufs),
                           "must be -1 (no limit) or at least UCX_XQP_RX_QUEUE_LEN (" +
                                   std::to_string(config.rx_queue_len) + ")");
    }
    if ((config.seg_size < 256) || (config.seg_size > (1u << 30))) {
        throw config_error("SEG_SIZE", std::to_string(config.seg_size), "must be 256 bytes..1G");
    }
    tx_queue_len_  = config.tx_queue_len;
    /* a quarter of the send queue (and of the interface's requests in
     * flight, below) at most, so that slots come back long before they run
     * out; 64 like UCX's verbs transports */
    tx_moderation_ = std::max(1u, std::min({64u, config.tx_queue_len / 4,
                                            config.rx_queue_len / 4}));
    seg_size_      = config.seg_size;
    atomics_       = (dev_attr.atomic_cap != IBV_ATOMIC_NONE);
    max_send_sge_  = static_cast<uint32_t>(std::min(dev_attr.max_sge, 8));
    rx_headroom_   = (params->field_mask & UCT_IFACE_PARAM_FIELD_RX_HEADROOM) ? params->rx_headroom : 0;
    rx_layout(params);
}

/* the completion channel, the wakeup eventfd, the deadline's timerfd and
 * the epoll set that uct_iface_event_fd_get hands out */
void Iface::open_event_fds()
{
    comp_channel_.reset(ibv_create_comp_channel(md_->context()));
    if (!comp_channel_) {
        throw_errno("ibv_create_comp_channel(" + resource_name_ + ")", errno);
    }
    const int fl = fcntl(comp_channel_->fd, F_GETFL);
    if ((fl < 0) || (fcntl(comp_channel_->fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
        throw_errno("fcntl(O_NONBLOCK) on the completion channel", errno);
    }
    wakeup_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (wakeup_fd_.get() < 0) {
        throw_errno("eventfd", errno);
    }
    event_fd_.reset(epoll_create1(EPOLL_CLOEXEC));
    if (event_fd_.get() < 0) {
        throw_errno("epoll_create1", errno);
    }
    watch_fd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (watch_fd_.get() < 0) {
        throw_errno("timerfd_create", errno);
    }
    for (const int fd : {comp_channel_->fd, wakeup_fd_.get(), watch_fd_.get()}) {
        epoll_event ev = {};
        ev.events      = EPOLLIN;
        ev.data.fd     = fd;
        if (epoll_ctl(event_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
            throw_errno("epoll_ctl(ADD)", errno);
        }
    }
}

/* the CQs, the TxOps and the shared receive queue */
void Iface::create_queues(const Config &config, const ibv_device_attr &dev_attr)
{
    /* every signaled send takes a TxOp, so the send CQ cannot overflow */
    const int send_cq_len = std::min(dev_attr.max_cqe, 4096);
    const int recv_cq_len = std::min(dev_attr.max_cqe, static_cast<int>(config.rx_queue_len));
    send_cq_.reset(ibv_create_cq(md_->context(), send_cq_len, nullptr, comp_channel_.get(), 0));
    recv_cq_.reset(ibv_create_cq(md_->context(), recv_cq_len, nullptr, comp_channel_.get(), 0));
    if (!send_cq_ || !recv_cq_) {
        throw_errno("ibv_create_cq(" + resource_name_ + ")", errno);
    }
    ops_.resize(static_cast<size_t>(send_cq_len));
    /* requests in flight on all QPs: no more than the send CQ holds, and no
     * more than a peer like this interface can receive at once (a burst
     * beyond its shared receive queue makes the HCAs retry on
     * receiver-not-ready, and rxe retransmits everything after the refused
     * message) */
    tx_spare_ = static_cast<int64_t>(std::min<uint64_t>(send_cq_len, config.rx_queue_len)) -
                static_cast<int64_t>(tx_moderation_);
    tx_spare_idle_ = tx_spare_;
    for (auto &op : ops_) {
        put_op(&op);
    }

    ibv_srq_init_attr srq_attr = {};
    srq_attr.attr.max_wr       = config.rx_queue_len;
    srq_attr.attr.max_sge      = 1;
    srq_.reset(ibv_create_srq(md_->pd(), &srq_attr));
    if (!srq_) {
        throw_errno("ibv_create_srq(" + resource_name_ + ")", errno);
    }
}

/* bounce and receive buffers near the device; the receive queue filled */
void Iface::create_pools(const Config &config)
{
    const auto &nodes = md_->locality().whole_machine ? std::vector<unsigned>{} :
                                                       md_->locality().numa_nodes;
    tx_pool_ = std::make_unique<BufferPool>(md_->pd(), config.tx_queue_len * 2, seg_size_, nodes,
                                            "bounce buffers");
    /* receive buffer: [pad][release descriptor pointer][rx headroom][payload] */
    rx_pool_ = std::make_unique<BufferPool>(md_->pd(), config.rx_queue_len,
                                            rx_data_offset_ + seg_size_, nodes, "receive buffers",
                                            rx_align_);
    ucs_debug("xqp: %s buffers: bounce %s, receive %s", resource_name_.c_str(),
              tx_pool_->placement().c_str(), rx_pool_->placement().c_str());
    recv_desc_.super.cb = release_desc;
    recv_desc_.iface    = this;
    rx_queue_len_       = config.rx_queue_len;
    rx_max_bufs_        = (config.bare.rx_max_bufs < 0) ? SIZE_MAX : static_cast<size_t>(config.bare.rx_max_bufs);
    rx_batch_len_       = std::clamp(config.rx_queue_len / 8, 1u, kRxBatchMax);
    init_rx_batch();
    for (size_t i = 0; i < rx_queue_len_; ++i) {
        post_rx(take_rx_buffer());
    }
    post_rx_batch();
}

/* the data QPs' shape (and the inline size the provider really grants),
 * and the rdma_cm listener on the port's address */
void Iface::open_listener(const std::string &device, unsigned port, const Config &config)
{
    wireup::QpShape shape;
    shape.pd              = md_->pd();
    shape.send_cq         = send_cq_.get();
    shape.recv_cq         = recv_cq_.get();
    shape.srq             = srq_.get();
    shape.max_send_wr     = config.tx_queue_len;
    shape.max_send_sge    = max_send_sge_;
    shape.max_inline_data = static_cast<uint32_t>(std::min<size_t>(config.max_inline, 1024));
    max_inline_           = probe_max_inline(md_->pd(), shape);

    /* the listener */
    channel_.reset(rdma_create_event_channel());
    if (!channel_) {
        throw_errno("rdma_create_event_channel", errno);
    }
    const int flags = fcntl(channel_->fd, F_GETFL);
    if ((flags < 0) || (fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0)) {
        throw_errno("fcntl(O_NONBLOCK) on the rdma_cm channel", errno);
    }
    shape.max_inline_data = static_cast<uint32_t>(max_inline_);
    cm_ = std::make_unique<wireup::RdmaCmOps>(channel_.get(), shape);

    listen_addr_ = pick_listen_address(device, port);
    rdma_cm_id *raw = nullptr;
    if (rdma_create_id(channel_.get(), &raw, this, RDMA_PS_TCP) != 0) {
        throw_errno("rdma_create_id", errno);
    }
    listener_.reset(raw);
    if (rdma_bind_addr(listener_.get(), reinterpret_cast<sockaddr *>(&listen_addr_)) != 0) {
        throw_errno("rdma_bind_addr(" + to_string(listen_addr_) + ")", errno);
    }
    if ((listener_->verbs == nullptr) || (listener_->verbs != md_->context())) {
        throw Error(UCS_ERR_NO_DEVICE, to_string(listen_addr_) + " is not served by " +
                                       md_->device_name());
    }
    if (rdma_listen(listener_.get(), 1024) != 0) {
        throw_errno("rdma_listen", errno);
    }
    const uint16_t listen_port = rdma_get_src_port(listener_.get());
    if (listen_addr_.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in *>(&listen_addr_)->sin_port = listen_port;
    } else {
        reinterpret_cast<sockaddr_in6 *>(&listen_addr_)->sin6_port = listen_port;
    }
    wireup_config_.listener = wireup::listener_key(listen_addr_); /* what hellos carry */
    conns_ = std::make_unique<ConnTable>(*cm_, ece_provider_, wireup_config_, resource_name_);
}

/* the UCT base interface, then the async handler of rdma_cm events (the
 * connection timer is armed while connections are attempted) */
void Iface::start(const uct_iface_params_t *params, const Config &config)
{
    handle_.owner = this;
    auto *internal_ops  = compat::iface_internal_ops<iface_is_reachable_why, iface_is_same_device,
                                                     ep::ep_is_connected>();
    ucs_status_t status = UCS_CLASS_INIT(uct_base_iface_t, &handle_.super, &iface_ops,
                                         internal_ops, md_->handle(), worker_, params, &config.super
                                         XQP_UCX_IFACE_STATS_ARGS(params, resource_name_.c_str()));
    if (status != UCS_OK) {
        throw Error(status, "cannot initialize the base interface");
    }

    const bool async_thread = (async_->mode == UCS_ASYNC_MODE_THREAD_SPINLOCK) ||
                              (async_->mode == UCS_ASYNC_MODE_THREAD_MUTEX);
    handler_async_ = async_thread ? nullptr : async_;
    status = ucs_async_set_event_handler(async_->mode, channel_->fd, UCS_EVENT_SET_EVREAD,
                                         cm_event_handler, this, handler_async_);
    if (status != UCS_OK) {
        UCS_CLASS_CLEANUP(uct_base_iface_t, &handle_.super);
        throw Error(status, "cannot watch the rdma_cm channel");
    }
    async_handler_ = true;
}

Iface::~Iface()
{
    if (timer_id_ >= 0) {
        ucs_async_remove_handler(timer_id_, 1);
    }
    if (async_handler_) {
        ucs_async_remove_handler(channel_->fd, 1);
    }
    {
        WireupGuard guard(*this);
        conns_->clear();
    }
    listener_.reset();
    uct_base_iface_progress_disable(handle(), UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    /* every QP using the SRQ is gone with the connections and eps;
     * the SRQ, pools and CQs go with the members */
    UCS_CLASS_CLEANUP(uct_base_iface_t, &handle_.super);
}

/* ------------------------------------------------------------------ attributes */

void Iface::query(uct_iface_attr_t *attr)
{
    uct_base_iface_query(&handle_.super, attr);
    attr->device_addr_len = kDeviceAddrLen;
    attr->iface_addr_len  = kIfaceAddrLen;
    attr->ep_addr_len     = 0;
    attr->cap.flags = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_PENDING |
                      UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                      UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_BCOPY |
                      UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_AM_SHORT |
                      UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_AM_ZCOPY |
                      UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP | UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_FD;
    if (atomics_) {
        /* what verbs offer on every provider with atomics: 64-bit fetch-add
         * and compare-swap; UCP emulates the rest */
        attr->cap.flags |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic64.op_flags  = UCS_BIT(UCT_ATOMIC_OP_ADD);
        attr->cap.atomic64.fop_flags = UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }
    attr->cap.put.max_short       = max_inline_;
    attr->cap.put.max_bcopy       = seg_size_;
    attr->cap.put.min_zcopy       = 0;
    attr->cap.put.max_zcopy       = 1ul << 30;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu       = 1;
    attr->cap.put.max_iov         = max_send_sge_;
    attr->cap.get.max_bcopy       = seg_size_;
    attr->cap.get.min_zcopy       = 0;
    attr->cap.get.max_zcopy       = 1ul << 30;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu       = 1;
    attr->cap.get.max_iov         = max_send_sge_;
    /* header and payload together: no transport header travels with them */
    attr->cap.am.max_short        = max_inline_;
    attr->cap.am.max_bcopy        = seg_size_;
    attr->cap.am.min_zcopy        = 0;
    attr->cap.am.max_zcopy        = seg_size_;
    attr->cap.am.opt_zcopy_align  = 1;
    attr->cap.am.align_mtu        = 1;
    attr->cap.am.max_hdr          = max_am_hdr();
    attr->cap.am.max_iov          = max_send_sge_ - 1;
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared    = bandwidth_;
    attr->latency             = ucs_linear_func_make(700e-9, 0);
    attr->overhead            = 75e-9;
    attr->priority            = 0;
}

void Iface::get_device_address(uint8_t *addr) const
{
    pack_device_address(reinterpret_cast<const sockaddr *>(&listen_addr_), addr);
}

void Iface::get_address(uint8_t *addr) const
{
    pack_iface_address(reinterpret_cast<const sockaddr *>(&listen_addr_), addr);
}

bool Iface::is_reachable(const uint8_t *dev_addr, const uint8_t *iface_addr,
                         std::string *why) const
{
    std::string bad;
    const auto dst = unpack_address(dev_addr, iface_addr, &bad);
    if (!dst) {
        if (why != nullptr) {
            *why = "xqp: not an xqp address: " + bad;
        }
        return false;
    }
    /* rdma_cm resolves within the address family the listener uses */
    if (dst->ss_family != listen_addr_.ss_family) {
        if (why != nullptr) {
            *why = std::string("xqp: the peer listens on ") +
                   ((dst->ss_family == AF_INET6) ? "IPv6" : "IPv4") + ", this interface on " +
                   ((listen_addr_.ss_family == AF_INET6) ? "IPv6" : "IPv4");
        }
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ open */

static ucs_status_t iface_open(uct_md_h md, uct_worker_h worker,
                               const uct_iface_params_t *params,
                               const uct_iface_config_t *tl_config, uct_iface_h *iface_p)
{
    return boundary("iface_open", [&] {
        auto iface = std::make_unique<Iface>(md::MemoryDomain::from(md), worker, params,
                                             *reinterpret_cast<const Config *>(tl_config));
        *iface_p = iface.release()->handle();
        return UCS_OK;
    });
}

static ucs_status_t query_devices(uct_md_h uct_md, uct_tl_device_resource_t **devices_p,
                                  unsigned *num_devices_p)
{
    return boundary("query_devices", [&] {
        auto *md             = md::MemoryDomain::from(uct_md);
        const auto addresses = verbs::scan_cm_addresses();
        std::vector<std::string> names;
        for (const auto &port : verbs::scan_ports(md->context(), addresses)) {
            const auto name = verbs::resource_name(md->device_name(), port.port);
            if (!port.verdict.usable) {
                ucs_debug("xqp: skipping %s: %s", name.c_str(), port.verdict.reason.c_str());
                continue;
            }
            ucs_debug("xqp: %s reachable through rdma_cm at %s", name.c_str(),
                      port.facts.cm_addresses.front().c_str());
            names.push_back(name);
        }

        uct_tl_device_resource_t *devices = nullptr;
        if (!names.empty()) {
            devices = static_cast<uct_tl_device_resource_t *>(
                    ucs_calloc(names.size(), sizeof(*devices), "xqp tl devices"));
            if (devices == nullptr) {
                throw std::bad_alloc();
            }
        }
        for (size_t i = 0; i < names.size(); ++i) {
            ucs_strncpy_zero(devices[i].name, names[i].c_str(), sizeof(devices[i].name));
            devices[i].type       = UCT_DEVICE_TYPE_NET;
            devices[i].sys_device = md->sys_device();
        }
        *devices_p     = devices;
        *num_devices_p = static_cast<unsigned>(names.size());
        return UCS_OK;
    });
}

uct_tl_t tl = {
    .name          = "xqp",
    .query_devices = query_devices,
    .iface_open    = iface_open,
    .config        = compat::config_entry("xqp transport", "XQP_", config_table, sizeof(Config)),
    .list          = {},
};

} // namespace xqp::iface
