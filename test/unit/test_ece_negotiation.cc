#include "ece_test_util.h"
#include "wireup/ece.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

using namespace xqp::wireup;
using namespace xqp::test;

/* ================================================================== provider models */

namespace {

/*
 * mlx5 as rdma-core/the kernel behave: before the QP is modified,
 * ibv_query_ece() reports the supported options; ibv_set_ece() checks the
 * vendor, keeps the (supported part of the) options pending; the next
 * ibv_modify_qp() (modify() here) makes them the accepted ones, which
 * ibv_query_ece() reports from then on. rxe: EOPNOTSUPP for both.
 */
class FakeProvider final : public EceProvider {
public:
    static FakeProvider mlx5(uint32_t supported, uint32_t vendor = kMlx)
    {
        FakeProvider p;
        p.has_ece_   = true;
        p.vendor_    = vendor;
        p.supported_ = supported;
        return p;
    }
    static FakeProvider rxe() { return FakeProvider(); }

    int query_ece(ibv_qp *qp, Ece *ece) override
    {
        ++query_calls;
        EXPECT_EQ(reinterpret_cast<ibv_qp *>(this), qp);
        if (!has_ece_) {
            return EOPNOTSUPP;
        }
        *ece = {vendor_, modified_ ? accepted_ : supported_};
        return 0;
    }

    int set_ece(ibv_qp *qp, const Ece &ece) override
    {
        ++set_calls;
        EXPECT_EQ(reinterpret_cast<ibv_qp *>(this), qp);
        EXPECT_FALSE(modified_) << "ibv_set_ece after the modify has no effect";
        if (!has_ece_) {
            return EOPNOTSUPP;
        }
        if (ece.vendor_id != vendor_) {
            return EINVAL;
        }
        pending_ = ece.options & supported_;
        return 0;
    }

    /* where the real code calls ibv_modify_qp() */
    void modify()
    {
        modified_ = true;
        accepted_ = pending_;
    }

    uint32_t accepted() const { return accepted_; }
    /* a distinct QP handle per provider; never dereferenced */
    ibv_qp  *qp() { return reinterpret_cast<ibv_qp *>(this); }
    int      calls() const { return query_calls + set_calls; }

    int query_calls = 0;
    int set_calls   = 0;

private:
    FakeProvider() = default;

    bool     has_ece_   = false;
    uint32_t vendor_    = 0;
    uint32_t supported_ = 0;
    uint32_t pending_   = 0;
    uint32_t accepted_  = 0;
    bool     modified_  = false;
};

/* IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED: what rdma_reject_ece() sends; the
 * active side sees it as RDMA_CM_EVENT_REJECTED with this status. */
constexpr int kRejVendorOptionNotSupported = 35;

/* The CM between the two sides. */
struct Wire {
    /* rdma_set_local_ece() on the active side -> rdma_get_remote_ece() on the
     * passive side: 24 bits of vendor; nothing set arrives as vendor 0. */
    static Ece request(const Offer &offer)
    {
        if (!offer.send) {
            return {};
        }
        return {offer.ece.vendor_id & 0x00ffffffu, offer.ece.options};
    }

