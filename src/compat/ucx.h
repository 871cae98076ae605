/*
 * xqp - the one place that includes UCX's internal headers and absorbs the
 * differences between UCX releases.
 *
 * UCX installs no internal headers: configure points the include path at the
 * matching UCX source tree and regenerates UCX's build configuration
 * (ucx_build_config.h, from `ucx_info -b`), which must come first because
 * struct layouts depend on it (ENABLE_STATS, ENABLE_DEBUG_DATA, ...).
 *
 * Every other file of the plugin includes this header instead of uct/base or
 * ucs internals, and uses the helpers below (and the ops-table builders of
 * compat/ops.h) where releases differ.
 *
 * Which release has which internal API is never decided from the version
 * number: configure compiles a probe for every difference against the UCX
 * tree (config/m4/ucx_compat.m4) and records the results as
 * XQP_UCX_HAVE_* in xqp_ucx_probes.h, which only src/compat/ includes
 * (and the tests whose expectations depend on a probe).
 */
#ifndef XQP_COMPAT_UCX_H
#define XQP_COMPAT_UCX_H

#include "ucx_build_config.h"
#include "xqp_ucx_probes.h"

#include "compat/version.h"

#include <optional>
#include <string>
#include <type_traits>

extern "C" {
#include <uct/api/uct.h>
#include <uct/api/v2/uct_v2.h>
#include <uct/api/version.h>
#include <uct/base/uct_component.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <uct/base/uct_worker.h>
#include <ucs/async/async.h>
#include <ucs/config/parser.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/sys.h>
#include <ucm/api/ucm.h>
#include <ucs/sys/compiler.h>
#include <ucs/sys/string.h>
#include <ucs/sys/topo/base/topo.h>
#include <ucs/type/class.h>
#include <ucs/type/cpu_set.h>
}

/* UCX's parameter-check macros (UCT_CHECK_LENGTH, ...) use GNU C's typeof,
 * which ISO C++ lacks; GNU's other spelling works in both. */
#if defined(__cplusplus) && !defined(typeof)
#define typeof __typeof__
#endif

namespace xqp::compat {

namespace detail {
/* field n (0: major, 1: minor, 2: patch) of a version string like "1.12.1" */
constexpr unsigned version_field(const char *s, int n)
{
    for (; (n > 0) && (*s != '\0'); ++s) {
        n -= (*s == '.');
    }
    unsigned value = 0;
    for (; (*s >= '0') && (*s <= '9'); ++s) {
        value = value * 10 + unsigned(*s - '0');
    }
    return value;
}
} // namespace detail

/* The UCX release this plugin was compiled against (before UCX 1.13 the
 * patch level is only in UCT_VERNO_STRING). */
constexpr Version built_version()
{
#ifdef XQP_UCX_HAVE_VERNO_PATCH
    return Version{UCT_VERNO_MAJOR, UCT_VERNO_MINOR, UCT_VERNO_PATCH};
#else
    return Version{UCT_VERNO_MAJOR, UCT_VERNO_MINOR, detail::version_field(UCT_VERNO_STRING, 2)};
#endif
}

/*
 * The UCX release loaded in this process, from ucp_get_version(), the only
 * public version query UCX has. libucp is usually loaded already (UCP
 * applications, ucx_info, ucx_perftest); otherwise the libucp.so.0 next to
 * the loaded libuct is opened to ask. Empty when neither works.
 */
std::optional<Version> running_version();

/*
 * Registers a component and its transports with UCX / removes them again.
 * uct_component_unregister() and uct_tl_unregister() leave the component
 * and the transports in UCX's lists (1.13 to 1.22 at least), so removal is
 * completed here. Releases without those functions (before 1.13) get the
 * list insertions UCX's own modules make with UCT_COMPONENT_REGISTER and
 * UCT_TL_DEFINE.
 */
void register_component(uct_component_t *component, uct_tl_t *const *tls, size_t num_tls);
void unregister_component(uct_component_t *component, uct_tl_t *const *tls, size_t num_tls);

/*
 * The component of that name already in UCX's list, or nullptr. A second
 * copy of the plugin (preloaded from one file and found in UCX's module
 * directory as another) must not register the same name twice.
 */
const uct_component_t *registered_component(const char *name);

/* The parameters of the mkey_pack callback: uct_md_mkey_pack_params_t from
 * UCX 1.13, none before (xqp's packing takes none into account). */
#ifdef XQP_UCX_HAVE_MKEY_PACK_PARAMS
using MkeyPackParams = uct_md_mkey_pack_params_t;
#else
struct MkeyPackParams {};
#endif

/* ucs_queue_is_empty() of a const queue (it takes a non-const one before
 * UCX 1.13, and only reads it) */
inline bool queue_is_empty(const ucs_queue_head_t *queue)
{
#ifdef XQP_UCX_HAVE_QUEUE_IS_EMPTY_CONST
    return ucs_queue_is_empty(queue);
#else
    return ucs_queue_is_empty(const_cast<ucs_queue_head_t *>(queue));
#endif
}

/* Arguments of uct_base_iface_t's constructor that exist only with ENABLE_STATS. */
#define XQP_UCX_IFACE_STATS_ARGS(_params, _name) \
    UCS_STATS_ARG(((_params)->field_mask & UCT_IFACE_PARAM_FIELD_STATS_ROOT) ? \
                  (_params)->stats_root : NULL) \
    UCS_STATS_ARG(_name)

/*
 * A type-correct "not supported" implementation for any UCX operation slot:
 * ucs_status_t and ssize_t slots return UCS_ERR_UNSUPPORTED, pointer-status
 * slots UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED), void slots nothing. Keeps the
 * ops tables free of NULL slots without casting between function types.
 */
template <typename F> struct Unsupported;
template <typename R, typename... A> struct Unsupported<R (*)(A...)> {
    static R fn(A...)
    {
        if constexpr (std::is_void_v<R>) {
            return;
        } else if constexpr (std::is_pointer_v<R>) {
            return UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED);
        } else {
            return static_cast<R>(UCS_ERR_UNSUPPORTED);
        }
    }
};
template <typename F> inline constexpr F unsupported = &Unsupported<F>::fn;

