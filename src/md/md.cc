#include "md/md.h"

#include "common/boundary.h"
#include "compat/ops.h"
#include "verbs/discovery.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <memory>
#include <mutex>

namespace xqp::md {

/* indexed by Locality */
static const char *locality_names[] = {"off", "auto", NULL};
static_assert(LOCALITY_LAST == 2, "locality_names must follow enum Locality");

ucs_config_field_t config_table[] = {
    {"", "", NULL, ucs_offsetof(Config, super), UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"LOCALITY", "auto",
     "Use the hwloc topology to find the CPUs and NUMA nodes local to each RDMA\n"
     "device and report them to UCX for resource selection:\n"
     " auto - use it when the device's locality can be found, else the whole machine\n"
     " off  - report the whole machine",
     ucs_offsetof(Config, locality), UCS_CONFIG_TYPE_ENUM(locality_names)},

    {"RCACHE", "try",
     "Registration cache: keep memory registered after uct_md_mem_dereg and\n"
     "reuse it for the same pages (invalidated when they are unmapped):\n"
     " yes - use it, fail when it cannot be created\n"
     " try - use it when it can be created\n"
     " no  - register and deregister every time\n"
     "Either way a registration grants exactly the access rights requested\n"
     "(one cache per set of rights); with UCX releases up to 1.16, whose UCP\n"
     "reuses a registration whatever rights it was made with, every right.",
     ucs_offsetof(Config, rcache), UCS_CONFIG_TYPE_TERNARY},

    {"TOPO_XML", "",
     "Read the topology from this hwloc XML file instead of the live machine\n"
     "(to test placement or simulate another node). Empty: the live topology.",
     ucs_offsetof(Config, topo_xml), UCS_CONFIG_TYPE_STRING},

    {}
};

static void md_close(uct_md_h md)
{
    delete MemoryDomain::from(md);
}

static ucs_status_t md_query(uct_md_h md, compat::MdCaps *caps)
{
    return boundary("md_query", [&] {
        MemoryDomain::from(md)->query(caps);
        return UCS_OK;
    });
}

/* ibv access flags for a registration: no wider than the rights it must
 * grant (compat::registration_access: exactly those asked, or all of them
 * where UCP reuses registrations regardless of their rights) */
int access_flags(unsigned uct_flags)
{
    const unsigned access = compat::registration_access(uct_flags);
    /* local write: the HCA writes received data and read responses here */
    int flags = IBV_ACCESS_LOCAL_WRITE;
    if (access & UCT_MD_MEM_ACCESS_REMOTE_PUT) {
        flags |= IBV_ACCESS_REMOTE_WRITE;
    }
    if (access & UCT_MD_MEM_ACCESS_REMOTE_GET) {
        flags |= IBV_ACCESS_REMOTE_READ;
    }
    if (access & UCT_MD_MEM_ACCESS_REMOTE_ATOMIC) {
        flags |= IBV_ACCESS_REMOTE_ATOMIC;
    }
    return flags;
}

static ibv_mr *register_mr(MemoryDomain *md, void *address, size_t length, int access,
                           bool silent)
{
    ibv_mr *mr = ibv_reg_mr(md->pd(), address, length, access);
    if ((mr == nullptr) && !silent) {
        ucs_error("xqp: ibv_reg_mr(%p, %zu) on %s failed: %m", address, length,
                  md->device_name().c_str());
    }
    return mr;
}

static ucs_status_t md_mem_reg(uct_md_h md, void *address, size_t length, unsigned flags,
                               uct_mem_h *memh_p)
{
    auto *self       = MemoryDomain::from(md);
    const int access = access_flags(flags);
    if (ucs_rcache_t *rcache = self->rcache(access)) {
        ucs_rcache_region_t *region;
        const ucs_status_t status = compat::rcache_get(rcache, address, length,
                                                       ucs_get_page_size(),
                                                       PROT_READ | PROT_WRITE, &flags, &region);
        if (status != UCS_OK) {
            return status;
        }
        *memh_p = &reinterpret_cast<RcacheRegion *>(region)->memh;
        return UCS_OK;
    }
    ibv_mr *mr = register_mr(self, address, length, access, flags & UCT_MD_MEM_FLAG_HIDE_ERRORS);
    if (mr == nullptr) {
        return UCS_ERR_IO_ERROR;
    }
    *memh_p = new (std::nothrow) Memh{mr};
    if (*memh_p == nullptr) {
        ibv_dereg_mr(mr);
        return UCS_ERR_NO_MEMORY;
    }
    return UCS_OK;
}

/* an invalidated cached region's memory registration is gone */
static void region_invalidated(void *comp)
{
    uct_invoke_completion(static_cast<uct_completion_t *>(comp), UCS_OK);
}

/* With UCT_MD_MEM_DEREG_FLAG_INVALIDATE, the completion runs once no remote
 * access through the registration's rkey can succeed any more: after
 * ibv_dereg_mr, which for a cached region happens when its last user puts
 * it (the cache hands it to no later registration). */
static ucs_status_t md_mem_dereg(uct_md_h, const uct_md_mem_dereg_params_t *params)
{
    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 1);
    auto *memh = static_cast<Memh *>(params->memh);
    const bool invalidate = UCT_MD_MEM_DEREG_FIELD_VALUE(params, flags, FIELD_FLAGS, 0) &
                            UCT_MD_MEM_DEREG_FLAG_INVALIDATE;
    uct_completion_t *comp = UCT_MD_MEM_DEREG_FIELD_VALUE(params, comp, FIELD_COMPLETION, nullptr);
    if (invalidate && (comp == nullptr)) {
        return UCS_ERR_INVALID_PARAM; /* (UCX checks it only in its debug builds) */
    }
    if (memh->rcache != nullptr) {
        auto *region = reinterpret_cast<RcacheRegion *>(reinterpret_cast<char *>(memh) -
                                                        offsetof(RcacheRegion, memh));
        if (invalidate) {
            ucs_rcache_region_invalidate(memh->rcache, &region->super, region_invalidated,
                                         comp);
        }
        ucs_rcache_region_put(memh->rcache, &region->super);
        return UCS_OK;
    }
    const int ret = ibv_dereg_mr(memh->mr);
    delete memh;
    if (ret != 0) {
        ucs_error("xqp: ibv_dereg_mr: %s", strerror(ret));
        return UCS_ERR_IO_ERROR;
    }
    if (invalidate) {
        uct_invoke_completion(comp, UCS_OK);
    }
    return UCS_OK;
}