    /* rdma_set_local_ece() on the passive side -> rdma_get_remote_ece() on
     * the active side: the vendor the passive side received, its options. */
    static Ece reply(const Ece &received_by_passive, const Ece &passive_set)
    {
        if (!passive_set.present()) {
            return {};
        }
        return {received_by_passive.vendor_id, passive_set.options};
    }
};

enum class Outcome {
    NotStarted,   /* the active side refused to connect (offer.fail) */
    Rejected,     /* the passive side called rdma_reject_ece() */
    ActiveFailed, /* CONNECT_RESPONSE handling failed on the active side */
    Established,
};

const char *name(Outcome o)
{
    switch (o) {
    case Outcome::NotStarted:   return "not started";
    case Outcome::Rejected:     return "rejected";
    case Outcome::ActiveFailed: return "active failed";
    case Outcome::Established:  return "established";
    }
    return "?";
}

struct Exchange {
    Outcome         outcome       = Outcome::NotStarted;
    int             reject_status = 0;
    Offer           offer;
    Ece             at_passive; /* rdma_get_remote_ece() on the passive side */
    PassiveDecision passive;
    Ece             passive_set; /* rdma_set_local_ece() on the passive side */
    Ece             at_active;   /* rdma_get_remote_ece() on the active side */
    ActiveDecision  active;
    EceResult       active_result;
    EceResult       passive_result;
};

/* The whole exchange, in the order of ece.h. */
Exchange negotiate(const EcePolicy &active_policy, FakeProvider &active_provider,
            const EcePolicy &passive_policy, FakeProvider &passive_provider)
{
    Exchange      r;
    EceNegotiator active(active_policy, active_provider);
    EceNegotiator passive(passive_policy, passive_provider);

    /* active: ibv_create_qp -> ibv_query_ece -> rdma_set_local_ece */
    r.offer = active.prepare_offer(active_provider.qp());
    r.active_result = active.result();
    if (r.offer.fail) {
        return r;
    }

    /* rdma_connect -> CONNECT_REQUEST */
    r.at_passive = Wire::request(r.offer);

    /* passive: ibv_create_qp -> rdma_get_remote_ece -> ibv_set_ece */
    r.passive        = passive.on_request(passive_provider.qp(), r.at_passive);
    r.passive_result = passive.result();
    if (!r.passive.accept) {
        /* rdma_reject_ece -> REJECTED on the active side, which fails */
        r.outcome       = Outcome::Rejected;
        r.reject_status = kRejVendorOptionNotSupported;
        return r;
    }

    /* passive: INIT/RTR/RTS -> ibv_query_ece -> rdma_set_local_ece -> rdma_accept */
    passive_provider.modify();
    r.passive_set    = passive.reply(passive_provider.qp());
    r.passive_result = passive.result();

    /* CONNECT_RESPONSE -> active: rdma_get_remote_ece -> ibv_set_ece */
    r.at_active     = Wire::reply(r.at_passive, r.passive_set);
    r.active        = active.on_response(active_provider.qp(), r.at_active);
    r.active_result = active.result();
    if (!r.active.ok) {
        r.outcome = Outcome::ActiveFailed;
        return r;
    }

    /* active: RTR/RTS -> rdma_establish */
    active_provider.modify();
    r.outcome = Outcome::Established;
    return r;
}

const Ece kNone{};

} // namespace

/* ================================================================== wire model sanity */

TEST(EceWireModel, CutsVendorAndEchoesIt)
{
    EXPECT_EQ((Ece{0x15b3, 0x3}), Wire::request(sent_offer(kWide, 0x3)));
    EXPECT_EQ(kNone, Wire::request(Offer{}));
    EXPECT_EQ((Ece{0x15b3, 0x1}), Wire::reply({0x15b3, 0x3}, {kWide, 0x1}));
    EXPECT_EQ(kNone, Wire::reply({0x15b3, 0x3}, {}));
}

TEST(EceFakeProvider, Mlx5ReportsSupportedThenAccepted)
{
    auto p = FakeProvider::mlx5(0x7);
    Ece  e;
    ASSERT_EQ(0, p.query_ece(p.qp(), &e));
    EXPECT_EQ((Ece{kMlx, 0x7}), e);
    EXPECT_EQ(EINVAL, p.set_ece(p.qp(), {kOther, 0x1}));
    EXPECT_EQ(EINVAL, p.set_ece(p.qp(), {kWide, 0x1}));
    EXPECT_EQ(0, p.set_ece(p.qp(), {kMlx, 0x1d}));
    ASSERT_EQ(0, p.query_ece(p.qp(), &e));
    EXPECT_EQ((Ece{kMlx, 0x7}), e); /* pending until the modify */
    p.modify();
    ASSERT_EQ(0, p.query_ece(p.qp(), &e));
    EXPECT_EQ((Ece{kMlx, 0x5}), e);

    auto r = FakeProvider::rxe();
    EXPECT_EQ(EOPNOTSUPP, r.query_ece(r.qp(), &e));
    EXPECT_EQ(EOPNOTSUPP, r.set_ece(r.qp(), {kMlx, 0x1}));
}

/* ================================================================== whole negotiation */

