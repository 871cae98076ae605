/* xqp - the interface's rdma_cm side: the listener's events, the connection
 * timer and device removal (the connections are in conn_table.h) */
#include "iface/iface.h"

#include "ep/ep.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace xqp::iface {

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

ucs_status_t Iface::arm_timer()
{
    if (timer_id_ >= 0) {
        return UCS_OK;
    }
    /* connection attempts that hang (a peer that never answers) */
    return ucs_async_add_timer(async_->mode, ucs_time_from_sec(0.25), timer_handler, this,
                               handler_async_, &timer_id_);
}

void Iface::disarm_timer_if_idle()
{
    int id;
    {
        WireupGuard guard(*this);
        if ((timer_id_ < 0) ||
            std::any_of(eps_.begin(), eps_.end(), [](auto *ep) { return ep->attempting(); })) {
            return;
        }
        id        = timer_id_;
        timer_id_ = -1;
    }
    ucs_async_remove_handler(id, 1);
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
                conns_->accept(event);
            } else if (for_listener) {
                ucs_debug("xqp: %s listener: %s", resource_name_.c_str(),
                          rdma_event_str(event.type));
                if (event.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
                    on_device_removal();
                }
            } else if (event.id->context != nullptr) {
                conns_->on_event(*static_cast<wireup::Connection *>(event.id->context), event);
            }
        } catch (const std::exception &e) {
            ucs_error("xqp: %s: handling %s: %s", resource_name_.c_str(),
                      rdma_event_str(event.type), e.what());
        }

        /* connections that ended are destroyed here, never inside their
         * own callbacks */
        conns_->reap();
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

int Iface::passive_count() const
{
    return static_cast<int>(conns_->passive_log().count());
}

int Iface::passive_info(unsigned index, xqp_wireup_info_t *info) const
{
    return conns_->passive_log().get(index, info);
}

} // namespace xqp::iface
