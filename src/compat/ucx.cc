#include "compat/ucx.h"

#include <dlfcn.h>

#include <string>

namespace xqp::compat {

std::optional<Version> running_version()
{
    using get_version_t = void (*)(unsigned *, unsigned *, unsigned *);
    void *sym = dlsym(RTLD_DEFAULT, "ucp_get_version");
    if (sym == nullptr) {
        Dl_info info = {};
        if ((dladdr(reinterpret_cast<void *>(uct_query_components), &info) == 0) ||
            (info.dli_fname == nullptr)) {
            return std::nullopt;
        }
        std::string path = info.dli_fname;
        path             = path.substr(0, path.rfind('/') + 1) + "libucp.so.0";
        /* kept loaded: unloading UCX libraries from a constructor is unsafe */
        void *ucp = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
        if (ucp == nullptr) {
            return std::nullopt;
        }
        sym = dlsym(ucp, "ucp_get_version");
        if (sym == nullptr) {
            return std::nullopt;
        }
    }
    Version v;
    reinterpret_cast<get_version_t>(sym)(&v.major, &v.minor, &v.patch);
    return v;
}

void register_component(uct_component_t *component, uct_tl_t *const *tls, size_t num_tls)
{
    uct_component_register(component);
    for (size_t i = 0; i < num_tls; ++i) {
        uct_tl_register(component, tls[i]);
    }
}

void unregister_component(uct_component_t *component, uct_tl_t *const *tls, size_t num_tls)
{
    for (size_t i = 0; i < num_tls; ++i) {
        uct_tl_unregister(tls[i]);
        ucs_list_del(&tls[i]->list);
    }
    uct_component_unregister(component);
    ucs_list_del(&component->list);
}

} // namespace xqp::compat
