#include "ep/ep.h"

#include "common/boundary.h"
#include "iface/address.h"

#include <memory>

namespace xqp::ep {

static ucs_queue_elem_t *pending_elem(uct_pending_req_t *req)
{
    static_assert(sizeof(ucs_queue_elem_t) <= UCT_PENDING_REQ_PRIV_LEN, "fits in priv");
    return reinterpret_cast<ucs_queue_elem_t *>(req->priv);
}

static uct_pending_req_t *pending_req(ucs_queue_elem_t *elem)
{
    return reinterpret_cast<uct_pending_req_t *>(reinterpret_cast<char *>(elem) -
                                                 offsetof(uct_pending_req_t, priv));
}

Endpoint::Endpoint(iface::Iface *iface, const sockaddr_storage &dst)
    : handle_{}, iface_(iface), dst_(dst),
      conn_(iface->cm(), iface->ece_provider(), iface->wireup_config(), *this,
            iface->next_conn_id())
{
    ucs_queue_head_init(&pending_);
    handle_.owner       = this;
    ucs_status_t status = UCS_CLASS_INIT(uct_base_ep_t, &handle_.super, iface->base());
    if (status != UCS_OK) {
        throw Error(status, "cannot initialize the base endpoint");
    }
    UCS_ASYNC_BLOCK(iface_->async());
    conn_.connect(dst_);
    UCS_ASYNC_UNBLOCK(iface_->async());
}

Endpoint::~Endpoint()
{
    UCS_ASYNC_BLOCK(iface_->async());
    if (progress_scheduled_) {
        uct_worker_progress_unregister_safe(iface_->worker(), &progress_id_);
        progress_scheduled_ = false;
    }
    conn_.disconnect();
    UCS_ASYNC_UNBLOCK(iface_->async());
    /* conn_ is destroyed after this body, still before the base class */
    UCS_CLASS_CLEANUP(uct_base_ep_t, &handle_.super);
}

Endpoint *Endpoint::from(uct_ep_h ep)
{
    if ((ep == nullptr) || (iface::Iface::from(ep->iface) == nullptr)) {
        return nullptr;
    }
    return from_unchecked(ep);
}

/* ------------------------------------------------------------------ wireup */

void Endpoint::on_established(wireup::Connection &)
{
    state_.store(State::Connected, std::memory_order_release);
    schedule_progress();
}

void Endpoint::on_failed(wireup::Connection &conn)
{
    fail_status_ = conn.status();
    state_.store(State::Failed, std::memory_order_release);
    ucs_debug("xqp: ep %p to %s failed: %s", this, iface::to_string(dst_).c_str(),
              conn.error().c_str());
    schedule_progress();
}

void Endpoint::on_closed(wireup::Connection &)
{
    /* the peer disconnected */
    fail_status_ = UCS_ERR_CONNECTION_RESET;
    state_.store(State::Failed, std::memory_order_release);
    schedule_progress();
}

void Endpoint::on_log(wireup::Connection &, const std::string &line)
{
    ucs_debug("xqp: ep %p to %s: %s", this, iface::to_string(dst_).c_str(), line.c_str());
}

void Endpoint::schedule_progress()
{
    /* from the async context (blocked): pending requests and error handlers
     * run in the application's progress. register_safe writes the id under
     * the async lock, and the callback clears it under the same lock, so the
     * id is never left pointing at a callback that already ran. */
    if (!progress_scheduled_) {
        progress_scheduled_ = true;
        uct_worker_progress_register_safe(iface_->worker(), progress_cb, this,
                                          UCS_CALLBACKQ_FLAG_ONESHOT, &progress_id_);
    }
}

unsigned Endpoint::progress_cb(void *arg)
{
    auto *ep = static_cast<Endpoint *>(arg);
    UCS_ASYNC_BLOCK(ep->iface_->async());
    ep->progress_id_        = UCS_CALLBACKQ_ID_NULL; /* one-shot: already removed */
    ep->progress_scheduled_ = false;
    UCS_ASYNC_UNBLOCK(ep->iface_->async());
    return ep->dispatch();
}

unsigned Endpoint::dispatch()
{
    unsigned count = 0;
    if (state() == State::Connected) {
        while (!ucs_queue_is_empty(&pending_)) {
            ucs_queue_elem_t *elem = ucs_queue_pull_non_empty(&pending_);
            uct_pending_req_t *req = pending_req(elem);
            const ucs_status_t status = req->func(req);
            ++count;
            if (status == UCS_ERR_NO_RESOURCE) {
                ucs_queue_push_head(&pending_, elem);
                break;
            }
            if (status == UCS_INPROGRESS) {
                ucs_queue_push_head(&pending_, elem);
            }
        }
    } else if ((state() == State::Failed) && !error_reported_) {
        error_reported_ = true;
        uct_iface_handle_ep_err(iface_->handle(), handle(), fail_status_);
        ++count;
    }
    return count;
}

/* ------------------------------------------------------------------ operations */

ucs_status_t Endpoint::flush(unsigned flags, uct_completion_t *)
{
    switch (state()) {
    case State::Connected:
        return UCS_OK; /* nothing is outstanding without a data path */
    case State::Failed:
        return (flags & UCT_FLUSH_FLAG_CANCEL) ? UCS_OK : fail_status_;
    case State::Connecting:
    default:
        return UCS_ERR_NO_RESOURCE;
    }
}

ucs_status_t Endpoint::pending_add(uct_pending_req_t *req, unsigned)
{
    if (state() != State::Connecting) {
        /* the resource is there (or will never be): the caller retries and
         * sees the operation's own status */
        return UCS_ERR_BUSY;
    }
    UCS_ASYNC_BLOCK(iface_->async());
    const bool connecting = (state() == State::Connecting);
    if (connecting) {
        ucs_queue_push(&pending_, pending_elem(req));
    }
    UCS_ASYNC_UNBLOCK(iface_->async());
    return connecting ? UCS_OK : UCS_ERR_BUSY;
}

void Endpoint::pending_purge(uct_pending_purge_callback_t cb, void *arg)
{
    while (!ucs_queue_is_empty(&pending_)) {
        uct_pending_req_t *req = pending_req(ucs_queue_pull_non_empty(&pending_));
        if (cb != nullptr) {
            cb(req, arg);
        }
    }
}

void Endpoint::wireup_info(xqp_wireup_info_t *info) const
{
    UCS_ASYNC_BLOCK(iface_->async());
    iface::fill_wireup_info(conn_, info);
    UCS_ASYNC_UNBLOCK(iface_->async());
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

ucs_status_t ep_flush(uct_ep_h ep, unsigned flags, uct_completion_t *comp)
{
    return Endpoint::from_unchecked(ep)->flush(flags, comp);
}

ucs_status_t ep_fence(uct_ep_h ep, unsigned)
{
    /* RC executes in order; RDMA reads get their fence with the data path */
    return (Endpoint::from_unchecked(ep)->state() == Endpoint::State::Failed) ?
            UCS_ERR_CONNECTION_RESET : UCS_OK;
}

ucs_status_t ep_check(uct_ep_h ep, unsigned flags, uct_completion_t *)
{
    if (flags != 0) {
        return UCS_ERR_INVALID_PARAM;
    }
    /* a failure is reported through the error handler; nothing to probe yet */
    (void)Endpoint::from_unchecked(ep);
    return UCS_OK;
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