static ucs_status_t md_mkey_pack(uct_md_h, uct_mem_h memh, const compat::MkeyPackParams *,
                                 void *rkey_buffer)
{
    pack_rkey(static_cast<Memh *>(memh)->mr->rkey, rkey_buffer);
    return UCS_OK;
}

/* registration cache callbacks: a cached region is shared by later
 * registrations of the same pages with the same access rights (the cache
 * of their slot) */
static ucs_status_t rcache_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                   ucs_rcache_region_t *rregion, uint16_t rcache_flags)
{
    auto *slot   = static_cast<MemoryDomain::RcacheSlot *>(context);
    auto *region = reinterpret_cast<RcacheRegion *>(rregion);
    const unsigned uct_flags = *static_cast<unsigned *>(arg);
    const bool silent = (rcache_flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS) ||
                        (uct_flags & UCT_MD_MEM_FLAG_HIDE_ERRORS);
    region->memh.mr     = register_mr(slot->md, reinterpret_cast<void *>(rregion->super.start),
                                      rregion->super.end - rregion->super.start, slot->access,
                                      silent);
    region->memh.rcache = rcache;
    return (region->memh.mr != nullptr) ? UCS_OK : UCS_ERR_IO_ERROR;
}

static void rcache_mem_dereg(void *, ucs_rcache_t *, ucs_rcache_region_t *rregion)
{
    auto *region = reinterpret_cast<RcacheRegion *>(rregion);
    if (region->memh.mr != nullptr) {
        ibv_dereg_mr(region->memh.mr);
        region->memh.mr = nullptr;
    }
}

static void rcache_dump_region(void *, ucs_rcache_t *, ucs_rcache_region_t *rregion, char *buf,
                               size_t max)
{
    const auto *region = reinterpret_cast<RcacheRegion *>(rregion);
    std::snprintf(buf, max, "lkey 0x%x rkey 0x%x", region->memh.mr ? region->memh.mr->lkey : 0,
                  region->memh.mr ? region->memh.mr->rkey : 0);
}

static const ucs_rcache_ops_t rcache_ops =
        compat::make_rcache_ops<rcache_mem_reg, rcache_mem_dereg, rcache_dump_region>();

void pack_rkey(uint32_t rkey, void *buffer)
{
    const uint32_t words[2] = {kRkeyTag, rkey};
    std::memcpy(buffer, words, sizeof(words));
}

ucs_status_t unpack_rkey(const void *buffer, uint32_t *rkey)
{
    uint32_t words[2];
    std::memcpy(words, buffer, sizeof(words));
    if (words[0] != kRkeyTag) {
        ucs_error("xqp: invalid remote key (tag 0x%x): not packed by an xqp memory domain",
                  words[0]);
        return UCS_ERR_INVALID_PARAM;
    }
    *rkey = words[1];
    return UCS_OK;
}

