#include "iface/iface.h"

#include "common/boundary.h"
#include "verbs/discovery.h"

#include <cstring>
#include <memory>
#include <vector>

namespace xqp::iface {

ucs_config_field_t config_table[] = {
    {"", "", NULL, ucs_offsetof(Config, super), UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},
    {}
};

static void iface_close(uct_iface_h tl_iface)
{
    delete Iface::from(tl_iface);
}

static ucs_status_t iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr)
{
    return boundary("iface_query", [&] {
        Iface::from(tl_iface)->query(attr);
        return UCS_OK;
    });
}

static int iface_is_reachable(const uct_iface_h, const uct_device_addr_t *,
                              const uct_iface_addr_t *)
{
    return 0; /* no connection establishment yet: nothing is reachable */
}

static unsigned iface_progress(uct_iface_h)
{
    return 0; /* nothing is posted on this interface yet */
}

/* Addresses are empty (attr.*_addr_len == 0): nothing to write. */
static ucs_status_t iface_get_device_address(uct_iface_h, uct_device_addr_t *)
{
    return UCS_OK;
}

static ucs_status_t iface_get_address(uct_iface_h, uct_iface_addr_t *)
{
    return UCS_OK;
}

using Ops = uct_iface_ops_t;

static uct_iface_ops_t iface_ops = {
    .ep_put_short             = compat::unsupported<decltype(Ops::ep_put_short)>,
    .ep_put_bcopy             = compat::unsupported<decltype(Ops::ep_put_bcopy)>,
    .ep_put_zcopy             = compat::unsupported<decltype(Ops::ep_put_zcopy)>,
    .ep_get_short             = compat::unsupported<decltype(Ops::ep_get_short)>,
    .ep_get_bcopy             = compat::unsupported<decltype(Ops::ep_get_bcopy)>,
    .ep_get_zcopy             = compat::unsupported<decltype(Ops::ep_get_zcopy)>,
    .ep_am_short              = compat::unsupported<decltype(Ops::ep_am_short)>,
    .ep_am_short_iov          = compat::unsupported<decltype(Ops::ep_am_short_iov)>,
    .ep_am_bcopy              = compat::unsupported<decltype(Ops::ep_am_bcopy)>,
    .ep_am_zcopy              = compat::unsupported<decltype(Ops::ep_am_zcopy)>,
    .ep_atomic_cswap64        = compat::unsupported<decltype(Ops::ep_atomic_cswap64)>,
    .ep_atomic_cswap32        = compat::unsupported<decltype(Ops::ep_atomic_cswap32)>,
    .ep_atomic32_post         = compat::unsupported<decltype(Ops::ep_atomic32_post)>,
    .ep_atomic64_post         = compat::unsupported<decltype(Ops::ep_atomic64_post)>,
    .ep_atomic32_fetch        = compat::unsupported<decltype(Ops::ep_atomic32_fetch)>,
    .ep_atomic64_fetch        = compat::unsupported<decltype(Ops::ep_atomic64_fetch)>,
    .ep_tag_eager_short       = compat::unsupported<decltype(Ops::ep_tag_eager_short)>,
    .ep_tag_eager_bcopy       = compat::unsupported<decltype(Ops::ep_tag_eager_bcopy)>,
    .ep_tag_eager_zcopy       = compat::unsupported<decltype(Ops::ep_tag_eager_zcopy)>,
    .ep_tag_rndv_zcopy        = compat::unsupported<decltype(Ops::ep_tag_rndv_zcopy)>,
    .ep_tag_rndv_cancel       = compat::unsupported<decltype(Ops::ep_tag_rndv_cancel)>,
    .ep_tag_rndv_request      = compat::unsupported<decltype(Ops::ep_tag_rndv_request)>,
    .iface_tag_recv_zcopy     = compat::unsupported<decltype(Ops::iface_tag_recv_zcopy)>,
    .iface_tag_recv_cancel    = compat::unsupported<decltype(Ops::iface_tag_recv_cancel)>,
    .ep_pending_add           = compat::unsupported<decltype(Ops::ep_pending_add)>,
    .ep_pending_purge         = compat::unsupported<decltype(Ops::ep_pending_purge)>,
    .ep_flush                 = compat::unsupported<decltype(Ops::ep_flush)>,
    .ep_fence                 = compat::unsupported<decltype(Ops::ep_fence)>,
    .ep_check                 = compat::unsupported<decltype(Ops::ep_check)>,
    .ep_create                = compat::unsupported<decltype(Ops::ep_create)>,
    .ep_connect               = compat::unsupported<decltype(Ops::ep_connect)>,
    .ep_disconnect            = compat::unsupported<decltype(Ops::ep_disconnect)>,
    .cm_ep_conn_notify        = compat::unsupported<decltype(Ops::cm_ep_conn_notify)>,
    .ep_destroy               = compat::unsupported<decltype(Ops::ep_destroy)>,
    .ep_get_address           = compat::unsupported<decltype(Ops::ep_get_address)>,
    .ep_connect_to_ep         = compat::unsupported<decltype(Ops::ep_connect_to_ep)>,
    .iface_accept             = compat::unsupported<decltype(Ops::iface_accept)>,
    .iface_reject             = compat::unsupported<decltype(Ops::iface_reject)>,
    .iface_flush              = uct_base_iface_flush,
    .iface_fence              = uct_base_iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = iface_progress,
    .iface_event_fd_get       = compat::unsupported<decltype(Ops::iface_event_fd_get)>,
    .iface_event_arm          = compat::unsupported<decltype(Ops::iface_event_arm)>,
    .iface_close              = iface_close,
    .iface_query              = iface_query,
    .iface_get_device_address = iface_get_device_address,
    .iface_get_address        = iface_get_address,
    .iface_is_reachable       = iface_is_reachable,
};

