/*
 * xqp test programs - small helpers over the public UCT API and /proc that
 * the gtest bed (bed.h) and the stand-alone test programs share. No gtest.
 */
#ifndef XQP_TEST_UCT_UTIL_H
#define XQP_TEST_UCT_UTIL_H

#include <uct/api/uct.h>

#include <dirent.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace xqp_test {

/* A function of the plugin's introspection API (include/xqp/xqp.h), or
 * nullptr: in the global scope when the plugin is preloaded (xqp-run before
 * UCX 1.22); otherwise in the plugin that UCX loaded from its module
 * directory or UCX_PLUGIN_PATH (RTLD_LOCAL), found by its soname once UCX
 * has loaded its modules. */
template <class Fn> Fn xqp_api(const char *name)
{
    void *sym = dlsym(RTLD_DEFAULT, name);
    if (sym == nullptr) {
        uct_component_h *components;
        unsigned num;
        if (uct_query_components(&components, &num) == UCS_OK) { /* loads UCX's modules */
            uct_release_component_list(components);
        }
        if (void *plugin = dlopen("libuct_xqp.so.0", RTLD_LAZY | RTLD_NOLOAD)) {
            sym = dlsym(plugin, name);
            dlclose(plugin);
        }
    }
    return reinterpret_cast<Fn>(sym);
}

/* what an endpoint needs to reach an interface (CONNECT_TO_IFACE) */
struct IfaceAddress {
    std::vector<uint8_t> dev, iface;
};

inline ucs_status_t iface_address(uct_iface_h iface, IfaceAddress *out)
{
    uct_iface_attr_t attr;
    ucs_status_t status = uct_iface_query(iface, &attr);
    if (status != UCS_OK) {
        return status;
    }
    out->dev.assign(attr.device_addr_len, 0);
    out->iface.assign(attr.iface_addr_len, 0);
    status = uct_iface_get_device_address(iface,
                                          reinterpret_cast<uct_device_addr_t *>(out->dev.data()));
    if (status != UCS_OK) {
        return status;
    }
    return uct_iface_get_address(iface, reinterpret_cast<uct_iface_addr_t *>(out->iface.data()));
}

/* an endpoint from `from` to the interface at `to` (it connects in the
 * background) */
inline ucs_status_t create_ep_to(uct_iface_h from, const IfaceAddress &to, uct_ep_h *ep)
{
    uct_ep_params_t params = {};
    params.field_mask      = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                             UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface           = from;
    params.dev_addr        = reinterpret_cast<const uct_device_addr_t *>(to.dev.data());
    params.iface_addr      = reinterpret_cast<const uct_iface_addr_t *>(to.iface.data());
    return uct_ep_create(&params, ep);
}

/* this process' open file descriptors */
inline int count_fds()
{
    int n = 0;
    if (DIR *dir = opendir("/proc/self/fd")) {
        while (readdir(dir) != nullptr) {
            ++n;
        }
        closedir(dir);
    }
    return n;
}

/* This process' lines in `rdma resource show KIND` (qp, cm_id, mr). The
 * kernel records the thread that created a resource, and QPs come from
 * UCX's async thread too: every thread's id counts. */
inline int count_rdma_resources(const char *kind)
{
    std::vector<std::string> tags;
    if (DIR *dir = opendir("/proc/self/task")) {
        while (dirent *e = readdir(dir)) {
            if (e->d_name[0] != '.') {
                tags.push_back(std::string(" pid ") + e->d_name + " ");
            }
        }
        closedir(dir);
    }
    const std::string cmd = std::string("rdma resource show ") + kind + " 2>/dev/null";
    FILE *p               = popen(cmd.c_str(), "r");
    if (p == nullptr) {
        return -1;
    }
    char line[1024];
    int n = 0;
    while (std::fgets(line, sizeof(line), p) != nullptr) {
        for (const auto &tag : tags) {
            if (std::strstr(line, tag.c_str()) != nullptr) {
                ++n;
                break;
            }
        }
    }
    pclose(p);
    return n;
}

} // namespace xqp_test

#endif