static uct_md_ops_t md_ops =
        compat::make_md_ops<md_close, md_query, md_mem_reg, md_mem_dereg, md_mkey_pack>();

/*
 * The device's verbs context as librdmacm opened it: the data QPs are
 * created on cm_id->verbs, so the protection domain, the CQs and every
 * memory registration must come from that same context.
 */
static ibv_context *cm_device_context(const std::string &name, verbs::CmDeviceList *list)
{
    int num = 0;
    list->reset(rdma_get_devices(&num));
    if (!*list) {
        throw Error(UCS_ERR_NO_DEVICE, "no RDMA device named '" + name + "': " +
                                       errno_message("rdma_get_devices", errno));
    }
    for (int i = 0; i < num; ++i) {
        if (name == ibv_get_device_name(list->get()[i]->device)) {
            return list->get()[i];
        }
    }
    throw Error(UCS_ERR_NO_DEVICE, "no RDMA device named '" + name + "'");
}

/* Locality of one device; never fails (locality is an optimisation). */
static topo::DeviceLocality find_locality(const std::string &device_name, const Config &config)
{
    if (config.locality == LOCALITY_OFF) {
        return topo::unknown_locality(device_name, "UCX_XQP_LOCALITY=off");
    }
    const std::string xml = (config.topo_xml != nullptr) ? config.topo_xml : "";
    std::string error;
    /* one topology per source for the whole process: loading the live one
     * takes milliseconds and hwloc's I/O discovery keeps memory per load */
    static std::mutex lock;
    static std::map<std::string, std::shared_ptr<topo::Topology>> loaded;
    std::shared_ptr<topo::Topology> topology;
    {
        std::lock_guard<std::mutex> guard(lock);
        auto it = loaded.find(xml);
        if (it != loaded.end()) {
            topology = it->second;
        } else {
            topology = topo::Topology::load(xml, &error);
            if (topology) {
                loaded.emplace(xml, topology);
            }
        }
    }
    if (!topology) {
        if (!xml.empty()) {
            /* the user asked for this file: say so, but keep working */
            ucs_warn("xqp: UCX_XQP_TOPO_XML: %s; locality of %s unknown", error.c_str(),
                     device_name.c_str());
        }
        return topo::unknown_locality(device_name, error);
    }
    return topology->locate(device_name);
}

MemoryDomain::MemoryDomain(uct_component_t *component, const std::string &device_name,
                           const Config &config)
    : handle_{}, device_name_(device_name),
      context_(cm_device_context(device_name, &cm_devices_)),
      pd_(ibv_alloc_pd(context_)),
      locality_(find_locality(device_name, config)),
      sys_device_(compat::sys_device_from_bus_id(locality_.pci_bus_id))
{
    if (!pd_) {
        throw_errno("ibv_alloc_pd(" + device_name + ")", errno);
    }
    handle_.super.ops       = &md_ops;
    handle_.super.component = component;
    handle_.owner           = this;

    UCS_CPU_ZERO(&local_cpus_);
    topo::Bitmap cpus;
    if (!locality_.whole_machine && cpus && cpus.from_list(locality_.cpuset) &&
        !hwloc_bitmap_iszero(cpus.get())) {
        int cpu;
        hwloc_bitmap_foreach_begin(cpu, cpus.get()) {
            if (cpu < UCS_CPU_SETSIZE) {
                UCS_CPU_SET(cpu, &local_cpus_);
            }
        }
        hwloc_bitmap_foreach_end();
    } else {
        std::memset(&local_cpus_, 0xff, sizeof(local_cpus_));
    }
    ucs_debug("xqp: locality %s", topo::format_line(locality_).c_str());

    for (size_t i = 0; i < kAccessSets; ++i) {
        rcaches_[i].md     = this;
        rcaches_[i].access = IBV_ACCESS_LOCAL_WRITE | static_cast<int>(i << 1);
        ucs_assert(&slot_of(rcaches_[i].access) == &rcaches_[i]);
    }
    if (config.rcache != UCS_NO) {
        /* the cache for every right (UCP's usual request) now: whether
         * caches can be made at all is known at open */
        const int all = access_flags(UCT_MD_MEM_ACCESS_ALL);
        if (create_rcache(slot_of(all)) != nullptr) {
            rcache_enabled_ = true;
        } else if (config.rcache == UCS_YES) {
            throw Error(UCS_ERR_NO_RESOURCE,
                        "UCX_XQP_RCACHE=yes but the registration cache cannot be created");
        } else {
            ucs_debug("xqp: %s: no registration cache; registering directly",
                      device_name.c_str());
        }
    }
}

