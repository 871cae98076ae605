/*
 * xqp - memory domain: one per RDMA device.
 */
#ifndef XQP_MD_MD_H
#define XQP_MD_MD_H

#include "compat/ucx.h"
#include "topology/topology.h"
#include "verbs/handles.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>

namespace xqp::md {

/* UCX_XQP_* memory domain options */
struct Config {
    uct_md_config_t super;
    int             rcache;    /* UCX_XQP_RCACHE: ucs_ternary_auto_value_t */
    char           *topo_xml;  /* UCX_XQP_TOPO_XML: hwloc XML instead of the live topology */
    int             locality;  /* UCX_XQP_LOCALITY: Locality */
};

enum Locality { LOCALITY_OFF, LOCALITY_AUTO, LOCALITY_LAST };

extern ucs_config_field_t config_table[];

/* What a uct_mem_h of xqp points to. */
struct Memh {
    ibv_mr       *mr;
    ucs_rcache_t *rcache = nullptr; /* the cache holding it; none: registered directly */
};

/* A region of the registration cache, holding its registration. */
struct RcacheRegion {
    ucs_rcache_region_t super;
    Memh                memh;
};

class MemoryDomain {
public:
    /* What UCX holds: a plain C struct whose first member is uct_md_t. */
    struct Handle {
        uct_md_t      super;
        MemoryDomain *owner;
    };

    MemoryDomain(uct_component_t *component, const std::string &device_name,
                 const Config &config);
    ~MemoryDomain();
    MemoryDomain(const MemoryDomain &) = delete;
    MemoryDomain &operator=(const MemoryDomain &) = delete;

    static MemoryDomain *from(uct_md_h md)
    {
        return reinterpret_cast<Handle *>(md)->owner;
    }

    uct_md_h handle() { return &handle_.super; }
    const std::string &device_name() const { return device_name_; }
    ibv_context *context() const { return context_; }
    ibv_pd *pd() const { return pd_.get(); }
    /* the registration cache for one set of ibv access flags (created on
     * first use), or nullptr: register directly */
    ucs_rcache_t *rcache(int access);

    void query(compat::MdCaps *caps) const;

    /* where the device sits (whole machine when unknown or disabled) */
    const topo::DeviceLocality &locality() const { return locality_; }
    ucs_sys_device_t sys_device() const { return sys_device_; }

private:
    Handle             handle_;
    std::string        device_name_;
    verbs::CmDeviceList cm_devices_;  /* keeps context_ open */
    ibv_context        *context_;
    verbs::Pd          pd_;
    topo::DeviceLocality locality_;
    ucs_sys_device_t   sys_device_;
    ucs_cpu_set_t      local_cpus_;
    /* One registration cache per set of access rights, so that a cached
     * registration grants exactly what its users asked for: regions are
     * shared by later registrations of the same pages, and a single cache
     * would have to register every region with every right. Indexed by the
     * remote rights (write, read, atomic); local write is always there. */
public:
    struct RcacheSlot {
        MemoryDomain                *md     = nullptr;
        int                          access = 0;
        std::atomic<ucs_rcache_t *>  rcache{nullptr};
    };

private:
    ucs_rcache_t *create_rcache(RcacheSlot &slot);
    /* the slot of a set of ibv access flags: remote write, read and atomic
     * (IBV_ACCESS_REMOTE_* are bits 1-3) make the index */
    RcacheSlot &slot_of(int access) { return rcaches_[(access >> 1) & 7]; }
    static constexpr size_t kAccessSets = 8;
    std::array<RcacheSlot, kAccessSets> rcaches_;
    std::mutex         rcache_mutex_;      /* creation of a slot's cache */
    bool               rcache_enabled_ = false;
};

/* A packed remote key: a tag (so that foreign or corrupt keys are refused)
 * and the MR's rkey. */
constexpr uint32_t kRkeyTag        = 0x58515052u; /* "XQPR" */
constexpr size_t   kRkeyPackedSize = 2 * sizeof(uint32_t);
void pack_rkey(uint32_t rkey, void *buffer);
ucs_status_t unpack_rkey(const void *buffer, uint32_t *rkey);

/* ibv access flags of a registration asked for with these mem_reg flags
 * (compat::registration_access; all when none is given) */
int access_flags(unsigned uct_flags);

/* uct_component_t::md_open */
ucs_status_t open(uct_component_t *component, const char *md_name,
                  const uct_md_config_t *config, uct_md_h *md_p);

/* uct_component_t::query_md_resources: one MD per RDMA device */
ucs_status_t query_resources(uct_component_t *component,
                             uct_md_resource_desc_t **resources_p,
                             unsigned *num_resources_p);

} // namespace xqp::md

#endif
