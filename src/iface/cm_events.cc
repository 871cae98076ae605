/* xqp - the interface's rdma_cm side: the listener's events, the connection
 * timer, device removal, and what the passive connections report */
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
                on_connect_request(event);
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

        /* held connections that ended are destroyed here, never inside
         * their own callbacks */
        reap_held();
    }
    if ((errno != EAGAIN) && (errno != EWOULDBLOCK)) {
        ucs_error("xqp: %s: rdma_get_cm_event: %s", resource_name_.c_str(), strerror(errno));
    }
}

void Iface::on_connect_request(const wireup::CmEvent &event)
{
    /* decoded once: the matching here, the connection's accept below */
    std::string why;
    const auto hello = wireup::decode(event.private_data.data(), event.private_data.size(), &why);
    /* sharing: a request from a peer our endpoint is connecting to at the
     * same time (sharing.cc) */
    ep::Endpoint *crossing = nullptr;
    if (sharing()) {
        if (hello && (hello->kind == wireup::Hello::Kind::Request) && hello->share) {
            crossing = crossing_ep(*hello);
            if ((crossing != nullptr) && (wireup_config_.listener < hello->listener)) {
                /* ours is kept: the peer's endpoint waits for it */
                ucs_debug("xqp: %s: both sides connect (pair %u with %s): keeping ours",
                          resource_name_.c_str(), hello->pair_sn,
                          wireup::to_string(hello->listener).c_str());
                const int err = wireup::yield_request(*cm_, wireup_config_, event, *hello);
                if (err != 0) {
                    ucs_debug("xqp: %s: rdma_reject: %s", resource_name_.c_str(),
                              strerror(err));
                }
                return;
            }
        }
    }
    auto conn = std::make_unique<wireup::Connection>(*cm_, ece_provider_, wireup_config_,
                                                     *this, 0);
    auto *c   = conn.get();
    passive_log_.add(c);
    passive_.push_back(Held{std::move(conn)});
    if (crossing != nullptr) {
        /* the peer's is kept: our endpoint drops its own attempt and sends
         * on this one */
        passive_.back().user = crossing;
        crossing->take_accepted(c);
    }
    c->accept_request(event, hello, why);
    record_passive(*c);
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
    static_assert(int(wireup::ConnState::Awaiting) == XQP_CONN_AWAITING, "states match");
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
    if (xqp_wireup_info_t *info = passive_log_.find(&conn)) {
        const uint32_t qp_num = info->qp_num;
        fill_wireup_info(conn, info);
        if (info->qp_num == 0) {
            info->qp_num = qp_num; /* keep it after teardown */
        }
    }
}

/* what a held connection reports goes to the endpoint that sends on it */
void Iface::on_established(wireup::Connection &conn)
{
    record_passive(conn);
    if (ep::Endpoint *user = user_of(conn)) {
        user->on_established(conn);
    }
}

void Iface::on_failed(wireup::Connection &conn)
{
    record_passive(conn);
    ucs_debug("xqp: %s: %s connection failed: %s", resource_name_.c_str(),
              conn.active() ? "released" : "passive", conn.error().c_str());
    if (ep::Endpoint *user = user_of(conn)) {
        user->on_failed(conn);
    }
}

void Iface::on_closed(wireup::Connection &conn)
{
    record_passive(conn);
    if (ep::Endpoint *user = user_of(conn)) {
        user->on_closed(conn);
    }
}

void Iface::on_log(wireup::Connection &, const std::string &line)
{
    ucs_debug("xqp: %s: %s", resource_name_.c_str(), line.c_str());
}

int Iface::passive_count() const
{
    return static_cast<int>(passive_log_.count());
}

int Iface::passive_info(unsigned index, xqp_wireup_info_t *info) const
{
    return passive_log_.get(index, info);
}

} // namespace xqp::iface