TEST(EceNegotiation, Mlx5ToMlx5IntersectsSupportedOptions)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x5);
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x7}), r.offer.ece);
    EXPECT_EQ((Ece{kMlx, 0x7}), r.at_passive);
    EXPECT_EQ((Ece{kMlx, 0x5}), r.passive.to_qp);
    EXPECT_EQ((Ece{kMlx, 0x5}), r.passive_set);
    EXPECT_EQ((Ece{kMlx, 0x5}), r.at_active);
    EXPECT_EQ((Ece{kMlx, 0x5}), r.active.to_qp);
    EXPECT_EQ(0x5u, a.accepted());
    EXPECT_EQ(0x5u, p.accepted());

    EXPECT_EQ("sent vendor 0x15b3 options 0x7, received vendor 0x15b3 options 0x5, "
              "agreed vendor 0x15b3 options 0x5 (applied)",
              to_string(r.active_result));
    EXPECT_EQ("sent vendor 0x15b3 options 0x5, received vendor 0x15b3 options 0x7, "
              "agreed vendor 0x15b3 options 0x5 (applied)",
              to_string(r.passive_result));
}

TEST(EceNegotiation, Mlx5ToMlx5PartialOverlapAndDesired)
{
    auto a = FakeProvider::mlx5(0x6);
    auto p = FakeProvider::mlx5(0xb);
    /* the active side only wants 0x2|0x4; the passive side supports 0x1|0x2|0x8 */
    const Exchange r = negotiate(policy(EceMode::Auto, 0, 0x6), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x6}), r.at_passive);
    EXPECT_EQ((Ece{kMlx, 0x2}), r.passive_set);
    EXPECT_EQ((Ece{kMlx, 0x2}), r.active.to_qp);
    EXPECT_EQ(0x2u, a.accepted());
    EXPECT_EQ(0x2u, p.accepted());
    EXPECT_TRUE(r.active_result.applied);
    EXPECT_TRUE(r.passive_result.applied);
}

TEST(EceNegotiation, PassiveRepliesWhatItsProviderAccepted)
{
    /* the passive side agrees 0x3 on the wire from an override, but its
     * provider only takes 0x1: the reply carries what the QP really has */
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x1);
    const Exchange r = negotiate(policy(EceMode::Auto, 0, 0x3), a,
                          policy(EceMode::Auto, 0, ~0u, Ece{kMlx, 0x3}), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x3}), r.passive.to_qp);
    EXPECT_EQ((Ece{kMlx, 0x1}), r.passive_set);
    EXPECT_EQ((Ece{kMlx, 0x1}), r.active.to_qp);
    EXPECT_EQ(0x1u, a.accepted());
    EXPECT_EQ(0x1u, p.accepted());
}

TEST(EceNegotiation, Mlx5ActiveRxePassiveFallsBack)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::rxe();
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_TRUE(r.offer.send);
    EXPECT_EQ((Ece{kMlx, 0x7}), r.at_passive);
    EXPECT_TRUE(r.passive.accept);
    EXPECT_EQ(kNone, r.passive.to_qp);
    EXPECT_NE(std::string::npos, r.passive.reason.find("Operation not supported"));
    EXPECT_EQ(kNone, r.passive_set);
    EXPECT_EQ(kNone, r.at_active);
    EXPECT_TRUE(r.active.ok);
    EXPECT_EQ(kNone, r.active.to_qp);

    EXPECT_EQ(0, a.set_calls);
    EXPECT_EQ(0, p.set_calls);
    EXPECT_EQ(1, p.query_calls);
    EXPECT_EQ(0u, a.accepted());
    EXPECT_FALSE(r.active_result.negotiated());
    EXPECT_FALSE(r.passive_result.negotiated());
    EXPECT_EQ("sent vendor 0x15b3 options 0x7, received none, agreed none",
              to_string(r.active_result));
    EXPECT_EQ("sent none, received vendor 0x15b3 options 0x7, agreed none",
              to_string(r.passive_result));
}

TEST(EceNegotiation, RxeActiveMlx5PassiveFallsBack)
{
    auto a = FakeProvider::rxe();
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_FALSE(r.offer.send);
    EXPECT_FALSE(r.offer.fail);
    EXPECT_EQ("provider has no ece (ibv_query_ece: Operation not supported)", r.offer.reason);
    EXPECT_EQ(kNone, r.at_passive);
    EXPECT_TRUE(r.passive.accept);
    EXPECT_EQ(kNone, r.passive.to_qp);
    EXPECT_EQ(kNone, r.passive_set);
    EXPECT_EQ(kNone, r.at_active);
    EXPECT_TRUE(r.active.ok);
    EXPECT_EQ(1, p.query_calls); /* asked, but nothing to apply */
    EXPECT_EQ(0, p.set_calls);
    EXPECT_EQ(0, a.set_calls);
    EXPECT_EQ(0u, p.accepted());
    EXPECT_EQ("sent none, received none, agreed none", to_string(r.active_result));
}

