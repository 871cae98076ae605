/*
 * xqp - ECE (Enhanced Connection Establishment) negotiated with the peer.
 *
 * The decision is a set of pure functions over what the local provider
 * reports, what the peer sent and the user's policy; EceNegotiator drives
 * them through a provider seam (EceProvider) in the exact order of
 * rdma_get_remote_ece(3) / rdma_set_local_ece(3) / ibv_set_ece(3):
 *
 *   active:  ibv_create_qp -> ibv_query_ece -> rdma_set_local_ece ->
 *            rdma_connect -> CONNECT_RESPONSE -> rdma_get_remote_ece ->
 *            ibv_set_ece -> RTR/RTS -> rdma_establish
 *   passive: ibv_create_qp -> rdma_get_remote_ece -> ibv_set_ece ->
 *            INIT/RTR/RTS -> ibv_query_ece -> rdma_set_local_ece ->
 *            rdma_accept   (or rdma_reject_ece)
 *
 * Facts the code respects:
 *  - vendor_id 0 means "no ECE": rdma_set_local_ece() refuses it (and a
 *    non-zero comp_mask), so nothing is sent then;
 *  - the CM carries vendor_id as 24 bits: vendors are compared masked;
 *  - the kernel's reply echoes the vendor_id it received, with the passive
 *    side's options;
 *  - mlx5's ibv_query_ece() reports the accepted options only after the next
 *    ibv_modify_qp(); providers without ECE (rxe, ...) return EOPNOTSUPP.
 */
#ifndef XQP_WIREUP_ECE_H
#define XQP_WIREUP_ECE_H

#include <cstdint>
#include <optional>
#include <string>

struct ibv_qp;

namespace xqp::wireup {

/* The CM transports 24 bits of vendor_id. */
constexpr uint32_t kEceWireVendorMask = 0x00ffffffu;

struct Ece {
    uint32_t vendor_id = 0; /* 0: no ECE */
    uint32_t options   = 0;

    bool present() const { return vendor_id != 0; }
    bool operator==(const Ece &o) const
    {
        return (vendor_id == o.vendor_id) && (options == o.options);
    }
};

/* "vendor 0x15b3 options 0x3", or "none" */
std::string to_string(const Ece &ece);

enum class EceMode {
    Off,  /* never query/set/send ECE */
    Auto, /* use what both sides and both providers support; fall back silently */
    On,   /* the required options must be agreed, else reject / fail */
};

struct EcePolicy {
    EceMode  mode     = EceMode::Auto;
    uint32_t required = 0;          /* with On: options that must be agreed */
    uint32_t desired  = 0xffffffffu; /* options offered/accepted when supported */
    /* UCX_XQP_ECE_LOCAL: advertise this instead of what the provider reports
     * (interoperability and testing on providers without ECE) */
    std::optional<Ece> local_override;
};

/* What the local provider said (ibv_query_ece): err 0 and ece, or an errno. */
struct ProviderEce {
    int err = 0; /* 0, EOPNOTSUPP (provider has no ECE), or another errno */
    Ece ece;
};

/* Active side, after ibv_create_qp + ibv_query_ece, before rdma_connect. */
struct Offer {
    bool        fail = false; /* policy cannot be met locally: do not connect */
    bool        send = false; /* call rdma_set_local_ece(ece) */
    Ece         ece;
    uint32_t    missing = 0;  /* with fail: required options not available */
    std::string reason;       /* why fail, or why nothing is sent (for the debug log) */
};
Offer make_offer(const EcePolicy &policy, const ProviderEce &local);

/* Passive side, on CONNECT_REQUEST: remote is rdma_get_remote_ece(). */
struct PassiveDecision {
    bool        accept = true; /* false: rdma_reject_ece() */
    Ece         to_qp;         /* ibv_set_ece() before INIT/RTR/RTS, when present() */
    uint32_t    missing = 0;   /* with !accept: required options not agreed */
    std::string reason;
};
PassiveDecision decide_request(const EcePolicy &policy, const ProviderEce &local,
                               const Ece &remote);

/*
 * Passive side, after INIT/RTR/RTS: what to pass to rdma_set_local_ece()
 * before rdma_accept(). after_modify is ibv_query_ece() on the now modified
 * QP (the provider's accepted options); when the provider has no ECE the
 * decision's own agreement is sent. Not present(): send nothing.
 */
Ece passive_reply(const PassiveDecision &decision, const ProviderEce &after_modify);

/* Active side, on CONNECT_RESPONSE: reply is rdma_get_remote_ece(). */
struct ActiveDecision {
    bool        ok = true; /* false: the connection fails (disconnect, report) */
    Ece         to_qp;     /* ibv_set_ece() before RTR/RTS, when present() */
    uint32_t    missing = 0;
    std::string reason;
};
ActiveDecision decide_response(const EcePolicy &policy, const Offer &sent, const Ece &reply);

/* "missing ece options 0x4 (required 0x5, agreed 0x1)" style text */
std::string describe_missing(uint32_t required, uint32_t agreed);

/* What one connection ended up with; logged once and exposed to tests. */
struct EceResult {
    Ece  sent;        /* what we put in rdma_set_local_ece, or none */
    Ece  received;    /* what rdma_get_remote_ece returned, or none */
    Ece  agreed;      /* the agreement on the wire (given to ibv_set_ece), or none */
    bool applied = false; /* ibv_set_ece accepted `agreed` for our QP */
    int  set_err = 0;     /* ibv_set_ece's error when not applied (EOPNOTSUPP on rxe) */

