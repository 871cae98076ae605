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
#include <unistd.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace xqp::iface {

/* indexed by wireup::EceMode */
static const char *ece_mode_names[] = {"off", "auto", "on", NULL};
static_assert(static_cast<int>(wireup::EceMode::On) == 2, "ece_mode_names follows EceMode");

ucs_config_field_t config_table[] = {
    {"", "", NULL, ucs_offsetof(Config, super), UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"ECE", "auto",
     "Negotiate ECE (Enhanced Connection Establishment) options with the peer\n"
     "through rdma_cm while connecting:\n"
     " off  - never query, set or send ECE\n"
     " auto - use the options both sides and both providers support; fall back\n"
     "        to no ECE when a provider lacks it or the peer sends none\n"
     " on   - like auto, but the options in UCX_XQP_ECE_REQUIRED must be agreed:\n"
     "        otherwise the passive side rejects (rdma_reject_ece) and the\n"
     "        active side fails with an error naming the missing options",
     ucs_offsetof(Config, ece_mode), UCS_CONFIG_TYPE_ENUM(ece_mode_names)},

    {"ECE_REQUIRED", "0",
     "ECE option bits (a 32-bit mask, e.g. 0x1) that must be agreed with UCX_XQP_ECE=on.",
     ucs_offsetof(Config, ece_required), UCS_CONFIG_TYPE_STRING},

    {"ECE_DESIRED", "0xffffffff",
     "ECE option bits (a 32-bit mask) offered to and accepted from the peer when\n"
     "both providers support them.",
     ucs_offsetof(Config, ece_desired), UCS_CONFIG_TYPE_STRING},

    {"ECE_LOCAL", "auto",
     "The local ECE to advertise: 'auto' asks the provider (ibv_query_ece);\n"
     "VENDOR:OPTIONS (e.g. 0x15b3:0x1) advertises these instead, for\n"
     "interoperability tests and providers that cannot report ECE.",
     ucs_offsetof(Config, ece_local), UCS_CONFIG_TYPE_STRING},

    {"ADDR_RESOLVE_TIMEOUT", "2s",
     "How long rdma_resolve_addr may take for one connection attempt.",
     ucs_offsetof(Config, addr_resolve_timeout), UCS_CONFIG_TYPE_TIME},

    {"ROUTE_RESOLVE_TIMEOUT", "2s",
     "How long rdma_resolve_route may take for one connection attempt.",
     ucs_offsetof(Config, route_resolve_timeout), UCS_CONFIG_TYPE_TIME},

    {"CONNECT_TIMEOUT", "10s",
     "How long one connection attempt (address and route resolution, then\n"
     "the CM exchange) may take before it is abandoned and retried; a peer\n"
     "that never answers is reported after (retries + 1) times this.",
     ucs_offsetof(Config, connect_timeout), UCS_CONFIG_TYPE_TIME},

    {"CONNECT_RETRIES", "3",
     "How many times a failed connection attempt is retried, each time with a\n"
     "new rdma_cm id and QP. A reject because of ECE options is not retried.",
     ucs_offsetof(Config, connect_retries), UCS_CONFIG_TYPE_UINT},

    {"TX_QUEUE_LEN", "256",
     "Send queue length of each data QP.",
     ucs_offsetof(Config, tx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"RX_QUEUE_LEN", "1024",
     "Receive buffers posted to the interface's shared receive queue. All\n"
     "connections of the interface share them; a sender that finds none waits\n"
     "(RNR retry) instead of losing the message.",
     ucs_offsetof(Config, rx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"SEG_SIZE", "8k",
     "Size of a bounce/receive buffer: the largest active message, and the\n"
     "largest buffered put/get.",
     ucs_offsetof(Config, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"MAX_INLINE", "128",
     "Largest payload sent inline in the work request (short put/AM).",
     ucs_offsetof(Config, max_inline), UCS_CONFIG_TYPE_MEMUNITS},

    {}
};

static Error config_error(const char *var, const std::string &value, const std::string &why)
{
    return Error(UCS_ERR_INVALID_PARAM,
                 std::string("invalid UCX_XQP_") + var + "='" + value + "': " + why);
}

/* a 32-bit number, decimal or 0x-hex, nothing else */
static bool parse_u32(const std::string &text, uint32_t *value)
{
    if (text.empty() || (text[0] == '-') || (text[0] == '+') || std::isspace(text[0])) {
        return false;
    }
    errno     = 0;
    char *end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
    if ((errno != 0) || (end == text.c_str()) || (*end != '\0') || (v > UINT32_MAX)) {
        return false;
    }
    *value = static_cast<uint32_t>(v);
    return true;
}

static uint32_t parse_mask(const char *var, const char *text)
{
    const std::string value = (text != nullptr) ? text : "";
    uint32_t mask;
    if (!parse_u32(value, &mask)) {
        throw config_error(var, value, "expected a 32-bit option mask such as 0x1");
    }
    return mask;
}

wireup::EcePolicy ece_policy_from_config(const Config &config)
{
    wireup::EcePolicy policy;
    policy.mode     = static_cast<wireup::EceMode>(config.ece_mode);
    policy.required = parse_mask("ECE_REQUIRED", config.ece_required);
    policy.desired  = parse_mask("ECE_DESIRED", config.ece_desired);

    const std::string local = (config.ece_local != nullptr) ? config.ece_local : "";
    if (local != "auto") {
        const auto colon = local.find(':');
        wireup::Ece ece;
        if ((colon == std::string::npos) ||
            !parse_u32(local.substr(0, colon), &ece.vendor_id) ||
            !parse_u32(local.substr(colon + 1), &ece.options)) {
            throw config_error("ECE_LOCAL", local,
                               "expected 'auto' or VENDOR:OPTIONS such as 0x15b3:0x1");
        }
        if (ece.vendor_id == 0) {
            throw config_error("ECE_LOCAL", local,
                               "vendor 0 means no ECE (rdma_set_local_ece refuses it)");
        }
        policy.local_override = ece;
    }
    return policy;
}

static int to_timeout_ms(const char *var, double seconds)
{
    if (!(seconds > 0) || (seconds > INT_MAX / 1000.0)) {
        throw config_error(var, std::to_string(seconds) + "s", "must be positive");
    }
    return std::max(1, static_cast<int>(seconds * 1000.0));
}

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

static int iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                              const uct_iface_addr_t *iface_addr)
{
    return Iface::from_unchecked(tl_iface)->is_reachable(
            reinterpret_cast<const uint8_t *>(dev_addr),
            reinterpret_cast<const uint8_t *>(iface_addr));
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

    /* configuration: bad values are errors naming the variable */
    wireup_config_.ece              = ece_policy_from_config(config);
    wireup_config_.addr_timeout_ms  = to_timeout_ms("ADDR_RESOLVE_TIMEOUT",
                                                    config.addr_resolve_timeout);
    wireup_config_.route_timeout_ms = to_timeout_ms("ROUTE_RESOLVE_TIMEOUT",
                                                    config.route_resolve_timeout);
    wireup_config_.max_retries      = config.connect_retries;
    wireup_config_.connect_timeout_s = to_timeout_ms("CONNECT_TIMEOUT", config.connect_timeout) / 1000.0;
    std::random_device rd;
    wireup_config_.iface_uuid  = (uint64_t(rd()) << 32) | rd();
    wireup_config_.max_am_size = 1;

    ibv_port_attr port_attr = {};
    int ret = ibv_query_port(md->context(), static_cast<uint8_t>(port), &port_attr);
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
    ret = ibv_query_device(md->context(), &dev_attr);
    if (ret != 0) {
        throw Error(UCS_ERR_NO_DEVICE, errno_message("ibv_query_device", ret));
    }
    wireup_config_.responder_resources = static_cast<uint8_t>(std::min(dev_attr.max_qp_rd_atom, 16));
    wireup_config_.initiator_depth     = static_cast<uint8_t>(std::min(dev_attr.max_qp_init_rd_atom, 16));

    /* data path resources */
    if ((config.tx_queue_len == 0) || (config.tx_queue_len > 16384)) {
        throw config_error("TX_QUEUE_LEN", std::to_string(config.tx_queue_len), "must be 1..16384");
    }
    if ((config.rx_queue_len < 16) || (config.rx_queue_len > static_cast<unsigned>(dev_attr.max_srq_wr))) {
        throw config_error("RX_QUEUE_LEN", std::to_string(config.rx_queue_len),
                           "must be 16.." + std::to_string(dev_attr.max_srq_wr));
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

    comp_channel_.reset(ibv_create_comp_channel(md->context()));
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
    for (const int fd : {comp_channel_->fd, wakeup_fd_.get()}) {
        epoll_event ev = {};
        ev.events      = EPOLLIN;
        ev.data.fd     = fd;
        if (epoll_ctl(event_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
            throw_errno("epoll_ctl(ADD)", errno);
        }
    }
    /* every signaled send takes a TxOp, so the send CQ cannot overflow */
    const int send_cq_len = std::min(dev_attr.max_cqe, 4096);
    const int recv_cq_len = std::min(dev_attr.max_cqe, static_cast<int>(config.rx_queue_len));
    send_cq_.reset(ibv_create_cq(md->context(), send_cq_len, nullptr, comp_channel_.get(), 0));
    recv_cq_.reset(ibv_create_cq(md->context(), recv_cq_len, nullptr, comp_channel_.get(), 0));
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
    for (auto &op : ops_) {
        put_op(&op);
    }

    ibv_srq_init_attr srq_attr = {};
    srq_attr.attr.max_wr       = config.rx_queue_len;
    srq_attr.attr.max_sge      = 1;
    srq_.reset(ibv_create_srq(md->pd(), &srq_attr));
    if (!srq_) {
        throw_errno("ibv_create_srq(" + resource_name_ + ")", errno);
    }

    const auto &nodes = md->locality().whole_machine ? std::vector<unsigned>{} :
                                                       md->locality().numa_nodes;
    tx_pool_ = std::make_unique<BufferPool>(md->pd(), config.tx_queue_len * 2, seg_size_, nodes,
                                            "bounce buffers");
    /* receive buffer: [pad][release descriptor pointer][rx headroom][payload] */
    rx_pool_ = std::make_unique<BufferPool>(md->pd(), config.rx_queue_len,
                                            rx_data_offset_ + seg_size_, nodes, "receive buffers",
                                            rx_align_);
    ucs_debug("xqp: %s buffers: bounce %s, receive %s", resource_name_.c_str(),
              tx_pool_->placement().c_str(), rx_pool_->placement().c_str());
    recv_desc_.super.cb = release_desc;
    recv_desc_.iface    = this;
    rx_queue_len_       = config.rx_queue_len;
    rx_batch_len_       = std::clamp(config.rx_queue_len / 8, 1u, kRxBatchMax);
    for (size_t i = 0; i < rx_queue_len_; ++i) {
        post_rx(rx_pool_->get());
    }
    post_rx_batch();

    wireup::QpShape shape;
    shape.pd              = md->pd();
    shape.send_cq         = send_cq_.get();
    shape.recv_cq         = recv_cq_.get();
    shape.srq             = srq_.get();
    shape.max_send_wr     = config.tx_queue_len;
    shape.max_send_sge    = max_send_sge_;
    shape.max_inline_data = static_cast<uint32_t>(std::min<size_t>(config.max_inline, 1024));
    max_inline_           = probe_max_inline(md->pd(), shape);

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
    if ((listener_->verbs == nullptr) || (listener_->verbs != md->context())) {
        throw Error(UCS_ERR_NO_DEVICE, to_string(listen_addr_) + " is not served by " +
                                       md->device_name());
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

    handle_.owner = this;
    auto *internal_ops  = compat::iface_internal_ops<iface_is_reachable, iface_is_same_device,
                                                     ep::ep_is_connected>();
    ucs_status_t status = UCS_CLASS_INIT(uct_base_iface_t, &handle_.super, &iface_ops,
                                         internal_ops, md->handle(), worker, params, &config.super
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
    /* connection attempts that hang (a peer that never answers) */
    status = ucs_async_add_timer(async_->mode, ucs_time_from_sec(0.25), timer_handler, this,
                                 handler_async_, &timer_id_);
    if (status != UCS_OK) {
        ucs_async_remove_handler(channel_->fd, 1);
        async_handler_ = false;
        UCS_CLASS_CLEANUP(uct_base_iface_t, &handle_.super);
        throw Error(status, "cannot add the connection timer");
    }
    ucs_debug("xqp: %s listening on %s", resource_name_.c_str(), to_string(listen_addr_).c_str());
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
        passive_.clear();
    }
    listener_.reset();
    uct_base_iface_progress_disable(handle(), UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    /* every QP using the SRQ is gone with the passive connections and eps;
     * the SRQ, pools and CQs go with the members */
    UCS_CLASS_CLEANUP(uct_base_iface_t, &handle_.super);
}

/* ------------------------------------------------------------------ rdma_cm events */

void Iface::cm_event_handler(int, ucs_event_set_types_t, void *arg)
{
    auto *iface = static_cast<Iface *>(arg);
    WireupGuard guard(*iface);
    iface->progress_cm_events();
}

void Iface::timer_handler(int, ucs_event_set_types_t, void *arg)
{
    /* on the async thread, like the rdma_cm events */
    auto *iface      = static_cast<Iface *>(arg);
    WireupGuard guard(*iface);
    const double now = ucs_time_to_sec(ucs_get_time());
    for (auto *ep : iface->eps_) {
        ep->check_timeout(now);
    }
}

void Iface::progress_cm_events()
{
    /* runs with the wireup lock held */
    rdma_cm_event *raw = nullptr;
    while (rdma_get_cm_event(channel_.get(), &raw) == 0) {
        wireup::CmEvent event;
        event.type   = raw->event;
        event.status = raw->status;
        event.id     = raw->id;
        if ((raw->param.conn.private_data != nullptr) && (raw->param.conn.private_data_len > 0)) {
            const auto *data = static_cast<const uint8_t *>(raw->param.conn.private_data);
            event.private_data.assign(data, data + raw->param.conn.private_data_len);
        }
        const bool for_listener = listener_ && ((raw->listen_id == listener_.get()) ||
                                                (raw->id == listener_.get()));
        rdma_ack_cm_event(raw);

        try {
            if (event.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
                auto conn = std::make_unique<wireup::Connection>(*cm_, ece_provider_,
                                                                 wireup_config_, *this, 0);
                auto *c   = conn.get();
                passive_slots_.push_back(c);
                passive_infos_.push_back(xqp_wireup_info_t{});
                passive_.push_back(std::move(conn));
                c->accept_request(event);
                record_passive(*c);
            } else if (for_listener) {
                ucs_debug("xqp: %s listener: %s", resource_name_.c_str(),
                          rdma_event_str(event.type));
                if (event.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
                    on_device_removal();
                }
            } else if (event.id->context != nullptr) {
                auto *conn = static_cast<wireup::Connection *>(event.id->context);
                conn->on_event(event);
                if (!conn->active()) {
                    record_passive(*conn);
                }
            }
        } catch (const std::exception &e) {
            ucs_error("xqp: %s: handling %s: %s", resource_name_.c_str(),
                      rdma_event_str(event.type), e.what());
        }

        /* passive connections that ended are destroyed here, never inside
         * their own callbacks */
        for (auto it = passive_.begin(); it != passive_.end();) {
            const auto state = (*it)->state();
            if ((state == wireup::ConnState::Failed) || (state == wireup::ConnState::Closed)) {
                for (auto &slot : passive_slots_) {
                    if (slot == it->get()) {
                        slot = nullptr;
                    }
                }
                it = passive_.erase(it);
            } else {
                ++it;
            }
        }
    }
    if ((errno != EAGAIN) && (errno != EWOULDBLOCK)) {
        ucs_error("xqp: %s: rdma_get_cm_event: %s", resource_name_.c_str(), strerror(errno));
    }
}

void Iface::on_device_removal()
{
    /* rdma_cm(7): every cm_id on the device must go, and everything else
     * the process holds on it, before the kernel can finish the removal.
     * The listener goes now (no connection is accepted any more); the
     * connections fail with their own DEVICE_REMOVAL, and the rest goes
     * when the application closes the interface and the memory domain. */
    listener_.reset();
    ucs_error("xqp: %s: rdma device removed", resource_name_.c_str());
}

void fill_wireup_info(const wireup::Connection &conn, xqp_wireup_info_t *info)
{
    std::memset(info, 0, sizeof(*info));
    static_assert(int(wireup::ConnState::Closed) == XQP_CONN_CLOSED, "states match");
    info->state         = static_cast<int>(conn.state());
    info->attempts      = conn.attempts();
    info->status        = conn.status();
    info->reject_reason = conn.reject_reason();
    const auto &ece     = conn.ece_result();
    info->ece_sent      = {ece.sent.vendor_id, ece.sent.options};
    info->ece_received  = {ece.received.vendor_id, ece.received.options};
    info->ece_agreed    = {ece.agreed.vendor_id, ece.agreed.options};
    info->ece_applied   = ece.applied;
    info->ece_set_err   = ece.set_err;
    info->qp_num        = (conn.qp() != nullptr) ? conn.qp()->qp_num : 0;
    ucs_strncpy_zero(info->error, conn.error().c_str(), sizeof(info->error));
}

void Iface::record_passive(wireup::Connection &conn)
{
    for (size_t i = 0; i < passive_slots_.size(); ++i) {
        if (passive_slots_[i] == &conn) {
            const uint32_t qp_num = passive_infos_[i].qp_num;
            fill_wireup_info(conn, &passive_infos_[i]);
            if (passive_infos_[i].qp_num == 0) {
                passive_infos_[i].qp_num = qp_num; /* keep it after teardown */
            }
        }
    }
}

void Iface::on_established(wireup::Connection &conn)
{
    record_passive(conn);
}

void Iface::on_failed(wireup::Connection &conn)
{
    record_passive(conn);
    ucs_debug("xqp: %s: passive connection failed: %s", resource_name_.c_str(),
              conn.error().c_str());
}

void Iface::on_closed(wireup::Connection &conn)
{
    record_passive(conn);
}

void Iface::on_log(wireup::Connection &, const std::string &line)
{
    ucs_debug("xqp: %s: %s", resource_name_.c_str(), line.c_str());
}

int Iface::passive_count() const
{
    return static_cast<int>(passive_infos_.size());
}

int Iface::passive_info(unsigned index, xqp_wireup_info_t *info) const
{
    if (index >= passive_infos_.size()) {
        return -ENOENT;
    }
    *info = passive_infos_[index];
    return 0;
}

/* ------------------------------------------------------------------ data path */

void Iface::rx_layout(const uct_iface_params_t *params)
{
    /* UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT: received payloads start where
     * (data + align_offset) is a multiple of the alignment (uct.h); without
     * it, at a cache line (before the parameters were honoured, payloads
     * started 8 + headroom bytes after one) */
    const bool align_set  = params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT;
    const bool offset_set = params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
    size_t align_offset   = 0;
    if (align_set) {
        rx_align_ = params->am_alignment;
        if ((rx_align_ == 0) || !ucs_is_pow2(rx_align_)) {
            throw Error(UCS_ERR_INVALID_PARAM, "AM alignment " + std::to_string(rx_align_) +
                                                       " is not a power of two");
        }
        if (offset_set) {
            align_offset = params->am_align_offset % rx_align_;
        }
    } else if (offset_set) {
        throw Error(UCS_ERR_INVALID_PARAM, "AM alignment offset " +
                                                   std::to_string(params->am_align_offset) +
                                                   " given without an AM alignment");
    }
    /* the smallest offset after descriptor pointer and headroom at which
     * buffer + offset + align_offset is aligned (buffers start aligned) */
    const size_t min_offset = sizeof(void *) + rx_headroom_;
    /* rx_align_ is a power of two (checked above); plain arithmetic, as
     * UCX's ucs_align_up_pow2 moved between headers (ptr_arith.h, 1.14) */
    rx_data_offset_ = ((min_offset + align_offset + rx_align_ - 1) & ~(rx_align_ - 1)) - align_offset;
}

uint8_t *Iface::rx_data(uint8_t *buf) const
{
    return buf + rx_data_offset_;
}

void Iface::post_rx(uint8_t *buf)
{
    if (rx_posted_ + rx_batched_ >= rx_queue_len_) {
        rx_pool_->put(buf); /* the queue is full: a spare for later */
        return;
    }
    rx_batch_[rx_batched_++] = buf;
    if (rx_batched_ >= rx_batch_len_) {
        post_rx_batch();
    }
}

void Iface::post_rx_batch()
{
    const unsigned n = rx_batched_;
    if (n == 0) {
        return;
    }
    ibv_sge sge[kRxBatchMax];
    ibv_recv_wr wr[kRxBatchMax];
    for (unsigned i = 0; i < n; ++i) {
        uint8_t *buf = rx_batch_[i];
        /* uct_iface_release_desc finds the release descriptor just before
         * the descriptor (payload - headroom) */
        *reinterpret_cast<uct_recv_desc_t **>(rx_data(buf) - rx_headroom_ - sizeof(void *)) =
                &recv_desc_.super;
        sge[i].addr    = reinterpret_cast<uintptr_t>(rx_data(buf));
        sge[i].length  = static_cast<uint32_t>(seg_size_);
        sge[i].lkey    = rx_pool_->lkey(buf);
        wr[i].wr_id    = reinterpret_cast<uintptr_t>(buf);
        wr[i].next     = (i + 1 < n) ? &wr[i + 1] : nullptr;
        wr[i].sg_list  = &sge[i];
        wr[i].num_sge  = 1;
    }
    rx_batched_      = 0;
    ibv_recv_wr *bad = nullptr;
    const int ret    = ibv_post_srq_recv(srq_.get(), wr, &bad);
    if (ret != 0) {
        ucs_error("xqp: %s: ibv_post_srq_recv: %s", resource_name_.c_str(), strerror(ret));
        /* those before bad are posted; bad and those after it are not */
        const unsigned first = (bad != nullptr) ? static_cast<unsigned>(bad - wr) : 0;
        for (unsigned i = first; i < n; ++i) {
            rx_pool_->put(rx_batch_[i]);
        }
        rx_posted_ += first;
        return;
    }
    rx_posted_ += n;
}

void Iface::replace_kept_rx()
{
    uint8_t *buf = rx_pool_->get();
    if ((buf == nullptr) && rx_pool_->grow(std::max<size_t>(64, rx_queue_len_ / 4))) {
        buf = rx_pool_->get();
    }
    if (buf != nullptr) {
        post_rx(buf);
    }
}

void Iface::release_desc(uct_recv_desc_t *self, void *desc)
{
    /* desc = payload - rx_headroom */
    auto *iface = reinterpret_cast<RecvDesc *>(self)->iface;
    iface->post_rx(static_cast<uint8_t *>(desc) + iface->rx_headroom_ - iface->rx_data_offset_);
}

void Iface::handle_recv_completion(const ibv_wc &wc)
{
    auto *buf = reinterpret_cast<uint8_t *>(wc.wr_id);
    --rx_posted_;
    if (wc.status != IBV_WC_SUCCESS) {
        if (wc.status == IBV_WC_WR_FLUSH_ERR) {
            rx_pool_->put(buf);
            return;
        }
        /* the message is lost (its sender gets an error), not the buffer */
        ucs_error("xqp: %s: receive completion error: %s", resource_name_.c_str(),
                  ibv_wc_status_str(wc.status));
        post_rx(buf);
        return;
    }
    /* the AM id travels as immediate data, so the payload is all the user's */
    const uint32_t am_id = ntohl(wc.imm_data);
    if (!(wc.wc_flags & IBV_WC_WITH_IMM) || (am_id >= UCT_AM_ID_MAX)) {
        ucs_error("xqp: %s: dropped a malformed message (%u bytes, %s, id %u) from qp 0x%x",
                  resource_name_.c_str(), wc.byte_len,
                  (wc.wc_flags & IBV_WC_WITH_IMM) ? "with immediate" : "no immediate", am_id,
                  wc.src_qp);
        post_rx(buf);
        return;
    }
    uint8_t *data             = rx_data(buf);
    const ucs_status_t status = uct_iface_invoke_am(&handle_.super, static_cast<uint8_t>(am_id),
                                                    data, wc.byte_len, UCT_CB_PARAM_FLAG_DESC);
    if (status == UCS_OK) {
        post_rx(buf);
        return;
    }
    /* UCS_INPROGRESS: the handler kept the descriptor (UCP does for every
     * unexpected message); uct_iface_release_desc gives it back. Another
     * buffer takes its place now: held descriptors must not empty the
     * queue, or every sender waits on receiver-not-ready for good. */
    replace_kept_rx();
}

ep::Endpoint *Iface::ep_of_qp(uint32_t qp_num) const
{
    for (auto *ep : eps_) {
        if (ep->has_qp(qp_num)) {
            return ep;
        }
    }
    return nullptr;
}

void Iface::handle_send_completion(const ibv_wc &wc, ep::Endpoint *draining)
{
    handle_send_completion_inl(wc, draining);
}

UCS_F_ALWAYS_INLINE void Iface::handle_send_completion_inl(const ibv_wc &wc,
                                                           ep::Endpoint *draining)
{
    ucs_status_t status = UCS_OK;
    if (wc.status != IBV_WC_SUCCESS) {
        status = ((wc.status == IBV_WC_RETRY_EXC_ERR) || (wc.status == IBV_WC_RNR_RETRY_EXC_ERR)) ?
                         UCS_ERR_ENDPOINT_TIMEOUT :
                 (wc.status == IBV_WC_WR_FLUSH_ERR) ? UCS_ERR_CANCELED :
                                                      UCS_ERR_IO_ERROR;
    }
    if (ucs_unlikely(wc.wr_id & 1)) {
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
    if (ucs_unlikely(status != UCS_OK) && (op->ep != nullptr)) {
        status = op->ep->completion_error(status, wc.status);
    }
    finish_op(op, status);
}

void Iface::finish_op(TxOp *op, ucs_status_t status)
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
    ep::Endpoint *ep = op->ep;
    const uint64_t sn = op->sn;
    put_op(op);
    if (ep != nullptr) {
        ep->on_send_completion(sn);
    }
    /* bounce buffers and TxOps are shared by all endpoints: any of them may
     * have been waiting for the ones just returned */
    tx_returned_ = true;
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

unsigned Iface::handle_recv_completions(const ibv_wc *wcs, int n)
{
    for (int i = 0; i < n; ++i) {
        handle_recv_completion(wcs[i]);
    }
    return static_cast<unsigned>(n);
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
    if (ucs_unlikely(!stash_.empty())) {
        count += progress_stash();
    }

    /* receives first: in a ping-pong the answer is what the caller waits for */
    int n = ibv_poll_cq(recv_cq_.get(), 16, wcs);
    if (n > 0) {
        count += handle_recv_completions(wcs, n);
    }
    n = ibv_poll_cq(send_cq_.get(), 16, wcs);
    if (n > 0) {
        count += handle_send_completions(wcs, n);
    }

    if (ucs_unlikely(tx_returned_)) {
        tx_returned_ = false;
        /* only endpoints that queued requests for lack of resources */
        for (auto *ep : waiting_) {
            schedule_pending(ep);
        }
        waiting_.clear();
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
    WireupGuard guard(*this);
    for (auto *ep : async_ready_) {
        schedule_pending(ep);
    }
    async_ready_.clear();
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
    /* one read returns the eventfd's count and clears it (EAGAIN: was 0) */
    uint64_t wakeups;
    const ssize_t got = read(wakeup_fd_.get(), &wakeups, sizeof(wakeups));
    (void)got;
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
    return stash_.empty() ? UCS_OK : UCS_ERR_BUSY;
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

bool Iface::is_reachable(const uint8_t *dev_addr, const uint8_t *iface_addr) const
{
    std::string why;
    const auto dst = unpack_address(dev_addr, iface_addr, &why);
    /* rdma_cm resolves within the address family the listener uses */
    return dst && (dst->ss_family == listen_addr_.ss_family);
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
