/*
 * xqp - an endpoint: the active side of one RC connection to a peer
 * interface.
 *
 * uct_ep_create returns at once; the connection proceeds asynchronously
 * (wireup/connection.h, driven by the interface's rdma_cm events). Until it
 * is established, operations return UCS_ERR_NO_RESOURCE and pending
 * requests queue up; they are dispatched from the worker's progress once it
 * is, the way uct_tcp behaves. A connection that fails for good makes every
 * operation return its status and is reported to the interface's error
 * handler.
 */
#ifndef XQP_EP_EP_H
#define XQP_EP_EP_H

#include "compat/ucx.h"
#include "iface/iface.h"
#include "wireup/connection.h"

#include <atomic>

namespace xqp::ep {

class Endpoint final : public wireup::ConnectionOwner {
public:
    struct Handle {
        uct_base_ep_t super;
        Endpoint     *owner;
    };

    enum class State { Connecting, Connected, Failed };

    Endpoint(iface::Iface *iface, const sockaddr_storage &dst);
    ~Endpoint() override;
    Endpoint(const Endpoint &) = delete;
    Endpoint &operator=(const Endpoint &) = delete;

    /* nullptr when ep is not an xqp endpoint */
    static Endpoint *from(uct_ep_h ep);
    static Endpoint *from_unchecked(uct_ep_h ep)
    {
        return reinterpret_cast<Handle *>(ep)->owner;
    }

    uct_ep_h handle() { return &handle_.super.super; }
    State state() const { return state_.load(std::memory_order_acquire); }

    ucs_status_t flush(unsigned flags, uct_completion_t *comp);
    ucs_status_t pending_add(uct_pending_req_t *req, unsigned flags);
    void pending_purge(uct_pending_purge_callback_t cb, void *arg);

    void wireup_info(xqp_wireup_info_t *info) const;

    /* wireup::ConnectionOwner (called with the async context blocked) */
    void on_established(wireup::Connection &conn) override;
    void on_failed(wireup::Connection &conn) override;
    void on_closed(wireup::Connection &conn) override;
    void on_log(wireup::Connection &conn, const std::string &line) override;

private:
    static unsigned progress_cb(void *arg);
    void schedule_progress();
    unsigned dispatch();

    Handle              handle_;
    iface::Iface       *iface_;
    sockaddr_storage    dst_;
    wireup::Connection  conn_;
    std::atomic<State>  state_{State::Connecting};
    ucs_status_t        fail_status_ = UCS_OK;
    bool                error_reported_ = false;
    ucs_queue_head_t    pending_;
    uct_worker_cb_id_t  progress_id_ = UCS_CALLBACKQ_ID_NULL;
    bool                progress_scheduled_ = false; /* guarded by the async lock */
};

/* uct_iface_ops_t entries */
ucs_status_t ep_create(const uct_ep_params_t *params, uct_ep_h *ep_p);
void ep_destroy(uct_ep_h ep);
ucs_status_t ep_flush(uct_ep_h ep, unsigned flags, uct_completion_t *comp);
ucs_status_t ep_fence(uct_ep_h ep, unsigned flags);
ucs_status_t ep_check(uct_ep_h ep, unsigned flags, uct_completion_t *comp);
ucs_status_t ep_pending_add(uct_ep_h ep, uct_pending_req_t *req, unsigned flags);
void ep_pending_purge(uct_ep_h ep, uct_pending_purge_callback_t cb, void *arg);

} // namespace xqp::ep

#endif