Iface::Iface(md::MemoryDomain *md, uct_worker_h worker, const uct_iface_params_t *params,
             const Config &config)
    : handle_{}, md_(md), port_(0), bandwidth_(0)
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
    port_ = port;

    ibv_port_attr port_attr = {};
    const int ret = ibv_query_port(md->context(), static_cast<uint8_t>(port), &port_attr);
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

    handle_.owner = this;
    ucs_status_t status = UCS_CLASS_INIT(uct_base_iface_t, &handle_.super, &iface_ops,
                                         &uct_base_iface_internal_ops, md->handle(),
                                         worker, params, &config.super
                                         XQP_UCX_IFACE_STATS_ARGS(params, resource_name_.c_str()));
    if (status != UCS_OK) {
        throw Error(status, "cannot initialize the base interface");
    }
}

Iface::~Iface()
{
    UCS_CLASS_CLEANUP(uct_base_iface_t, &handle_.super);
}

void Iface::query(uct_iface_attr_t *attr)
{
    uct_base_iface_query(&handle_.super, attr);
    attr->device_addr_len = 0;
    attr->iface_addr_len  = 0;
    attr->ep_addr_len     = 0;
    /* the connection model xqp will serve (rdma_cm to the peer's listener);
     * UCP requires every transport to state one. With no operation flags
     * and is_reachable() false, UCP selects no lane on this interface. */
    attr->cap.flags       = UCT_IFACE_FLAG_CONNECT_TO_IFACE;
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared    = bandwidth_;
    attr->latency             = ucs_linear_func_make(0, 0);
    attr->overhead            = 0;
    attr->priority        = 0;
}

static ucs_status_t iface_open(uct_md_h md, uct_worker_h worker,
                               const uct_iface_params_t *params,
                               const uct_iface_config_t *tl_config, uct_iface_h *iface_p)
{
    return boundary("iface_open", [&] {
        auto iface = std::make_unique<Iface>(md::MemoryDomain::from(md), worker, params,
                                             *reinterpret_cast<const Config *>(tl_config));
        ucs_debug("xqp: opened interface on %s", iface->resource_name().c_str());
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
    .config        = {
        .name   = "xqp transport",
        .prefix = "XQP_",
        .table  = config_table,
        .size   = sizeof(Config),
        .list   = {},
    },
    .list          = {},
};

} // namespace xqp::iface
