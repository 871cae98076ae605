#include "compat/ucx.h"

#include <dlfcn.h>

#include <cstdio>

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

namespace xqp::compat {

ucs_sys_device_t sys_device_from_bus_id(const std::string &bus_id)
{
    unsigned domain, bus, slot, function;
    char tail;
    if (std::sscanf(bus_id.c_str(), "%4x:%2x:%2x.%1x%c", &domain, &bus, &slot, &function,
                    &tail) != 4) {
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    ucs_sys_bus_id_t id;
    id.domain   = static_cast<uint16_t>(domain);
    id.bus      = static_cast<uint8_t>(bus);
    id.slot     = static_cast<uint8_t>(slot);
    id.function = static_cast<uint8_t>(function);
    ucs_sys_device_t dev = UCS_SYS_DEVICE_ID_UNKNOWN;
    if (ucs_topo_find_device_by_bus_id(&id, &dev) != UCS_OK) {
        return UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    return dev;
}

} // namespace xqp::compat
