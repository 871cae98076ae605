# xqp configure probes for the differences between UCX releases.
#
# xqp uses UCX's internal API (uct/base, ucs), which changes between releases
# without any version macro to tell. Each difference xqp depends on is probed
# here by compiling against the UCX source tree configure found (with UCX's
# regenerated build configuration first, as src/compat/ucx.h does), never by
# comparing version numbers. The results land in ucx-private/xqp_ucx_probes.h
# (written here rather than through AC_DEFINE, which would put them on every
# compiler command line): only src/compat/ includes it (and the tests whose
# expectations depend on a probe).
#
# One macro per difference; XQP_UCX_PROBES runs them all after XQP_CHECK_UCX.

# _XQP_UCX_PROBE_PROLOGUE: what every probe includes, like src/compat/ucx.h.
m4_define([_XQP_UCX_PROBE_PROLOGUE], [[
#include "ucx_build_config.h"
#include <cstddef>
#include <type_traits>
extern "C" {
#include <uct/api/uct.h>
#include <uct/base/uct_component.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <ucs/memory/rcache.h>
#include <ucs/config/global_opts.h>
}
]])

# XQP_UCX_PROBE(NAME, WHAT, BODY, [HEADER]): compiles BODY (statements of a
# function) against UCX, after the prologue and, when given, one more UCX
# internal HEADER (e.g. ucp/core/ucp_mm.h); when it compiles, defines
# XQP_UCX_HAVE_<NAME> in ucx-private/xqp_ucx_probes.h. WHAT is the configure
# message and the comment of the define. The result is added to the
# configure summary.
AC_DEFUN([XQP_UCX_PROBE], [
    AC_REQUIRE([_XQP_UCX_PROBE_FLAGS])
    AC_CACHE_CHECK([UCX: $2], [xqp_cv_ucx_have_$1], [
        xqp_save_CPPFLAGS=$CPPFLAGS
        xqp_save_CXXFLAGS=$CXXFLAGS
        CPPFLAGS="$CPPFLAGS $xqp_ucx_probe_cppflags"
        CXXFLAGS="$CXXFLAGS $XQP_CXXSTD"
        AC_COMPILE_IFELSE([AC_LANG_PROGRAM(_XQP_UCX_PROBE_PROLOGUE[]m4_ifval([$4], [[
extern "C" {
@%:@include <$4>
}
]]), [$3])],
            [xqp_cv_ucx_have_$1=yes], [xqp_cv_ucx_have_$1=no])
        CPPFLAGS=$xqp_save_CPPFLAGS
        CXXFLAGS=$xqp_save_CXXFLAGS])
    AS_IF([test "$xqp_cv_ucx_have_$1" = yes],
          [xqp_ucx_probe_defines="$xqp_ucx_probe_defines
/* $2 */
@%:@define XQP_UCX_HAVE_[]m4_toupper([$1]) 1"],
          [xqp_ucx_probe_defines="$xqp_ucx_probe_defines
/* $2: no */
/* @%:@undef XQP_UCX_HAVE_[]m4_toupper([$1]) */"])
    XQP_UCX_PROBES_SUMMARY="$XQP_UCX_PROBES_SUMMARY
    m4_toupper([$1]): $xqp_cv_ucx_have_$1"
])

# The include path of the probes: UCX's regenerated build configuration, the
# source tree's internal headers, the installed (or the tree's) public ones.
AC_DEFUN([_XQP_UCX_PROBE_FLAGS], [
    xqp_ucx_probe_cppflags="-I`pwd`/ucx-private -isystem $with_ucx_src/src $UCX_CFLAGS"
    XQP_UCX_PROBES_SUMMARY=
    xqp_ucx_probe_defines=
])

# XQP_UCX_PROBE_SANITY: the probe set-up itself must work (a probe that
# fails because the headers do not compile at all would silently pick the
# old API everywhere).
AC_DEFUN([XQP_UCX_PROBE_SANITY], [
    AC_REQUIRE([_XQP_UCX_PROBE_FLAGS])
    AC_MSG_CHECKING([whether UCX's internal headers compile as C++])
    xqp_save_CPPFLAGS=$CPPFLAGS
    xqp_save_CXXFLAGS=$CXXFLAGS
    CPPFLAGS="$CPPFLAGS $xqp_ucx_probe_cppflags"
    CXXFLAGS="$CXXFLAGS $XQP_CXXSTD"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM(_XQP_UCX_PROBE_PROLOGUE,
                                       [[uct_md_ops_t ops = {}; (void)ops;]])],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no])
         AC_MSG_ERROR([UCX's internal headers from $with_ucx_src do not compile (see config.log): the probes cannot run])])
    CPPFLAGS=$xqp_save_CPPFLAGS
    CXXFLAGS=$xqp_save_CXXFLAGS
])

# ---------------------------------------------------------------- version

# UCX 1.13: UCT_VERNO_PATCH (before, only UCT_VERNO_STRING carries the patch).
AC_DEFUN([XQP_UCX_CHECK_VERNO_PATCH], [
    XQP_UCX_PROBE([verno_patch], [UCT_VERNO_PATCH is defined],
        [[unsigned patch = UCT_VERNO_PATCH; (void)patch;]])
])

# ---------------------------------------------------------------- configuration

# UCX 1.15: ucs_config_global_list_entry_t::flags (UCX's bookkeeping, 0 at first).
AC_DEFUN([XQP_UCX_CHECK_CONFIG_ENTRY_FLAGS], [
    XQP_UCX_PROBE([config_entry_flags], [ucs_config_global_list_entry_t has flags],
        [[ucs_config_global_list_entry_t e = {}; e.flags = 0; (void)e;]])
])

# ---------------------------------------------------------------- memory domain

# UCX 1.14: uct_md_ops_t::query fills uct_md_attr_v2_t (flat fields) instead
# of uct_md_attr_t (cap.*).
AC_DEFUN([XQP_UCX_CHECK_MD_QUERY_V2], [
    XQP_UCX_PROBE([md_query_v2], [md query callback takes uct_md_attr_v2_t],
        [[static_assert(std::is_same_v<uct_md_query_func_t,
                                       ucs_status_t (*)(uct_md_h, uct_md_attr_v2_t *)>);]])
])

# UCX 1.16: uct_md_attr_v2_t::reg_alignment, which must not stay 0.
AC_DEFUN([XQP_UCX_CHECK_MD_ATTR_REG_ALIGNMENT], [
    XQP_UCX_PROBE([md_attr_reg_alignment], [uct_md_attr_v2_t has reg_alignment],
        [[uct_md_attr_v2_t attr = {}; attr.reg_alignment = 1; (void)attr;]])
])

# UCX 1.17: uct_md_base_md_query() fills UCX's defaults of uct_md_attr_v2_t.
AC_DEFUN([XQP_UCX_CHECK_MD_BASE_QUERY], [
    XQP_UCX_PROBE([md_base_query], [uct_md_base_md_query() exists],
        [[void (*fn)(uct_md_attr_v2_t *) = uct_md_base_md_query; (void)fn;]])
])

# UCX 1.15: UCT_MD_FLAG_INVALIDATE_RMA and _AMO (uct_v2.h), which UCP 1.22
# asks of an interface-connected transport's rendezvous lanes when errors are
# handled; before, UCT_MD_FLAG_INVALIDATE alone.
AC_DEFUN([XQP_UCX_CHECK_MD_FLAG_INVALIDATE_RMA], [
    XQP_UCX_PROBE([md_flag_invalidate_rma], [UCT_MD_FLAG_INVALIDATE_RMA exists],
        [[uint64_t flags = UCT_MD_FLAG_INVALIDATE_RMA | UCT_MD_FLAG_INVALIDATE_AMO; (void)flags;]])
])

# UCX 1.14: uct_md_ops_t::mem_reg takes uct_md_mem_reg_params_t instead of flags.
AC_DEFUN([XQP_UCX_CHECK_MEM_REG_PARAMS], [
    XQP_UCX_PROBE([mem_reg_params], [mem_reg callback takes uct_md_mem_reg_params_t],
        [[static_assert(std::is_same_v<uct_md_mem_reg_func_t,
                                       ucs_status_t (*)(uct_md_h, void *, size_t,
                                                        const uct_md_mem_reg_params_t *,
                                                        uct_mem_h *)>);]])
])

# UCX 1.13: uct_md_ops_t::mkey_pack takes uct_md_mkey_pack_params_t (before:
# md, memh and the buffer only).
AC_DEFUN([XQP_UCX_CHECK_MKEY_PACK_PARAMS], [
    XQP_UCX_PROBE([mkey_pack_params], [mkey_pack callback takes uct_md_mkey_pack_params_t],
        [[static_assert(std::is_same_v<uct_md_mkey_pack_func_t,
                                       ucs_status_t (*)(uct_md_h, uct_mem_h,
                                                        const uct_md_mkey_pack_params_t *,
                                                        void *)> ||
                        std::is_same_v<uct_md_mkey_pack_func_t,
                                       ucs_status_t (*)(uct_md_h, uct_mem_h, void *, size_t,
                                                        const uct_md_mkey_pack_params_t *,
                                                        void *)>);]])
])

# UCX 1.16: uct_md_ops_t::mkey_pack also gets the address and length.
AC_DEFUN([XQP_UCX_CHECK_MKEY_PACK_ADDRESS], [
    XQP_UCX_PROBE([mkey_pack_address], [mkey_pack callback takes address and length],
        [[static_assert(std::is_same_v<uct_md_mkey_pack_func_t,
                                       ucs_status_t (*)(uct_md_h, uct_mem_h, void *, size_t,
                                                        const uct_md_mkey_pack_params_t *,
                                                        void *)>);]])
])

# UCX 1.14 added uct_md_ops_t::mem_attach, 1.16 removed
# is_sockaddr_accessible, 1.21 added mem_elem_pack.
AC_DEFUN([XQP_UCX_CHECK_MD_OPS_MEM_ATTACH], [
    XQP_UCX_PROBE([md_ops_mem_attach], [uct_md_ops_t has mem_attach],
        [[uct_md_ops_t ops = {}; ops.mem_attach = nullptr; (void)ops;]])
])
AC_DEFUN([XQP_UCX_CHECK_MD_OPS_IS_SOCKADDR_ACCESSIBLE], [
    XQP_UCX_PROBE([md_ops_is_sockaddr_accessible], [uct_md_ops_t has is_sockaddr_accessible],
        [[uct_md_ops_t ops = {}; ops.is_sockaddr_accessible = nullptr; (void)ops;]])
])
AC_DEFUN([XQP_UCX_CHECK_MD_OPS_MEM_ELEM_PACK], [
    XQP_UCX_PROBE([md_ops_mem_elem_pack], [uct_md_ops_t has mem_elem_pack],
        [[uct_md_ops_t ops = {}; ops.mem_elem_pack = nullptr; (void)ops;]])
])

# ---------------------------------------------------------------- registration cache

# UCX 1.17 moved the alignment from ucs_rcache_params_t to ucs_rcache_get().
AC_DEFUN([XQP_UCX_CHECK_RCACHE_PARAMS_ALIGNMENT], [
    XQP_UCX_PROBE([rcache_params_alignment], [ucs_rcache_params_t has alignment and max_alignment],
        [[ucs_rcache_params_t p = {}; p.alignment = 1; p.max_alignment = 1; (void)p;]])
])
AC_DEFUN([XQP_UCX_CHECK_RCACHE_GET_ALIGNMENT], [
    XQP_UCX_PROBE([rcache_get_alignment], [ucs_rcache_get() takes an alignment],
        [[static_assert(std::is_same_v<decltype(&ucs_rcache_get),
                                       ucs_status_t (*)(ucs_rcache_t *, void *, size_t, size_t,
                                                        int, void *, ucs_rcache_region_t **)>);]])
])

# UCX 1.18: ucs_rcache_ops_t::merge, called for every region merged with.
AC_DEFUN([XQP_UCX_CHECK_RCACHE_OPS_MERGE], [
    XQP_UCX_PROBE([rcache_ops_merge], [ucs_rcache_ops_t has merge],
        [[ucs_rcache_ops_t ops = {}; ops.merge = nullptr; (void)ops;]])
])

# UCX 1.17: UCP's memory handles record the access rights they were
# registered with (ucp_mem_t::uct_flags), and UCP registers again when a
# cached handle lacks the rights an operation needs. Before, UCP handed a
# cached handle out for any operation (a buffer registered for local access
# by one protocol, then packed as a remote key by the rendezvous), so xqp
# must grant every right on every registration there.
AC_DEFUN([XQP_UCX_CHECK_UCP_MEMH_ACCESS_FLAGS], [
    XQP_UCX_PROBE([ucp_memh_access_flags], [UCP's cached memory handles record their access rights],
        [[ucp_mem_t memh = {}; memh.uct_flags = UCT_MD_MEM_ACCESS_ALL; (void)memh;]],
        [ucp/core/ucp_mm.h])
])

# ---------------------------------------------------------------- component

# UCX 1.19: uct_component_t::rkey_unpack takes uct_rkey_unpack_params_t.
AC_DEFUN([XQP_UCX_CHECK_RKEY_UNPACK_PARAMS], [
    XQP_UCX_PROBE([rkey_unpack_params], [rkey_unpack callback takes uct_rkey_unpack_params_t],
        [[static_assert(std::is_same_v<uct_component_rkey_unpack_func_t,
                                       ucs_status_t (*)(uct_component_t *, const void *,
                                                        const uct_rkey_unpack_params_t *,
                                                        uct_rkey_t *, void **)>);]])
])

# UCX 1.16: uct_component_t::rkey_compare.
AC_DEFUN([XQP_UCX_CHECK_COMPONENT_RKEY_COMPARE], [
    XQP_UCX_PROBE([component_rkey_compare], [uct_component_t has rkey_compare],
        [[uct_component_t c = {}; c.rkey_compare = nullptr; (void)c;]])
])

# UCX 1.13: uct_component_register() and uct_tl_register(); before, UCX's
# own modules put themselves on the lists with static initializers
# (UCT_COMPONENT_REGISTER, UCT_TL_DEFINE).
AC_DEFUN([XQP_UCX_CHECK_COMPONENT_REGISTER], [
    XQP_UCX_PROBE([component_register], [uct_component_register() and uct_tl_register() exist],
        [[void (*c)(uct_component_t *) = uct_component_register;
          void (*t)(uct_component_t *, uct_tl_t *) = uct_tl_register; (void)c; (void)t;]])
])

# ---------------------------------------------------------------- interface

# UCX 1.13 to 1.15 export a complete default internal ops table; later
# releases leave it to each transport.
AC_DEFUN([XQP_UCX_CHECK_BASE_IFACE_INTERNAL_OPS], [
    XQP_UCX_PROBE([base_iface_internal_ops], [uct_base_iface_internal_ops exists],
        [[uct_iface_internal_ops_t *ops = &uct_base_iface_internal_ops; (void)ops;]])
])

# XQP_UCX_CHECK_INTERNAL_OP(FIELD, RELEASE): uct_iface_internal_ops_t::FIELD
# (the slots UCX added after 1.13; RELEASE is where it first appeared).
AC_DEFUN([XQP_UCX_CHECK_INTERNAL_OP], [
    XQP_UCX_PROBE([iface_internal_ops_$1], [uct_iface_internal_ops_t has $1 (UCX $2)],
        [[uct_iface_internal_ops_t ops = {}; ops.$1 = nullptr; (void)ops;]])
])

# UCX 1.20 and 1.22 (not 1.21): uct_iface_base_query_v2(), the default of the
# internal iface_query_v2.
AC_DEFUN([XQP_UCX_CHECK_IFACE_BASE_QUERY_V2], [
    XQP_UCX_PROBE([iface_base_query_v2], [uct_iface_base_query_v2() exists],
        [[uct_iface_query_v2_func_t fn = uct_iface_base_query_v2; (void)fn;]])
])

# UCX 1.15: uct_iface_is_reachable_params_t::scope (network or same device).
AC_DEFUN([XQP_UCX_CHECK_IS_REACHABLE_SCOPE], [
    XQP_UCX_PROBE([is_reachable_scope], [uct_iface_is_reachable_params_t has scope],
        [[uct_iface_is_reachable_params_t p = {}; p.scope = UCT_IFACE_REACHABILITY_SCOPE_DEVICE;
          (void)p;]])
])

# UCX 1.13: ucs_queue_is_empty() takes a const queue.
AC_DEFUN([XQP_UCX_CHECK_QUEUE_IS_EMPTY_CONST], [
    XQP_UCX_PROBE([queue_is_empty_const], [ucs_queue_is_empty() takes a const queue],
        [[const ucs_queue_head_t *q = nullptr; (void)ucs_queue_is_empty(q);]],
        [ucs/datastruct/queue.h])
])

# ---------------------------------------------------------------- loading

# UCX 1.22: UCX_PLUGIN_PATH, and libucs scans its module directories for any
# libuct_<name> module by itself (not only the modules it was built with).
# XQP_UCX_LOADS_PLUGINS (yes/no) goes to xqp-run and the integration suite:
# xqp-run then points UCX_PLUGIN_PATH at the plugin instead of preloading it.
AC_DEFUN([XQP_UCX_CHECK_PLUGIN_PATH], [
    XQP_UCX_PROBE([plugin_path], [UCX loads plugins from its module directory and UCX_PLUGIN_PATH],
        [[ucs_config_names_array_t *p = &ucs_global_opts.plugin_path; (void)p;]])
    AC_SUBST([XQP_UCX_LOADS_PLUGINS], [$xqp_cv_ucx_have_plugin_path])
])

# XQP_UCX_PROBES: every probe above, after XQP_CHECK_UCX.
AC_DEFUN([XQP_UCX_PROBES], [
    XQP_UCX_PROBE_SANITY
    XQP_UCX_CHECK_VERNO_PATCH
    XQP_UCX_CHECK_CONFIG_ENTRY_FLAGS
    XQP_UCX_CHECK_MD_QUERY_V2
    XQP_UCX_CHECK_MD_ATTR_REG_ALIGNMENT
    XQP_UCX_CHECK_MD_BASE_QUERY
    XQP_UCX_CHECK_MD_FLAG_INVALIDATE_RMA
    XQP_UCX_CHECK_MEM_REG_PARAMS
    XQP_UCX_CHECK_MKEY_PACK_PARAMS
    XQP_UCX_CHECK_MKEY_PACK_ADDRESS
    XQP_UCX_CHECK_MD_OPS_MEM_ATTACH
    XQP_UCX_CHECK_MD_OPS_IS_SOCKADDR_ACCESSIBLE
    XQP_UCX_CHECK_MD_OPS_MEM_ELEM_PACK
    XQP_UCX_CHECK_RCACHE_PARAMS_ALIGNMENT
    XQP_UCX_CHECK_RCACHE_GET_ALIGNMENT
    XQP_UCX_CHECK_RCACHE_OPS_MERGE
    XQP_UCX_CHECK_UCP_MEMH_ACCESS_FLAGS
    XQP_UCX_CHECK_RKEY_UNPACK_PARAMS
    XQP_UCX_CHECK_COMPONENT_RKEY_COMPARE
    XQP_UCX_CHECK_COMPONENT_REGISTER
    XQP_UCX_CHECK_BASE_IFACE_INTERNAL_OPS
    XQP_UCX_CHECK_INTERNAL_OP([ep_connect_to_ep_v2], [1.14])
    XQP_UCX_CHECK_INTERNAL_OP([iface_is_reachable_v2], [1.15])
    XQP_UCX_CHECK_INTERNAL_OP([ep_is_connected], [1.16])
    XQP_UCX_CHECK_INTERNAL_OP([iface_query_v2], [1.20, 1.22])
    XQP_UCX_CHECK_INTERNAL_OP([iface_mem_element_pack], [1.20 only])
    XQP_UCX_CHECK_INTERNAL_OP([ep_get_device_ep], [1.20])
    XQP_UCX_CHECK_INTERNAL_OP([ep_put_sgl_zcopy], [1.22])
    XQP_UCX_CHECK_IFACE_BASE_QUERY_V2
    XQP_UCX_CHECK_IS_REACHABLE_SCOPE
    XQP_UCX_CHECK_QUEUE_IS_EMPTY_CONST
    XQP_UCX_CHECK_PLUGIN_PATH
    {
        echo "/* Generated by configure: UCX $XQP_UCX_VERSION API probes (config/m4/ucx_compat.m4). Do not edit. */"
        echo "@%:@ifndef XQP_UCX_PROBES_H"
        echo "@%:@define XQP_UCX_PROBES_H"
        echo "$xqp_ucx_probe_defines"
        echo "@%:@endif"
    } > ucx-private/xqp_ucx_probes.h
    AC_MSG_NOTICE([wrote ucx-private/xqp_ucx_probes.h])
])