TEST(EceNegotiation, RxeToRxeWithOverridesNegotiatesOnTheWire)
{
    auto a = FakeProvider::rxe();
    auto p = FakeProvider::rxe();
    const Exchange r = negotiate(policy(EceMode::Auto, 0, ~0u, Ece{kMlx, 0x3}), a,
                          policy(EceMode::Auto, 0, ~0u, Ece{kMlx, 0x6}), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x3}), r.at_passive); /* exactly the override */
    EXPECT_EQ((Ece{kMlx, 0x2}), r.passive.to_qp);
    EXPECT_EQ((Ece{kMlx, 0x2}), r.passive_set); /* provider has no ECE: the wire agreement */
    EXPECT_EQ((Ece{kMlx, 0x2}), r.at_active);
    EXPECT_EQ((Ece{kMlx, 0x2}), r.active.to_qp);

    for (const auto *res : {&r.active_result, &r.passive_result}) {
        EXPECT_TRUE(res->negotiated());
        EXPECT_EQ((Ece{kMlx, 0x2}), res->agreed);
        EXPECT_FALSE(res->applied);
        EXPECT_EQ(EOPNOTSUPP, res->set_err);
    }
    EXPECT_EQ("sent vendor 0x15b3 options 0x3, received vendor 0x15b3 options 0x2, "
              "agreed vendor 0x15b3 options 0x2 (not applied: ibv_set_ece: Operation not "
              "supported)",
              to_string(r.active_result));
    EXPECT_EQ(1, a.set_calls);
    EXPECT_EQ(1, p.set_calls);
}

TEST(EceNegotiation, ReplyCarriesTheReceivedVendorNotThePassiveOne)
{
    /* the passive side's override uses a vendor that only matches on 24
     * bits: the kernel still echoes what it received */
    auto a = FakeProvider::rxe();
    auto p = FakeProvider::rxe();
    const Exchange r = negotiate(policy(EceMode::Auto, 0, ~0u, Ece{kMlx, 0x3}), a,
                          policy(EceMode::Auto, 0, ~0u, Ece{0x7f0015b3, 0x1}), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{0x7f0015b3, 0x1}), r.passive_set);
    EXPECT_EQ((Ece{kMlx, 0x1}), r.at_active);
    EXPECT_EQ((Ece{kMlx, 0x1}), r.active.to_qp);
}

TEST(EceNegotiation, StrictPassiveRejectsWhenRequiredCannotBeMet)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x3);
    const Exchange r = negotiate(policy(EceMode::On, 0x4), a, policy(EceMode::On, 0x4), p);

    ASSERT_EQ(Outcome::Rejected, r.outcome) << name(r.outcome);
    EXPECT_EQ(35, r.reject_status);
    EXPECT_EQ((Ece{kMlx, 0x7}), r.at_passive);
    EXPECT_FALSE(r.passive.accept);
    EXPECT_EQ(0x4u, r.passive.missing);
    EXPECT_NE(std::string::npos,
              r.passive.reason.find("missing ece options 0x4 (required 0x4, agreed 0x3)"))
            << r.passive.reason;
    EXPECT_EQ(0, p.set_calls); /* nothing applied to a QP about to be destroyed */
    EXPECT_FALSE(r.passive_result.negotiated());
}

TEST(EceNegotiation, StrictActiveFailsWhenPeerCannotMeetRequired)
{
    /* the passive side (auto) accepts what it can; the active side checks */
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x3);
    const Exchange r = negotiate(policy(EceMode::On, 0x4), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::ActiveFailed, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x3}), r.at_active);
    EXPECT_FALSE(r.active.ok);
    EXPECT_EQ(0x4u, r.active.missing);
    EXPECT_NE(std::string::npos,
              r.active.reason.find("missing ece options 0x4 (required 0x4, agreed 0x3)"))
            << r.active.reason;
    EXPECT_EQ(0, a.set_calls);
}

TEST(EceNegotiation, StrictActiveFailsAgainstRxe)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::rxe();
    const Exchange r = negotiate(policy(EceMode::On, 0x1), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::ActiveFailed, r.outcome) << name(r.outcome);
    EXPECT_EQ(0x1u, r.active.missing);
    EXPECT_NE(std::string::npos, r.active.reason.find("peer did not negotiate ece"));
}

