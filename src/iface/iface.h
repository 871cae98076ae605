/*
 * xqp - the transport ("tl") and its interface.
 *
 * A transport resource exists for every ACTIVE port that rdma_cm can reach
 * through an IP address (see verbs/discovery.h). The interface carries no
 * operations yet: it opens, reports its attributes and advertises no
 * capabilities, so UCP leaves it alone until the wireup and data-path layers
 * fill the operations in.
 */
#ifndef XQP_IFACE_IFACE_H
#define XQP_IFACE_IFACE_H

#include "compat/ucx.h"
#include "md/md.h"

#include <string>

namespace xqp::iface {

/* UCX_XQP_* interface options */
struct Config {
    uct_iface_config_t super;
};

extern ucs_config_field_t config_table[];

class Iface {
public:
    struct Handle {
        uct_base_iface_t super;
        Iface           *owner;
    };

    Iface(md::MemoryDomain *md, uct_worker_h worker, const uct_iface_params_t *params,
          const Config &config);
    ~Iface();
    Iface(const Iface &) = delete;
    Iface &operator=(const Iface &) = delete;

    static Iface *from(uct_iface_h iface)
    {
        return reinterpret_cast<Handle *>(iface)->owner;
    }

    uct_iface_h handle() { return &handle_.super.super; }
    void query(uct_iface_attr_t *attr);

    const std::string &resource_name() const { return resource_name_; }
    unsigned port() const { return port_; }

private:
    Handle            handle_;
    md::MemoryDomain *md_;
    std::string       resource_name_;
    unsigned          port_;
    double            bandwidth_; /* bytes/s of the port */
};

/* The transport definition registered with the component. */
extern uct_tl_t tl;

} // namespace xqp::iface

#endif