    bool negotiated() const { return agreed.present(); }
};
std::string to_string(const EceResult &result);

/* The verbs calls ECE needs, as a seam: the real one calls libibverbs, unit
 * tests plug in providers that model mlx5 and rxe. Return 0 or an errno. */
class EceProvider {
public:
    virtual ~EceProvider() = default;
    virtual int query_ece(ibv_qp *qp, Ece *ece) = 0;
    virtual int set_ece(ibv_qp *qp, const Ece &ece) = 0;
};

/* libibverbs: ibv_query_ece / ibv_set_ece (comp_mask 0). */
class VerbsEceProvider final : public EceProvider {
public:
    int query_ece(ibv_qp *qp, Ece *ece) override;
    int set_ece(ibv_qp *qp, const Ece &ece) override;
};

/*
 * One side of one connection. The caller (the wireup state machine) owns the
 * QP and the rdma_cm id and calls these at the documented points; each call
 * returns what to do with rdma_cm next.
 */
class EceNegotiator {
public:
    EceNegotiator(const EcePolicy &policy, EceProvider &provider)
        : policy_(policy), provider_(provider) {}

    /* active, after ibv_create_qp: the offer for rdma_set_local_ece */
    const Offer &prepare_offer(ibv_qp *qp);
    /* active, on CONNECT_RESPONSE with rdma_get_remote_ece(): applies
     * ibv_set_ece; the caller then moves the QP to RTR/RTS and establishes */
    ActiveDecision on_response(ibv_qp *qp, const Ece &reply);

    /* passive, after ibv_create_qp with rdma_get_remote_ece(): applies
     * ibv_set_ece; the caller then moves the QP INIT/RTR/RTS (or rejects) */
    PassiveDecision on_request(ibv_qp *qp, const Ece &remote);
    /* passive, after the modify: what to give rdma_set_local_ece (not
     * present(): nothing) before rdma_accept */
    Ece reply(ibv_qp *qp);

    const EceResult &result() const { return result_; }

private:
    EcePolicy        policy_;
    EceProvider     &provider_;
    Offer            offer_;
    PassiveDecision  passive_;
    EceResult        result_;
};

} // namespace xqp::wireup

#endif