ucs_rcache_t *MemoryDomain::create_rcache(RcacheSlot &slot)
{
    ucs_rcache_params_t params = {};
    params.region_struct_size  = sizeof(RcacheRegion);
    compat::set_rcache_alignment(&params, ucs_get_page_size());
    params.ucm_events          = UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MEM_TYPE_FREE;
    params.ucm_event_priority  = 1000;
    params.ops                 = &rcache_ops;
    params.context             = &slot;
    params.flags               = UCS_RCACHE_FLAG_PURGE_ON_FORK;
    params.max_regions         = ULONG_MAX;
    params.max_size            = SIZE_MAX;
    params.max_unreleased      = SIZE_MAX;
    const std::string name     = "xqp_" + device_name_ + "_" + std::to_string(slot.access);
    ucs_rcache_t *rcache       = nullptr;
    const ucs_status_t status  = ucs_rcache_create(&params, name.c_str(), nullptr, &rcache);
    if (status != UCS_OK) {
        ucs_debug("xqp: %s: cannot create registration cache %s: %s", device_name_.c_str(),
                  name.c_str(), ucs_status_string(status));
        return nullptr;
    }
    slot.rcache.store(rcache, std::memory_order_release);
    return rcache;
}

ucs_rcache_t *MemoryDomain::rcache(int access)
{
    if (!rcache_enabled_) {
        return nullptr;
    }
    RcacheSlot &slot   = slot_of(access);
    ucs_rcache_t *rcache = slot.rcache.load(std::memory_order_acquire);
    if (ucs_likely(rcache != nullptr)) {
        return rcache;
    }
    std::lock_guard<std::mutex> lock(rcache_mutex_);
    rcache = slot.rcache.load(std::memory_order_acquire);
    /* when this set's cache cannot be made, its registrations go direct */
    return (rcache != nullptr) ? rcache : create_rcache(slot);
}

MemoryDomain::~MemoryDomain()
{
    for (auto &slot : rcaches_) {
        if (ucs_rcache_t *rcache = slot.rcache.load()) {
            ucs_rcache_destroy(rcache);
        }
    }
}

void MemoryDomain::query(compat::MdCaps *caps) const
{
    caps->flags            = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH | UCT_MD_FLAG_NEED_RKEY |
                             compat::kMdFlagsInvalidate;
    /* no allocation (no UCT_MD_FLAG_ALLOC): UCP allocates only through
     * domains with that flag. The bound itself is UCX's IB domain's
     * (ULONG_MAX): UCX's gtest trims its transfer sizes by it, and 0 made
     * UCX 1.13.1's uct_p2p_* transfer tests skip for xqp (max_length 0) */
    caps->max_alloc        = SIZE_MAX;
    caps->max_reg          = SIZE_MAX;
    caps->reg_mem_types    = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->detect_mem_types = 0;
    caps->alloc_mem_types  = 0;
    caps->access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    /* UCP need not cache registrations this domain caches itself */
    caps->cache_mem_types  = rcache_enabled_ ? UCS_BIT(UCS_MEMORY_TYPE_HOST) : 0;
    caps->rkey_packed_size = kRkeyPackedSize;
    /* pinning cost, in the order of what verbs providers show */
    caps->reg_cost         = ucs_linear_func_make(16e-6, 0.06e-9);
    caps->local_cpus       = local_cpus_;
}

ucs_status_t open(uct_component_t *component, const char *md_name,
                  const uct_md_config_t *config, uct_md_h *md_p)
{
    return boundary("md_open", [&] {
        auto md = std::make_unique<MemoryDomain>(
                component, md_name, *reinterpret_cast<const Config *>(config));
        ucs_debug("xqp: opened memory domain %s", md_name);
        *md_p = md.release()->handle();
        return UCS_OK;
    });
}

ucs_status_t query_resources(uct_component_t *, uct_md_resource_desc_t **resources_p,
                             unsigned *num_resources_p)
{
    return boundary("query_md_resources", [&] {
        const auto names = verbs::scan_device_names();
        uct_md_resource_desc_t *resources = nullptr;
        if (!names.empty()) {
            resources = static_cast<uct_md_resource_desc_t *>(
                    ucs_calloc(names.size(), sizeof(*resources), "xqp md resources"));
            if (resources == nullptr) {
                throw std::bad_alloc();
            }
        }
        for (size_t i = 0; i < names.size(); ++i) {
            ucs_strncpy_zero(resources[i].md_name, names[i].c_str(),
                             sizeof(resources[i].md_name));
        }
        *resources_p     = resources;
        *num_resources_p = static_cast<unsigned>(names.size());
        return UCS_OK;
    });
}

} // namespace xqp::md
