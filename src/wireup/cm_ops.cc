#include "wireup/cm_ops.h"

#include <cerrno>
#include <cstring>

namespace xqp::wireup {

/* librdmacm returns -1 and sets errno */
static int cm_result(int ret)
{
    return (ret == 0) ? 0 : ((errno != 0) ? errno : EIO);
}

int RdmaCmOps::create_id(void *context, rdma_cm_id **id)
{
    return cm_result(rdma_create_id(channel_, id, context, RDMA_PS_TCP));
}

int RdmaCmOps::resolve_addr(rdma_cm_id *id, const sockaddr *dst, int timeout_ms)
{
    return cm_result(rdma_resolve_addr(id, nullptr, const_cast<sockaddr *>(dst), timeout_ms));
}

int RdmaCmOps::resolve_route(rdma_cm_id *id, int timeout_ms)
{
    return cm_result(rdma_resolve_route(id, timeout_ms));
}

int RdmaCmOps::set_local_ece(rdma_cm_id *id, const Ece &ece)
{
    ibv_ece e = {};
    e.vendor_id = ece.vendor_id;
    e.options   = ece.options;
    return cm_result(rdma_set_local_ece(id, &e));
}

int RdmaCmOps::get_remote_ece(rdma_cm_id *id, Ece *ece)
{
    ibv_ece e = {};
    const int ret = cm_result(rdma_get_remote_ece(id, &e));
    ece->vendor_id = (ret == 0) ? e.vendor_id : 0;
    ece->options   = (ret == 0) ? e.options : 0;
    return ret;
}

static rdma_conn_param to_conn_param(const ConnParams &p)
{
    rdma_conn_param param     = {};
    param.private_data        = p.private_data;
    param.private_data_len    = p.private_data_len;
    param.responder_resources = p.responder_resources;
    param.initiator_depth     = p.initiator_depth;
    param.retry_count         = p.retry_count;
    param.rnr_retry_count     = p.rnr_retry_count;
    param.qp_num              = p.qp_num;
    param.flow_control        = 1;
    return param;
}

int RdmaCmOps::connect(rdma_cm_id *id, const ConnParams &params)
{
    rdma_conn_param param = to_conn_param(params);
    param.srq             = (shape_.srq != nullptr) ? 1 : 0;
    return cm_result(rdma_connect(id, &param));
}

int RdmaCmOps::establish(rdma_cm_id *id)
{
    return cm_result(rdma_establish(id));
}

int RdmaCmOps::accept(rdma_cm_id *id, const ConnParams &params)
{
    rdma_conn_param param = to_conn_param(params);
    param.srq             = (shape_.srq != nullptr) ? 1 : 0;
    return cm_result(rdma_accept(id, &param));
}

int RdmaCmOps::reject(rdma_cm_id *id)
{
    return cm_result(rdma_reject(id, nullptr, 0));
}

int RdmaCmOps::reject_ece(rdma_cm_id *id)
{
    return cm_result(rdma_reject_ece(id, nullptr, 0));
}

int RdmaCmOps::reject_yield(rdma_cm_id *id, const uint8_t *pdata, uint8_t len)
{
    return cm_result(rdma_reject(id, pdata, len));
}

int RdmaCmOps::disconnect(rdma_cm_id *id)
{
    return cm_result(rdma_disconnect(id));
}

void RdmaCmOps::destroy_id(rdma_cm_id *id)
{
    rdma_destroy_id(id);
}

int RdmaCmOps::create_qp(rdma_cm_id *id, QpRole role, ibv_qp **qp)
{
    if ((id->verbs == nullptr) || (id->verbs != shape_.pd->context)) {
        /* the data QP must live on the device rdma_cm resolved */
        return ENODEV;
    }
    ibv_qp_init_attr attr = {};
    attr.send_cq          = shape_.send_cq;
    attr.recv_cq          = shape_.recv_cq;
    attr.srq              = shape_.srq;
    attr.qp_type          = IBV_QPT_RC;
    attr.sq_sig_all       = 0;
    const bool active        = (role == QpRole::Active);
    attr.cap.max_send_wr     = active ? shape_.max_send_wr : 1;
    attr.cap.max_recv_wr     = (shape_.srq != nullptr) ? 0 : shape_.max_recv_wr;
    attr.cap.max_send_sge    = active ? shape_.max_send_sge : 1;
    attr.cap.max_recv_sge    = shape_.max_recv_sge;
    attr.cap.max_inline_data = active ? shape_.max_inline_data : 0;
    *qp = ibv_create_qp(shape_.pd, &attr);
    return (*qp != nullptr) ? 0 : ((errno != 0) ? errno : ENOMEM);
}

/* RNR NAK timer code 12: 0.64 ms (rdma_cm leaves it at 0, i.e. 655 ms) */
constexpr uint8_t kMinRnrTimer = 12;

int RdmaCmOps::modify_qp(rdma_cm_id *id, ibv_qp *qp, ibv_qp_state state)
{
    ibv_qp_attr attr = {};
    int mask         = 0;
    attr.qp_state    = state;
    if (rdma_init_qp_attr(id, &attr, &mask) != 0) {
        return cm_result(-1);
    }
    if (state == IBV_QPS_INIT) {
        /* rdma_cm grants local write only; the data path needs RDMA */
        attr.qp_access_flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_ATOMIC;
    } else if (state == IBV_QPS_RTR) {
        /* rdma_cm leaves the RNR NAK timer at 0, i.e. 655 ms: a sender that
         * finds the shared receive queue empty would stall that long. Ask
         * for 0.64 ms (code 12), as verbs transports usually do. */
        attr.min_rnr_timer = kMinRnrTimer;
        mask |= IBV_QP_MIN_RNR_TIMER;
    }
    return ibv_modify_qp(qp, &attr, mask);
}

/* the index of gid in the port's GID table (RoCE v2 first, as rdma_cm
 * prefers it), or -1 */
static int gid_index(ibv_context *ctx, uint8_t port, int table_len, const ibv_gid &gid)
{
    int found = -1;
    for (int i = 0; i < table_len; ++i) {
        ibv_gid_entry entry = {};
        if ((ibv_query_gid_ex(ctx, port, i, &entry, 0) != 0) ||
            (std::memcmp(entry.gid.raw, gid.raw, sizeof(gid.raw)) != 0)) {
            continue;
        }
        if (entry.gid_type == IBV_GID_TYPE_ROCE_V2) {
            return i;
        }
        if (found < 0) {
            found = i;
        }
    }
    return found;
}

int RdmaCmOps::connect_self(rdma_cm_id *id, ibv_qp *qp, const ConnParams &params)
{
    int err = modify_qp(id, qp, IBV_QPS_INIT);
    if (err != 0) {
        return err;
    }
    ibv_port_attr port = {};
    err = ibv_query_port(id->verbs, id->port_num, &port);
    if (err != 0) {
        return err;
    }
    ibv_qp_attr attr        = {};
    attr.qp_state           = IBV_QPS_RTR;
    attr.path_mtu           = port.active_mtu;
    attr.dest_qp_num        = qp->qp_num;
    attr.rq_psn             = 0;
    attr.max_dest_rd_atomic = params.responder_resources;
    attr.min_rnr_timer      = kMinRnrTimer; /* as modify_qp asks */
    attr.ah_attr.port_num   = id->port_num;
    if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
        /* RoCE: a global route to the GID rdma_cm resolved as our source */
        if ((id->route.num_paths < 1) || (id->route.path_rec == nullptr)) {
            return EINVAL;
        }
        const ibv_gid &sgid = id->route.path_rec[0].sgid;
        const int index     = gid_index(id->verbs, id->port_num, port.gid_tbl_len, sgid);
        if (index < 0) {
            return ENOENT;
        }
        attr.ah_attr.is_global      = 1;
        attr.ah_attr.grh.dgid       = sgid;
        attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(index);
        attr.ah_attr.grh.hop_limit  = 64;
    } else {
        attr.ah_attr.dlid = port.lid;
    }
    err = ibv_modify_qp(qp, &attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err != 0) {
        return err;
    }
    attr               = {};
    attr.qp_state      = IBV_QPS_RTS;
    attr.timeout       = 14; /* 67 ms */
    attr.retry_cnt     = params.retry_count;
    attr.rnr_retry     = params.rnr_retry_count;
    attr.sq_psn        = 0;
    attr.max_rd_atomic = params.initiator_depth;
    return ibv_modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int RdmaCmOps::error_qp(ibv_qp *qp)
{
    ibv_qp_attr attr = {};
    attr.qp_state    = IBV_QPS_ERR;
    return ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

void RdmaCmOps::destroy_qp(ibv_qp *qp)
{
    ibv_destroy_qp(qp);
}

} // namespace xqp::wireup
