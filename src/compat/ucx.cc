#include "compat/ucx.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include <string>

/* declared in uct_component.h only inside a macro before UCX 1.13 */
extern "C" ucs_list_link_t uct_components_list;

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

const uct_component_t *registered_component(const char *name)
{
    uct_component_t *c;
    ucs_list_for_each(c, &uct_components_list, list) {
        if (std::strcmp(c->name, name) == 0) {
            return c;
        }
    }
    return nullptr;
}

#ifdef XQP_UCX_HAVE_COMPONENT_REGISTER
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
#else
/* the component on UCX's list of components, its configuration tables
 * (memory domain, connection manager) and each transport's on UCX's global
 * configuration list, each transport on the component's list */
void register_component(uct_component_t *component, uct_tl_t *const *tls, size_t num_tls)
{
    ucs_list_add_tail(&uct_components_list, &component->list);
    ucs_list_add_tail(&ucs_config_global_list, &component->md_config.list);
    ucs_list_add_tail(&ucs_config_global_list, &component->cm_config.list);
    for (size_t i = 0; i < num_tls; ++i) {
        ucs_list_add_tail(&component->tl_list, &tls[i]->list);
        ucs_list_add_tail(&ucs_config_global_list, &tls[i]->config.list);
    }
}

void unregister_component(uct_component_t *component, uct_tl_t *const *tls, size_t num_tls)
{
    for (size_t i = 0; i < num_tls; ++i) {
        ucs_list_del(&tls[i]->config.list);
        ucs_list_del(&tls[i]->list);
    }
    ucs_list_del(&component->cm_config.list);
    ucs_list_del(&component->md_config.list);
    ucs_list_del(&component->list);
}
#endif

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

namespace xqp::compat {

void fill_md_attr(const MdCaps &caps, md_attr_t *attr)
{
#ifdef XQP_UCX_HAVE_MD_QUERY_V2
    /* UCX copies out only what the caller's field_mask asks for: keep the
     * mask it passed, start from UCX's defaults where it has a function for
     * them (some attributes must not be 0, e.g. reg_alignment) */
    const uint64_t field_mask = attr->field_mask;
    std::memset(attr, 0, sizeof(*attr));
    attr->field_mask = field_mask;
#  ifdef XQP_UCX_HAVE_MD_BASE_QUERY
    uct_md_base_md_query(attr);
#  endif
#  ifdef XQP_UCX_HAVE_MD_ATTR_REG_ALIGNMENT
    /* registrations need no alignment (the cache aligns its regions itself) */
    attr->reg_alignment = 1;
#  endif
    attr->flags            = caps.flags;
    attr->max_alloc        = caps.max_alloc;
    attr->max_reg          = caps.max_reg;
    attr->reg_mem_types    = caps.reg_mem_types;
    attr->detect_mem_types = caps.detect_mem_types;
    attr->alloc_mem_types  = caps.alloc_mem_types;
    attr->access_mem_types = caps.access_mem_types;
    attr->cache_mem_types  = caps.cache_mem_types;
#else
    std::memset(attr, 0, sizeof(*attr));
    attr->cap.flags            = caps.flags;
    attr->cap.max_alloc        = caps.max_alloc;
    attr->cap.max_reg          = caps.max_reg;
    attr->cap.reg_mem_types    = caps.reg_mem_types;
    attr->cap.detect_mem_types = caps.detect_mem_types;
    attr->cap.alloc_mem_types  = caps.alloc_mem_types;
    attr->cap.access_mem_types = caps.access_mem_types;
#endif
    attr->rkey_packed_size = caps.rkey_packed_size;
    attr->reg_cost         = caps.reg_cost;
    attr->local_cpus       = caps.local_cpus;
}

} // namespace xqp::compat