TEST(EceNegotiation, StrictActiveOnRxeDoesNotConnect)
{
    auto a = FakeProvider::rxe();
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::On, 0x1), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::NotStarted, r.outcome) << name(r.outcome);
    EXPECT_TRUE(r.offer.fail);
    EXPECT_EQ(0x1u, r.offer.missing);
    EXPECT_EQ("provider has no ece (ibv_query_ece: Operation not supported) but "
              "UCX_XQP_ECE=on requires options 0x1",
              r.offer.reason);
    EXPECT_EQ(0, p.calls());
}

TEST(EceNegotiation, StrictPassiveRejectsPeerWithoutEce)
{
    auto a = FakeProvider::rxe();
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::On, 0x3), p);

    ASSERT_EQ(Outcome::Rejected, r.outcome) << name(r.outcome);
    EXPECT_EQ(35, r.reject_status);
    EXPECT_EQ(0x3u, r.passive.missing);
    EXPECT_EQ("peer sent no ece, required options 0x3 missing", r.passive.reason);
}

TEST(EceNegotiation, StrictRequiredSatisfiedIsAcceptedAndApplied)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x5);
    /* both want 0x1 at least; 0x4 is a bonus both support */
    const Exchange r = negotiate(policy(EceMode::On, 0x1, 0x6), a, policy(EceMode::On, 0x1), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x7}), r.at_passive);
    EXPECT_TRUE(r.passive.accept);
    EXPECT_EQ(0u, r.passive.missing);
    EXPECT_EQ((Ece{kMlx, 0x5}), r.passive_set);
    EXPECT_TRUE(r.active.ok);
    EXPECT_EQ((Ece{kMlx, 0x5}), r.active.to_qp);
    EXPECT_EQ(0x5u, a.accepted());
    EXPECT_EQ(0x5u, p.accepted());
}

TEST(EceNegotiation, MismatchedVendorsAutoNegotiateNothing)
{
    auto a = FakeProvider::mlx5(0x7, kOther);
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kOther, 0x7}), r.at_passive);
    EXPECT_EQ(kNone, r.passive.to_qp);
    EXPECT_NE(std::string::npos, r.passive.reason.find("peer 0x1234, local 0x15b3"))
            << r.passive.reason;
    EXPECT_EQ(kNone, r.at_active);
    EXPECT_EQ(kNone, r.active.to_qp);
    EXPECT_EQ(0, a.set_calls);
    EXPECT_EQ(0, p.set_calls);
}

TEST(EceNegotiation, MismatchedVendorsStrictRejects)
{
    auto a = FakeProvider::mlx5(0x7, kOther);
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::On, 0x1), p);

    ASSERT_EQ(Outcome::Rejected, r.outcome) << name(r.outcome);
    EXPECT_EQ(35, r.reject_status);
    EXPECT_NE(std::string::npos, r.passive.reason.find("peer 0x1234, local 0x15b3"))
            << r.passive.reason;
}

TEST(EceNegotiation, WideVendorIsCutTo24BitsOnTheWire)
{
    /* a provider whose vendor id needs more than 24 bits */
    auto a = FakeProvider::mlx5(0x7, kWide);
    auto p = FakeProvider::mlx5(0x3);
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kWide, 0x7}), r.offer.ece);
    EXPECT_EQ((Ece{kMlx, 0x7}), r.at_passive); /* the passive side sees 0x15b3 */
    EXPECT_EQ((Ece{kMlx, 0x3}), r.passive_set);
    EXPECT_EQ((Ece{kMlx, 0x3}), r.at_active);
    /* the active side matches on 24 bits and applies with its own vendor */
    EXPECT_EQ((Ece{kWide, 0x3}), r.active.to_qp);
    EXPECT_TRUE(r.active_result.applied);
    EXPECT_EQ(0x3u, a.accepted());
    EXPECT_EQ(0x3u, p.accepted());
}

TEST(EceNegotiation, OffNeverCallsTheProviderNorSends)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Off, 0x1), a, policy(EceMode::Off, 0x1), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_FALSE(r.offer.send);
    EXPECT_EQ("ece disabled (UCX_XQP_ECE=off)", r.offer.reason);
    EXPECT_EQ(kNone, r.at_passive);
    EXPECT_EQ(kNone, r.passive_set);
    EXPECT_EQ(0, a.calls());
    EXPECT_EQ(0, p.calls());
    EXPECT_EQ("sent none, received none, agreed none", to_string(r.active_result));
    EXPECT_EQ("sent none, received none, agreed none", to_string(r.passive_result));
}

