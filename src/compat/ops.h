/*
 * xqp - the operation tables UCX calls, built for the UCX release at hand.
 *
 * xqp implements each callback once, with one signature for every release
 * (the *_fn types below). These builders put them into this release's
 * tables: adapters absorb the signatures that changed, slots that only some
 * releases have are filled or left out according to configure's probes
 * (XQP_UCX_HAVE_*), and every other slot gets compat::unsupported, so no
 * slot is NULL. The tables use designated initializers on purpose: with
 * -Wextra -Werror, a slot added by a release xqp does not know yet is a
 * compile error (missing initializer) instead of a NULL UCX would call.
 */
#ifndef XQP_COMPAT_OPS_H
#define XQP_COMPAT_OPS_H

#include "compat/ucx.h"

#include <cstdio>

namespace xqp::compat {

/* ------------------------------------------------------------------ configuration */

/* A configuration table entry of a component or transport (never on UCX's
 * global list yet); flags (UCX 1.15+) start at 0. */
constexpr ucs_config_global_list_entry_t config_entry(const char *name, const char *prefix,
                                                      ucs_config_field_t *table, size_t size)
{
    return ucs_config_global_list_entry_t{
        .name   = name,
        .prefix = prefix,
        .table  = table,
        .size   = size,
        .list   = {},
#ifdef XQP_UCX_HAVE_CONFIG_ENTRY_FLAGS
        .flags  = 0,
#endif
    };
}

/* ------------------------------------------------------------------ memory domain */

using md_query_fn     = ucs_status_t (*)(uct_md_h md, MdCaps *caps);
/* flags: UCT_MD_MEM_FLAG_* and UCT_MD_MEM_ACCESS_*, all within 32 bits */
using md_mem_reg_fn   = ucs_status_t (*)(uct_md_h md, void *address, size_t length,
                                         unsigned flags, uct_mem_h *memh_p);
using md_mkey_pack_fn = ucs_status_t (*)(uct_md_h md, uct_mem_h memh,
                                         const MkeyPackParams *params, void *rkey_buffer);

namespace detail {

template <md_query_fn Query> ucs_status_t md_query(uct_md_h md, md_attr_t *attr)
{
    MdCaps caps;
    const ucs_status_t status = Query(md, &caps);
    if (status == UCS_OK) {
        fill_md_attr(caps, attr);
    }
    return status;
}

#ifdef XQP_UCX_HAVE_MEM_REG_PARAMS
template <md_mem_reg_fn MemReg>
ucs_status_t md_mem_reg(uct_md_h md, void *address, size_t length,
                        const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p)
{
    const uint64_t flags = ((params != nullptr) &&
                            (params->field_mask & UCT_MD_MEM_REG_FIELD_FLAGS)) ?
                                   params->flags : 0;
    return MemReg(md, address, length, static_cast<unsigned>(flags), memh_p);
}
#else
template <md_mem_reg_fn MemReg> inline constexpr md_mem_reg_fn md_mem_reg = MemReg;
#endif

#ifdef XQP_UCX_HAVE_MKEY_PACK_ADDRESS
/* the key of a registration does not depend on the part of it being packed */
template <md_mkey_pack_fn MkeyPack>
ucs_status_t md_mkey_pack(uct_md_h md, uct_mem_h memh, void *, size_t,
                          const uct_md_mkey_pack_params_t *params, void *rkey_buffer)
{
    return MkeyPack(md, memh, params, rkey_buffer);
}
#elif defined(XQP_UCX_HAVE_MKEY_PACK_PARAMS)
template <md_mkey_pack_fn MkeyPack> inline constexpr md_mkey_pack_fn md_mkey_pack = MkeyPack;
#else
/* no parameters before UCX 1.13 */
template <md_mkey_pack_fn MkeyPack>
ucs_status_t md_mkey_pack(uct_md_h md, uct_mem_h memh, void *rkey_buffer)
{
    return MkeyPack(md, memh, nullptr, rkey_buffer);
}
#endif

#ifdef XQP_UCX_HAVE_MD_OPS_IS_SOCKADDR_ACCESSIBLE
/* client/server sockaddr connections are not an xqp feature */
inline int md_is_sockaddr_accessible(uct_md_h, const ucs_sock_addr_t *,
                                     uct_sockaddr_accessibility_t)
{
    return 0;
}
#endif

} // namespace detail

template <uct_md_close_func_t Close, md_query_fn Query, md_mem_reg_fn MemReg,
          uct_md_mem_dereg_func_t MemDereg, md_mkey_pack_fn MkeyPack>
constexpr uct_md_ops_t make_md_ops()
{
    using Ops = uct_md_ops_t;
    return Ops{
        .close                  = Close,
        .query                  = detail::md_query<Query>,
        .mem_alloc              = unsupported<decltype(Ops::mem_alloc)>,
        .mem_free               = unsupported<decltype(Ops::mem_free)>,
        .mem_advise             = unsupported<decltype(Ops::mem_advise)>,
        .mem_reg                = detail::md_mem_reg<MemReg>,
        .mem_dereg              = MemDereg,
        .mem_query              = unsupported<decltype(Ops::mem_query)>,
        .mkey_pack              = detail::md_mkey_pack<MkeyPack>,
#ifdef XQP_UCX_HAVE_MD_OPS_MEM_ATTACH
        .mem_attach             = unsupported<decltype(Ops::mem_attach)>,
#endif
#ifdef XQP_UCX_HAVE_MD_OPS_IS_SOCKADDR_ACCESSIBLE
        .is_sockaddr_accessible = detail::md_is_sockaddr_accessible,
#endif
        .detect_memory_type     = unsupported<decltype(Ops::detect_memory_type)>,
#ifdef XQP_UCX_HAVE_MD_OPS_MEM_ELEM_PACK
        .mem_elem_pack          = unsupported<decltype(Ops::mem_elem_pack)>,
#endif
    };
}

/* ------------------------------------------------------------------ registration cache */

using rcache_mem_reg_fn   = ucs_status_t (*)(void *context, ucs_rcache_t *rcache, void *arg,
                                             ucs_rcache_region_t *region, uint16_t flags);
using rcache_mem_dereg_fn = void (*)(void *context, ucs_rcache_t *rcache,
                                     ucs_rcache_region_t *region);
using rcache_dump_fn      = void (*)(void *context, ucs_rcache_t *rcache,
                                     ucs_rcache_region_t *region, char *buf, size_t max);

namespace detail {
#ifdef XQP_UCX_HAVE_RCACHE_OPS_MERGE
/* xqp registers every region with all access rights: merged regions need
 * nothing more */
inline void rcache_merge(void *, ucs_rcache_t *, void *, ucs_rcache_region_t *) {}
#endif
} // namespace detail

template <rcache_mem_reg_fn MemReg, rcache_mem_dereg_fn MemDereg, rcache_dump_fn Dump>
constexpr ucs_rcache_ops_t make_rcache_ops()
{
    return ucs_rcache_ops_t{
        .mem_reg     = MemReg,
        .mem_dereg   = MemDereg,
#ifdef XQP_UCX_HAVE_RCACHE_OPS_MERGE
        .merge       = detail::rcache_merge,
#endif
        .dump_region = Dump,
    };
}

/* ------------------------------------------------------------------ component */

using rkey_unpack_fn = ucs_status_t (*)(uct_component_t *component, const void *rkey_buffer,
                                        uct_rkey_t *rkey_p, void **handle_p);

#ifdef XQP_UCX_HAVE_RKEY_UNPACK_PARAMS
/* the parameters (the system device the key will be used from) do not
 * change an xqp key */
template <rkey_unpack_fn Unpack>
ucs_status_t rkey_unpack(uct_component_t *component, const void *rkey_buffer,
                         const uct_rkey_unpack_params_t *, uct_rkey_t *rkey_p, void **handle_p)
{
    return Unpack(component, rkey_buffer, rkey_p, handle_p);
}
#else
template <rkey_unpack_fn Unpack> inline constexpr rkey_unpack_fn rkey_unpack = Unpack;
#endif

#ifdef XQP_UCX_HAVE_COMPONENT_RKEY_COMPARE
/* An unpacked xqp key is the MR's rkey itself: keys compare as numbers. */
inline ucs_status_t rkey_compare(uct_component_t *, uct_rkey_t rkey1, uct_rkey_t rkey2,
                                 const uct_rkey_compare_params_t *params, int *result)
{
    if ((params == nullptr) || (params->field_mask != 0) || (result == nullptr)) {
        return UCS_ERR_INVALID_PARAM;
    }
    *result = (rkey1 > rkey2) - (rkey1 < rkey2);
    return UCS_OK;
}
/* the slots after rkey_release in uct_component_t that this release has */
#  define XQP_UCX_COMPONENT_RKEY_COMPARE_SLOT .rkey_compare = ::xqp::compat::rkey_compare,
#else
#  define XQP_UCX_COMPONENT_RKEY_COMPARE_SLOT
#endif

/*
 * The remote-key slots of a uct_component_t designated initializer, from
 * rkey_unpack to rkey_compare (UCX 1.16 added it between rkey_release and
 * md_config), e.g.
 *     .md_open = ..., .cm_open = ...,
 *     XQP_UCX_COMPONENT_RKEY_SLOTS(unpack, release)
 *     .md_config = ...
 */
#define XQP_UCX_COMPONENT_RKEY_SLOTS(_unpack, _release) \
    .rkey_unpack  = ::xqp::compat::rkey_unpack<_unpack>, \
    .rkey_ptr     = ::xqp::compat::unsupported<uct_component_rkey_ptr_func_t>, \
    .rkey_release = _release, \
    XQP_UCX_COMPONENT_RKEY_COMPARE_SLOT

/* ------------------------------------------------------------------ interface */

/* whether iface reaches the interface at (dev_addr, iface_addr); when it
 * does not, why, into why (why_len bytes, NUL-terminated; why may be null) */
using iface_reachable_why_fn  = int (*)(const uct_iface_h iface, const uct_device_addr_t *dev_addr,
                                        const uct_iface_addr_t *iface_addr, char *why,
                                        size_t why_len);
/* whether dev_addr is the device address of iface itself */
using iface_is_same_device_fn = int (*)(const uct_iface_h iface,
                                        const uct_device_addr_t *dev_addr);
/* whether ep is connected to the interface at (dev_addr, iface_addr) */
using ep_is_connected_fn      = int (*)(uct_ep_h ep, const uct_device_addr_t *dev_addr,
                                        const uct_iface_addr_t *iface_addr);

namespace detail {

inline void iface_vfs_refresh(uct_iface_h) {}

#ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_IFACE_IS_REACHABLE_V2
template <iface_reachable_why_fn IsReachable, iface_is_same_device_fn IsSameDevice>
int iface_is_reachable_v2(const uct_iface_h iface, const uct_iface_is_reachable_params_t *params)
{
    /* why not, for the caller's info string (UCX's own transports fill it) */
    char *why = (params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING) ?
                        params->info_string : nullptr;
    const size_t why_len = (params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_INFO_STRING_LENGTH) ?
                                   params->info_string_length : 0;
    if ((why != nullptr) && (why_len == 0)) {
        why = nullptr;
    }
    /* an xqp interface is reached through both addresses (IP, port) */
    const uint64_t need = UCT_IFACE_IS_REACHABLE_FIELD_DEVICE_ADDR |
                          UCT_IFACE_IS_REACHABLE_FIELD_IFACE_ADDR;
    if ((params->field_mask & need) != need) {
        if (why != nullptr) {
            std::snprintf(why, why_len, "xqp needs the device and the interface address");
        }
        return 0;
    }
    if (!IsReachable(iface, params->device_addr, params->iface_addr, why, why_len)) {
        return 0;
    }
#  ifdef XQP_UCX_HAVE_IS_REACHABLE_SCOPE
    if ((params->field_mask & UCT_IFACE_IS_REACHABLE_FIELD_SCOPE) &&
        (params->scope == UCT_IFACE_REACHABILITY_SCOPE_DEVICE)) {
        return IsSameDevice(iface, params->device_addr);
    }
#  endif
    return 1;
}
#endif

#ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_EP_IS_CONNECTED
template <ep_is_connected_fn IsConnected>
int ep_is_connected(uct_ep_h ep, const uct_ep_is_connected_params_t *params)
{
    const uint64_t need = UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR |
                          UCT_EP_IS_CONNECTED_FIELD_IFACE_ADDR;
    return ((params->field_mask & need) == need) &&
           IsConnected(ep, params->device_addr, params->iface_addr);
}
#endif

} // namespace detail

/*
 * The internal operations table of an xqp interface. Releases that export
 * UCX's complete default table (uct_base_iface_internal_ops, up to 1.15)
 * get that one, so their behaviour is UCX's own; later ones a table built
 * here from the same defaults and xqp's reachability and connection checks.
 */
template <iface_reachable_why_fn IsReachable, iface_is_same_device_fn IsSameDevice,
          ep_is_connected_fn IsConnected>
uct_iface_internal_ops_t *iface_internal_ops()
{
#ifdef XQP_UCX_HAVE_BASE_IFACE_INTERNAL_OPS
    return &uct_base_iface_internal_ops;
#else
    using Ops = uct_iface_internal_ops_t;
    static Ops ops = {
#  ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_IFACE_QUERY_V2
#    ifdef XQP_UCX_HAVE_IFACE_BASE_QUERY_V2
        .iface_query_v2         = uct_iface_base_query_v2,
#    else
        .iface_query_v2         = unsupported<decltype(Ops::iface_query_v2)>,
#    endif
#  endif
        .iface_estimate_perf    = uct_base_iface_estimate_perf,
        .iface_vfs_refresh      = detail::iface_vfs_refresh,
#  ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_IFACE_MEM_ELEMENT_PACK
        .iface_mem_element_pack = unsupported<decltype(Ops::iface_mem_element_pack)>,
#  endif
        .ep_query               = unsupported<decltype(Ops::ep_query)>,
        .ep_invalidate          = unsupported<decltype(Ops::ep_invalidate)>,
#  ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_EP_CONNECT_TO_EP_V2
        .ep_connect_to_ep_v2    = unsupported<decltype(Ops::ep_connect_to_ep_v2)>,
#  endif
#  ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_IFACE_IS_REACHABLE_V2
        .iface_is_reachable_v2  = detail::iface_is_reachable_v2<IsReachable, IsSameDevice>,
#  endif
#  ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_EP_IS_CONNECTED
        .ep_is_connected        = detail::ep_is_connected<IsConnected>,
#  endif
#  ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_EP_GET_DEVICE_EP
        .ep_get_device_ep       = unsupported<decltype(Ops::ep_get_device_ep)>,
#  endif
#  ifdef XQP_UCX_HAVE_IFACE_INTERNAL_OPS_EP_PUT_SGL_ZCOPY
        .ep_put_sgl_zcopy       = unsupported<decltype(Ops::ep_put_sgl_zcopy)>,
#  endif
    };
    return &ops;
#endif
}

} // namespace xqp::compat

#endif
