/*
 * xqp - RAII owners for libibverbs / librdmacm handles.
 *
 * Each owner is a std::unique_ptr with a deleter that calls the matching
 * destroy function, so a handle is released exactly once on every path,
 * including when an exception unwinds a half-built object.
 */
#ifndef XQP_VERBS_HANDLES_H
#define XQP_VERBS_HANDLES_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

namespace xqp::verbs {

struct DeviceListDeleter {
    void operator()(ibv_device **list) const noexcept { ibv_free_device_list(list); }
};
struct ContextDeleter {
    void operator()(ibv_context *ctx) const noexcept { ibv_close_device(ctx); }
};
struct EventChannelDeleter {
    void operator()(rdma_event_channel *ch) const noexcept { rdma_destroy_event_channel(ch); }
};
struct CmIdDeleter {
    void operator()(rdma_cm_id *id) const noexcept { rdma_destroy_id(id); }
};

/* librdmacm keeps a context open for every device it has seen, and closes
 * the context of a removed device only when a later device-list refresh
 * finds the device gone and nothing on it is left. The kernel's removal of
 * a device (rdma link delete, a NIC reset) waits until every process has
 * closed it: so whoever releases a device list refreshes once more, or a
 * process that outlived the removal would hold the device forever. */
struct CmDeviceListDeleter {
    void operator()(ibv_context **list) const noexcept
    {
        rdma_free_devices(list);
        int num = 0;
        if (ibv_context **fresh = rdma_get_devices(&num)) {
            rdma_free_devices(fresh);
        }
    }
};
struct PdDeleter {
    void operator()(ibv_pd *pd) const noexcept { ibv_dealloc_pd(pd); }
};
struct CqDeleter {
    void operator()(ibv_cq *cq) const noexcept { ibv_destroy_cq(cq); }
};
struct SrqDeleter {
    void operator()(ibv_srq *srq) const noexcept { ibv_destroy_srq(srq); }
};
struct CompChannelDeleter {
    void operator()(ibv_comp_channel *ch) const noexcept { ibv_destroy_comp_channel(ch); }
};

using DeviceList   = std::unique_ptr<ibv_device *, DeviceListDeleter>;
using CmDeviceList = std::unique_ptr<ibv_context *, CmDeviceListDeleter>;
using Pd           = std::unique_ptr<ibv_pd, PdDeleter>;
using Cq           = std::unique_ptr<ibv_cq, CqDeleter>;
using CompChannel  = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using Srq          = std::unique_ptr<ibv_srq, SrqDeleter>;
using Context      = std::unique_ptr<ibv_context, ContextDeleter>;
using EventChannel = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using CmId         = std::unique_ptr<rdma_cm_id, CmIdDeleter>;

} // namespace xqp::verbs

#endif