TEST(EceNegotiation, OffPassiveIgnoresAnOffer)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Auto), a, policy(EceMode::Off), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x7}), r.at_passive);
    EXPECT_EQ(kNone, r.passive_set);
    EXPECT_EQ(0, p.calls());
    EXPECT_EQ(kNone, r.active.to_qp);
    EXPECT_EQ(0, a.set_calls);
}

TEST(EceNegotiation, OffActiveWithOverrideStillSendsNothing)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Off, 0, ~0u, Ece{kMlx, 0x7}), a,
                          policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ(kNone, r.at_passive);
    EXPECT_EQ(kNone, r.at_active);
    EXPECT_EQ(0, a.calls());
    EXPECT_EQ(0, p.set_calls);
}

/* ================================================================== negotiator details */

TEST(EceNegotiator, StrictActiveFailsWhenSetEceFails)
{
    /* an rxe active side with an override can offer, but not apply */
    auto           a = FakeProvider::rxe();
    auto           p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::On, 0x1, ~0u, Ece{kMlx, 0x3}), a,
                          policy(EceMode::Auto), p);

    ASSERT_EQ(Outcome::ActiveFailed, r.outcome) << name(r.outcome);
    EXPECT_EQ((Ece{kMlx, 0x3}), r.at_active);
    EXPECT_FALSE(r.active.ok);
    EXPECT_EQ("ibv_set_ece: Operation not supported (cannot apply required ece options)",
              r.active.reason);
    EXPECT_EQ((Ece{kMlx, 0x3}), r.active_result.agreed);
    EXPECT_FALSE(r.active_result.applied);
    EXPECT_EQ(EOPNOTSUPP, r.active_result.set_err);
}

TEST(EceNegotiator, StrictPassiveRejectsWhenSetEceFails)
{
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::rxe();
    const Exchange r = negotiate(policy(EceMode::Auto), a,
                          policy(EceMode::On, 0x2, ~0u, Ece{kMlx, 0x3}), p);

    ASSERT_EQ(Outcome::Rejected, r.outcome) << name(r.outcome);
    EXPECT_EQ("ibv_set_ece: Operation not supported (cannot apply required ece options)",
              r.passive.reason);
    EXPECT_FALSE(r.passive_result.applied);
    EXPECT_EQ(EOPNOTSUPP, r.passive_result.set_err);
}

TEST(EceNegotiator, ForeignVendorSetEceFailsInAutoButConnects)
{
    /* override with a vendor mlx5 refuses: EINVAL, recorded, no failure */
    auto a = FakeProvider::mlx5(0x7);
    auto p = FakeProvider::mlx5(0x7);
    const Exchange r = negotiate(policy(EceMode::Auto, 0, ~0u, Ece{kOther, 0x1}), a,
                          policy(EceMode::Auto, 0, ~0u, Ece{kOther, 0x1}), p);

    ASSERT_EQ(Outcome::Established, r.outcome) << name(r.outcome);
    EXPECT_EQ(EINVAL, r.active_result.set_err);
    EXPECT_EQ(EINVAL, r.passive_result.set_err);
    EXPECT_FALSE(r.active_result.applied);
    EXPECT_FALSE(r.passive_result.applied);
}

TEST(EceNegotiator, ReplyWithoutAgreementDoesNotQueryTheProvider)
{
    auto          p = FakeProvider::mlx5(0x7);
    EceNegotiator n(policy(EceMode::Auto), p);
    const auto    d = n.on_request(p.qp(), {});
    EXPECT_TRUE(d.accept);
    EXPECT_EQ(1, p.query_calls);
    p.modify();
    EXPECT_EQ(kNone, n.reply(p.qp()));
    EXPECT_EQ(1, p.query_calls);
    EXPECT_EQ(kNone, n.result().sent);
}

TEST(EceNegotiator, ResponseIgnoredWhenNothingWasOffered)
{
    auto          a = FakeProvider::rxe();
    EceNegotiator n(policy(EceMode::Auto), a);
    EXPECT_FALSE(n.prepare_offer(a.qp()).send);
    const auto d = n.on_response(a.qp(), {kMlx, 0x7});
    EXPECT_TRUE(d.ok);
    EXPECT_EQ(kNone, d.to_qp);
    EXPECT_EQ(0, a.set_calls);
    EXPECT_EQ((Ece{kMlx, 0x7}), n.result().received);
    EXPECT_FALSE(n.result().negotiated());
}