/*
 * UCX's system-device id of a PCI function "dddd:bb:dd.f" (registers it with
 * UCX's topology on first use), or UCS_SYS_DEVICE_ID_UNKNOWN when the string
 * is empty or malformed.
 */
ucs_sys_device_t sys_device_from_bus_id(const std::string &bus_id);

/* The async context a worker was created with (uct_priv_worker_t in 1.13). */
inline ucs_async_context_t *worker_async(uct_worker_h worker)
{
    return reinterpret_cast<uct_priv_worker_t *>(worker)->async;
}

/*
 * What xqp's memory domain reports, in one form for every release:
 * fill_md_attr() turns it into the attributes the md query callback of this
 * UCX fills (uct_md_attr_t up to 1.13, uct_md_attr_v2_t from 1.14).
 */
struct MdCaps {
    uint64_t          flags            = 0; /* UCT_MD_FLAG_* */
    size_t            max_alloc        = 0;
    size_t            max_reg          = 0;
    uint64_t          reg_mem_types    = 0;
    uint64_t          detect_mem_types = 0;
    uint64_t          alloc_mem_types  = 0;
    uint64_t          access_mem_types = 0;
    /* memory types a registration cache serves (reported by md query v2 only) */
    uint64_t          cache_mem_types  = 0;
    size_t            rkey_packed_size = 0;
    ucs_linear_func_t reg_cost         = {};
    ucs_cpu_set_t     local_cpus       = {};
};

/* what a domain whose deregistration with UCT_MD_MEM_DEREG_FLAG_INVALIDATE
 * ends remote access reports (UCX 1.15 adds the RMA and AMO kinds, which UCP
 * asks of an interface-connected transport's lanes when errors are handled) */
#ifdef XQP_UCX_HAVE_MD_FLAG_INVALIDATE_RMA
inline constexpr uint64_t kMdFlagsInvalidate = uint64_t{UCT_MD_FLAG_INVALIDATE} |
                                                uint64_t{UCT_MD_FLAG_INVALIDATE_RMA} |
                                                uint64_t{UCT_MD_FLAG_INVALIDATE_AMO};
#else
inline constexpr uint64_t kMdFlagsInvalidate = UCT_MD_FLAG_INVALIDATE;
#endif

#ifdef XQP_UCX_HAVE_MD_QUERY_V2
using md_attr_t = uct_md_attr_v2_t;
#else
using md_attr_t = uct_md_attr_t;
#endif

/* Fills the md query callback's attributes from caps; every attribute xqp
 * does not set has UCX's default. */
void fill_md_attr(const MdCaps &caps, md_attr_t *attr);

/* ucs_rcache_params_t's alignment (up to 1.16; later releases take it in
 * rcache_get) */
inline void set_rcache_alignment([[maybe_unused]] ucs_rcache_params_t *params,
                                 [[maybe_unused]] size_t alignment)
{
#ifdef XQP_UCX_HAVE_RCACHE_PARAMS_ALIGNMENT
    params->alignment     = alignment;
    params->max_alignment = alignment;
#endif
}

/* ucs_rcache_get(), with the alignment where this release takes it (1.17+);
 * older releases use the one set_rcache_alignment() stored. */
inline ucs_status_t rcache_get(ucs_rcache_t *rcache, void *address, size_t length,
                               [[maybe_unused]] size_t alignment, int prot, void *arg,
                               ucs_rcache_region_t **region_p)
{
#ifdef XQP_UCX_HAVE_RCACHE_GET_ALIGNMENT
    return ucs_rcache_get(rcache, address, length, alignment, prot, arg, region_p);
#else
    return ucs_rcache_get(rcache, address, length, prot, arg, region_p);
#endif
}

/*
 * Whether a registration grants exactly the access rights it was asked for.
 * UCP keeps registrations in its own cache and hands them out again for
 * later operations on the same buffer. From UCX 1.17 it records the rights
 * each one was made with and registers again when an operation needs more.
 * Up to 1.16 it looks only at the memory domains: a buffer registered for
 * local access by one protocol (received into with a rendezvous get, sent
 * with eager zero-copy) is later packed as the remote key of a rendezvous
 * send, and the peer's RDMA read then fails ("remote access error").
 * There every registration must grant every right, as UCX's own IB memory
 * domain always does.
 */
#ifdef XQP_UCX_HAVE_UCP_MEMH_ACCESS_FLAGS
inline constexpr bool kExactAccessRights = true;
#else
inline constexpr bool kExactAccessRights = false;
#endif

/* The UCT_MD_MEM_ACCESS_* rights a registration asked for with the mem_reg
 * flags `flags` must grant (none given: all, as UCT defines). */
constexpr unsigned registration_access(unsigned flags)
{
    const unsigned asked = flags & UCT_MD_MEM_ACCESS_ALL;
    return (kExactAccessRights && (asked != 0)) ? asked : unsigned(UCT_MD_MEM_ACCESS_ALL);
}

} // namespace xqp::compat

#endif
