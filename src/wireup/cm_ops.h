/*
 * xqp - the rdma_cm and verbs calls the wireup state machine makes.
 *
 * A seam: RdmaCmOps calls librdmacm/libibverbs; the state machine's unit
 * tests plug in a recorder that checks the documented order of calls.
 * Every call returns 0 or an errno value.
 */
#ifndef XQP_WIREUP_CM_OPS_H
#define XQP_WIREUP_CM_OPS_H

#include "wireup/ece.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>

namespace xqp::wireup {

/*
 * Which side a data QP serves. Endpoints connect to interfaces, so data only
 * flows from the active side: the QP of a passive connection receives (on
 * the interface's SRQ) and responds to RDMA reads and atomics, which need no
 * send queue entries. It gets the smallest send queue, which makes accepting
 * cheaper (the provider allocates and maps every send queue entry).
 */
enum class QpRole { Active, Passive };

/* What rdma_connect / rdma_accept send besides the private data. */
struct ConnParams {
    uint32_t       qp_num              = 0;
    uint8_t        responder_resources = 1;
    uint8_t        initiator_depth     = 1;
    uint8_t        retry_count         = 7;
    uint8_t        rnr_retry_count     = 7;
    const uint8_t *private_data        = nullptr;
    uint8_t        private_data_len    = 0;
};

class CmOps {
public:
    virtual ~CmOps() = default;

    virtual int create_id(void *context, rdma_cm_id **id) = 0;
    virtual int resolve_addr(rdma_cm_id *id, const sockaddr *dst, int timeout_ms) = 0;
    virtual int resolve_route(rdma_cm_id *id, int timeout_ms) = 0;
    virtual int set_local_ece(rdma_cm_id *id, const Ece &ece) = 0;
    virtual int get_remote_ece(rdma_cm_id *id, Ece *ece) = 0;
    virtual int connect(rdma_cm_id *id, const ConnParams &params) = 0;
    virtual int establish(rdma_cm_id *id) = 0;
    virtual int accept(rdma_cm_id *id, const ConnParams &params) = 0;
    virtual int reject(rdma_cm_id *id) = 0;     /* malformed request */
    virtual int reject_ece(rdma_cm_id *id) = 0; /* ECE options cannot be met */
    /* the peers connected to each other at once: ours is kept (the
     * private data is a Yield hello) */
    virtual int reject_yield(rdma_cm_id *id, const uint8_t *pdata, uint8_t len) = 0;
    virtual int disconnect(rdma_cm_id *id) = 0;
    virtual void destroy_id(rdma_cm_id *id) = 0;

    /* the data QP, created by us on id->verbs (external QP: id->qp stays NULL) */
    virtual int create_qp(rdma_cm_id *id, QpRole role, ibv_qp **qp) = 0;
    /* INIT, RTR or RTS with the attributes rdma_init_qp_attr() gives */
    virtual int modify_qp(rdma_cm_id *id, ibv_qp *qp, ibv_qp_state state) = 0;
    /* loopback: INIT, RTR and RTS with the QP as its own destination, on
     * the port and source GID rdma_cm resolved for id (an endpoint to its
     * own interface: one QP, no CM exchange, as verbs transports connect
     * to themselves); params gives the RDMA read depths and retry counts */
    virtual int connect_self(rdma_cm_id *id, ibv_qp *qp, const ConnParams &params) = 0;
    /* to the error state: requests in flight complete with flush errors,
     * new ones fail; safe while another thread posts to the QP */
    virtual int error_qp(ibv_qp *qp) = 0;
    virtual void destroy_qp(ibv_qp *qp) = 0;
};

/* The QP shape the interface wants for its data QPs. */
struct QpShape {
    ibv_pd  *pd      = nullptr;
    ibv_cq  *send_cq = nullptr;
    ibv_cq  *recv_cq = nullptr;
    ibv_srq *srq     = nullptr;
    uint32_t max_send_wr     = 256;
    uint32_t max_recv_wr     = 1;
    uint32_t max_send_sge    = 1;
    uint32_t max_recv_sge    = 1;
    uint32_t max_inline_data = 0;
};

class RdmaCmOps final : public CmOps {
public:
    RdmaCmOps(rdma_event_channel *channel, const QpShape &shape)
        : channel_(channel), shape_(shape) {}

    int create_id(void *context, rdma_cm_id **id) override;
    int resolve_addr(rdma_cm_id *id, const sockaddr *dst, int timeout_ms) override;
    int resolve_route(rdma_cm_id *id, int timeout_ms) override;
    int set_local_ece(rdma_cm_id *id, const Ece &ece) override;
    int get_remote_ece(rdma_cm_id *id, Ece *ece) override;
    int connect(rdma_cm_id *id, const ConnParams &params) override;
    int establish(rdma_cm_id *id) override;
    int accept(rdma_cm_id *id, const ConnParams &params) override;
    int reject(rdma_cm_id *id) override;
    int reject_ece(rdma_cm_id *id) override;
    int reject_yield(rdma_cm_id *id, const uint8_t *pdata, uint8_t len) override;
    int disconnect(rdma_cm_id *id) override;
    void destroy_id(rdma_cm_id *id) override;
    int create_qp(rdma_cm_id *id, QpRole role, ibv_qp **qp) override;
    int modify_qp(rdma_cm_id *id, ibv_qp *qp, ibv_qp_state state) override;
    int connect_self(rdma_cm_id *id, ibv_qp *qp, const ConnParams &params) override;
    int error_qp(ibv_qp *qp) override;
    void destroy_qp(ibv_qp *qp) override;

    const QpShape &shape() const { return shape_; }

private:
    rdma_event_channel *channel_;
    QpShape             shape_;
};

} // namespace xqp::wireup

#endif
