/*
 * xqp - the exported introspection API (include/xqp/xqp.h).
 */
#include "ep/ep.h"
#include "iface/iface.h"

#include <xqp/xqp.h>

#include <cerrno>

extern "C" {

XQP_API int xqp_ep_wireup_info(uct_ep_h ep, xqp_wireup_info_t *info)
{
    auto *endpoint = xqp::ep::Endpoint::from(ep);
    if ((endpoint == nullptr) || (info == nullptr)) {
        return -EINVAL;
    }
    endpoint->wireup_info(info);
    return 0;
}

XQP_API int xqp_ep_inject_failure(uct_ep_h ep, ucs_status_t status, unsigned hold_us)
{
    auto *endpoint = xqp::ep::Endpoint::from(ep);
    if ((endpoint == nullptr) || !UCS_STATUS_IS_ERR(status) || (hold_us > 1000000)) {
        return -EINVAL;
    }
    endpoint->inject_failure(status, hold_us);
    return 0;
}

XQP_API int xqp_iface_passive_info(uct_iface_h iface, unsigned index, xqp_wireup_info_t *info)
{
    auto *xiface = xqp::iface::Iface::from(iface);
    if ((xiface == nullptr) || (info == nullptr)) {
        return -EINVAL;
    }
    xqp::iface::WireupGuard guard(*xiface);
    return xiface->passive_info(index, info);
}

XQP_API int xqp_iface_passive_count(uct_iface_h iface)
{
    auto *xiface = xqp::iface::Iface::from(iface);
    if (xiface == nullptr) {
        return -EINVAL;
    }
    xqp::iface::WireupGuard guard(*xiface);
    return xiface->passive_count();
}

XQP_API int xqp_iface_connection_count(uct_iface_h iface)
{
    auto *xiface = xqp::iface::Iface::from(iface);
    if (xiface == nullptr) {
        return -EINVAL;
    }
    xqp::iface::WireupGuard guard(*xiface);
    return xiface->connection_count();
}

XQP_API int xqp_iface_attempts(uct_iface_h iface, unsigned *in_flight, unsigned *queued)
{
    auto *xiface = xqp::iface::Iface::from(iface);
    if ((xiface == nullptr) || (in_flight == nullptr) || (queued == nullptr)) {
        return -EINVAL;
    }
    xqp::iface::WireupGuard guard(*xiface);
    xiface->conns().count_attempts(in_flight, queued);
    return 0;
}

} // extern "C"
