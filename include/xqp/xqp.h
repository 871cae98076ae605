/*
 * xqp - introspection API of the xqp UCX transport plugin.
 *
 * UCT has no call that reports how a connection was established, so the
 * plugin exports these for tools and tests. Look them up with dlsym: with
 * RTLD_DEFAULT when the plugin is preloaded (xqp-run before UCX 1.22);
 * when UCX loaded it as a module (its module directory or UCX_PLUGIN_PATH,
 * UCX 1.22 and later; RTLD_LOCAL), in the handle that
 * dlopen("libuct_xqp.so.0", RTLD_LAZY | RTLD_NOLOAD) returns once UCX has
 * loaded its modules (after uct_query_components or ucp_init). Every
 * function checks that the handle belongs to xqp.
 */
#ifndef XQP_XQP_H
#define XQP_XQP_H

#include <stdint.h>
#include <uct/api/uct.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XQP_API __attribute__((visibility("default")))

typedef enum {
    XQP_CONN_IDLE,
    XQP_CONN_RESOLVING_ADDR,
    XQP_CONN_RESOLVING_ROUTE,
    XQP_CONN_CONNECTING,
    XQP_CONN_ACCEPTING,
    XQP_CONN_CONNECTED,
    XQP_CONN_FAILED,
    XQP_CONN_CLOSED,
    XQP_CONN_AWAITING, /* sharing: the peer connects to us at the same time */
    XQP_CONN_QUEUED    /* waiting for one of the interface's attempts in flight
                        * to end (UCX_XQP_CONNECT_WINDOW) */
} xqp_conn_state_t;

typedef struct {
    uint32_t vendor_id; /* 0: none */
    uint32_t options;
} xqp_ece_t;

typedef struct {
    int       state;         /* xqp_conn_state_t */
    unsigned  attempts;      /* connection attempts made (fresh cm_id + QP each) */
    int       status;        /* ucs_status_t of a failure, UCS_OK otherwise */
    int       reject_reason; /* CM status of a REJECTED event (35: ECE), 0 if none */
    xqp_ece_t ece_sent;      /* given to rdma_set_local_ece */
    xqp_ece_t ece_received;  /* returned by rdma_get_remote_ece */
    xqp_ece_t ece_agreed;    /* the agreement given to ibv_set_ece */
    int       ece_applied;   /* ibv_set_ece accepted it */
    int       ece_set_err;   /* its error otherwise (EOPNOTSUPP on rxe) */
    uint32_t  qp_num;        /* our data QP */
    char      error[192];    /* why it failed */
} xqp_wireup_info_t;

/* The active connection of an xqp endpoint. 0, or -EINVAL for a foreign ep. */
XQP_API int xqp_ep_wireup_info(uct_ep_h ep, xqp_wireup_info_t *info);

/* Fault injection, for tests: fails the endpoint's connection with status
 * (an error) the way an rdma_cm failure on UCX's async thread does, from
 * whatever thread calls it: the QP goes to the error state, requests in
 * flight end with status, and the interface's error handler runs from
 * progress. hold_us (at most 1 s) is how long the failing thread waits
 * between retiring the connection's resources and marking the endpoint
 * failed, to widen the window a data path posting on another thread must
 * survive. Nothing happens to a connection that already failed or closed.
 * 0, or -EINVAL for a foreign ep, a status that is not an error or a hold
 * over 1 s. */
XQP_API int xqp_ep_inject_failure(uct_ep_h ep, ucs_status_t status, unsigned hold_us);

/* Passive connections an xqp interface accepted or rejected, in arrival
 * order (kept after they close). The last 4096 are kept: an older index
 * gives -ENOENT, as one past the end does. 0, -EINVAL or -ENOENT. */
XQP_API int xqp_iface_passive_info(uct_iface_h iface, unsigned index, xqp_wireup_info_t *info);

/* How many passive connection requests the interface has handled (all of
 * them, those whose record was dropped included). */
XQP_API int xqp_iface_passive_count(uct_iface_h iface);

/* How many connections the interface holds now that no endpoint owns: the
 * ones it accepted that are not closed yet, and, with UCX_XQP_SHARE, those
 * that outlived their endpoint because the peer still used them.
 * -EINVAL for a foreign interface. */
XQP_API int xqp_iface_connection_count(uct_iface_h iface);

/* The interface's own connection attempts now, counted at one instant:
 * those in flight (resolving, or connecting through rdma_cm) and those
 * queued behind them (UCX_XQP_CONNECT_WINDOW). 0, or -EINVAL for a foreign
 * interface or a null count. */
XQP_API int xqp_iface_attempts(uct_iface_h iface, unsigned *in_flight, unsigned *queued);

#ifdef __cplusplus
}
#endif

#endif
