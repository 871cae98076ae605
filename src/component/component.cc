#include "component/component.h"

#include "compat/ops.h"
#include "iface/iface.h"
#include "md/md.h"

#include <dlfcn.h>

#include <cstdio>

namespace xqp::component {

using Component = uct_component_t;

static ucs_status_t rkey_unpack(uct_component_t *, const void *rkey_buffer, uct_rkey_t *rkey_p,
                                void **handle_p)
{
    uint32_t rkey;
    const ucs_status_t status = md::unpack_rkey(rkey_buffer, &rkey);
    if (status == UCS_OK) {
        *rkey_p   = rkey;
        *handle_p = nullptr;
    }
    return status;
}

static ucs_status_t rkey_release(uct_component_t *, uct_rkey_t, void *)
{
    return UCS_OK;
}

uct_component_t component = {
    .name               = "xqp",
    .query_md_resources = md::query_resources,
    .md_open            = md::open,
    .cm_open            = compat::unsupported<decltype(Component::cm_open)>,
    XQP_UCX_COMPONENT_RKEY_SLOTS(rkey_unpack, rkey_release)
    .md_config          = compat::config_entry("xqp memory domain", "XQP_", md::config_table,
                                               sizeof(md::Config)),
    /* no client/server connection manager (UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY) */
    .cm_config          = compat::config_entry("", "", nullptr, 0),
    .tl_list            = {},
    .list               = {},
    .flags              = 0,
    .md_vfs_init        = compat::unsupported<decltype(Component::md_vfs_init)>,
};

static uct_tl_t *const tls[] = {&iface::tl};
static bool registered       = false;

bool register_with_ucx() noexcept
{
    const auto running         = compat::running_version();
    const std::string mismatch = running ?
            compat::version_mismatch(compat::built_version(), *running) :
            "xqp: cannot determine the running UCX version (no ucp_get_version); "
            "transport xqp is disabled";
    if (!mismatch.empty()) {
        /* UCX's own logger is internal API of a release we were not built
         * for: do not call it */
        std::fprintf(stderr, "%s\n", mismatch.c_str());
        return false;
    }
    if (const uct_component_t *other = compat::registered_component(component.name)) {
        Dl_info self = {}, first = {};
        dladdr(reinterpret_cast<const void *>(&component), &self);
        dladdr(reinterpret_cast<const void *>(other), &first);
        ucs_debug("xqp: component already registered by %s; this copy (%s) stays unused",
                  first.dli_fname ? first.dli_fname : "?", self.dli_fname ? self.dli_fname : "?");
        return false;
    }
    ucs_list_head_init(&component.tl_list);
    compat::register_component(&component, tls, sizeof(tls) / sizeof(tls[0]));
    registered = true;
    return true;
}

void unregister_from_ucx() noexcept
{
    if (registered) {
        compat::unregister_component(&component, tls, sizeof(tls) / sizeof(tls[0]));
        registered = false;
    }
}

} // namespace xqp::component
