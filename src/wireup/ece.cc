/*
 * xqp - ECE negotiation: pure policy functions and the per-connection driver.
 * See ece.h for the call order and the facts the rules rely on.
 */
#include "wireup/ece.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace xqp::wireup {

namespace {

std::string hex(uint32_t value)
{
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%x", value);
    return buf;
}

bool strict(const EcePolicy &policy)
{
    return (policy.mode == EceMode::On) && (policy.required != 0);
}

bool same_vendor(uint32_t a, uint32_t b)
{
    return (a & kEceWireVendorMask) == (b & kEceWireVendorMask);
}

/* What this side advertises / agrees with: the override, else what the
 * provider reported, else none. *why tells why it is none. */
Ece local_base(const EcePolicy &policy, const ProviderEce &local, std::string *why)
{
    if (policy.local_override) {
        if (!policy.local_override->present()) {
            *why = "UCX_XQP_ECE_LOCAL has vendor 0 (no ece)";
        }
        return *policy.local_override;
    }

    if (local.err != 0) {
        *why = std::string("provider has no ece (ibv_query_ece: ") +
               std::strerror(local.err) + ")";
        return {};
    }

    if (!local.ece.present()) {
        *why = "provider has no ece (ibv_query_ece reported vendor 0)";
        return {};
    }

    return local.ece;
}

} // namespace

std::string to_string(const Ece &ece)
{
    if (!ece.present()) {
        return "none";
    }
    return "vendor " + hex(ece.vendor_id) + " options " + hex(ece.options);
}

std::string describe_missing(uint32_t required, uint32_t agreed)
{
    return "missing ece options " + hex(required & ~agreed) + " (required " +
           hex(required) + ", agreed " + hex(agreed) + ")";
}

std::string to_string(const EceResult &result)
{
    std::string s = "sent " + to_string(result.sent) + ", received " +
                    to_string(result.received) + ", agreed " +
                    to_string(result.agreed);
    if (result.agreed.present()) {
        if (result.applied) {
            s += " (applied)";
        } else if (result.set_err != 0) {
            s += std::string(" (not applied: ibv_set_ece: ") +
                 std::strerror(result.set_err) + ")";
        } else {
            s += " (not applied)";
        }
    }
    return s;
}

Offer make_offer(const EcePolicy &policy, const ProviderEce &local)
{
    Offer offer;

    if (policy.mode == EceMode::Off) {
        offer.reason = "ece disabled (UCX_XQP_ECE=off)";
        return offer;
    }

    std::string why;
    const Ece   base = local_base(policy, local, &why);
    if (!base.present()) {
        if (strict(policy)) {
            offer.fail    = true;
            offer.missing = policy.required;
            offer.reason  = why + " but UCX_XQP_ECE=on requires options " +
                           hex(policy.required);
        } else {
            offer.reason = why;
        }
        return offer;
    }

    const uint32_t offered = base.options & (policy.desired | policy.required);
    const uint32_t missing = policy.required & ~offered;
    if ((policy.mode == EceMode::On) && (missing != 0)) {
        offer.fail    = true;
        offer.missing = missing;
        offer.reason  = describe_missing(policy.required, offered) + " (local " +
                       to_string(base) + ")";
        return offer;
    }

    offer.send = true;
    offer.ece  = {base.vendor_id, offered};
    return offer;
}

/*
 * One side's agreement with its peer, the same rules in both directions:
 * no peer ECE, a vendor mismatch (24 bits), required options not agreed.
 * no_peer names the missing peer ECE; context ends the missing-options text.
 */
namespace {

struct Agreement {
    bool        ok = true;
    Ece         ece;
    uint32_t    missing = 0;
    std::string reason;
};

Agreement agree(const EcePolicy &policy, const Ece &peer, const Ece &mine, uint32_t mask,
                const std::string &no_peer, const std::string &context)
{
    Agreement a;
    if (!peer.present()) {
        if (strict(policy)) {
            a.ok      = false;
            a.missing = policy.required;
            a.reason  = no_peer + ", required options " + hex(policy.required) + " missing";
        } else {
            a.reason = no_peer;
        }
        return a;
    }

    if (!same_vendor(peer.vendor_id, mine.vendor_id)) {
        const std::string text = "ece vendor mismatch: peer " + hex(peer.vendor_id) +
                                 ", local " + hex(mine.vendor_id);
        if (strict(policy)) {
            a.ok      = false;
            a.missing = policy.required;
            a.reason  = text + " but UCX_XQP_ECE=on requires options " + hex(policy.required);
        } else {
            a.reason = text;
        }
        return a;
    }

    const uint32_t agreed  = peer.options & mine.options & mask;
    const uint32_t missing = policy.required & ~agreed;
    if ((policy.mode == EceMode::On) && (missing != 0)) {
        a.ok      = false;
        a.missing = missing;
        a.reason  = describe_missing(policy.required, agreed) + context;
        return a;
    }

    a.ece = {mine.vendor_id, agreed};
    return a;
}

} // namespace

PassiveDecision decide_request(const EcePolicy &policy, const ProviderEce &local,
                               const Ece &remote)
{
    PassiveDecision d;

    if (policy.mode == EceMode::Off) {
        d.reason = "ece disabled (UCX_XQP_ECE=off)";
        return d;
    }

    /* what the peer sent is judged before what the local provider has */
    if (remote.present()) {
        std::string why;
        const Ece   base = local_base(policy, local, &why);
        if (!base.present()) {
            if (strict(policy)) {
                d.accept  = false;
                d.missing = policy.required;
                d.reason  = "local " + why + " but UCX_XQP_ECE=on requires options " +
                           hex(policy.required);
            } else {
                d.reason = why;
            }
            return d;
        }
        const Agreement a = agree(policy, remote, base, policy.desired | policy.required,
                                  "peer sent no ece",
                                  " (peer " + to_string(remote) + ", local " + to_string(base) + ")");
        d.accept  = a.ok;
        d.to_qp   = a.ece;
        d.missing = a.missing;
        d.reason  = a.reason;
        return d;
    }

    const Agreement a = agree(policy, remote, Ece{}, 0, "peer sent no ece", "");
    d.accept  = a.ok;
    d.missing = a.missing;
    d.reason  = a.reason;
    return d;
}

Ece passive_reply(const PassiveDecision &decision, const ProviderEce &after_modify)
{
    if (!decision.accept || !decision.to_qp.present()) {
        return {};
    }

    if ((after_modify.err == 0) && after_modify.ece.present()) {
        return {after_modify.ece.vendor_id,
                after_modify.ece.options & decision.to_qp.options};
    }

    return decision.to_qp;
}

ActiveDecision decide_response(const EcePolicy &policy, const Offer &sent,
                               const Ece &reply)
{
    ActiveDecision d;

    if (!sent.send) {
        d.reason = "no ece offered";
        return d;
    }

    /* the peer cannot enable options we did not offer (sent.ece is masked) */
    const Agreement a = agree(policy, reply, sent.ece, 0xffffffffu, "peer did not negotiate ece",
                              " (sent " + to_string(sent.ece) + ", peer replied " +
                                      to_string(reply) + ")");
    d.ok      = a.ok;
    d.to_qp   = a.ece;
    d.missing = a.missing;
    d.reason  = a.reason;
    return d;
}

/* ------------------------------------------------------------------ verbs */

namespace {

int verbs_result(int ret)
{
    if (ret == 0) {
        return 0;
    }
    if (ret < 0) { /* -1 and errno, should a library ever report that way */
        return (errno != 0) ? errno : EIO;
    }
    return ret;
}

} // namespace

int VerbsEceProvider::query_ece(ibv_qp *qp, Ece *ece)
{
    ibv_ece e;
    std::memset(&e, 0, sizeof(e));
    const int err = verbs_result(ibv_query_ece(qp, &e));
    *ece = (err == 0) ? Ece{e.vendor_id, e.options} : Ece{};
    return err;
}

int VerbsEceProvider::set_ece(ibv_qp *qp, const Ece &ece)
{
    ibv_ece e;
    std::memset(&e, 0, sizeof(e));
    e.vendor_id = ece.vendor_id;
    e.options   = ece.options;
    e.comp_mask = 0;
    return verbs_result(ibv_set_ece(qp, &e));
}

/* ------------------------------------------------------------------ negotiator */

namespace {

ProviderEce query(EceProvider &provider, ibv_qp *qp)
{
    ProviderEce local;
    local.err = provider.query_ece(qp, &local.ece);
    if (local.err != 0) {
        local.ece = {};
    }
    return local;
}

} // namespace

const Offer &EceNegotiator::prepare_offer(ibv_qp *qp)
{
    if (policy_.mode == EceMode::Off) {
        offer_ = make_offer(policy_, {});
    } else {
        offer_ = make_offer(policy_, query(provider_, qp));
    }
    result_.sent = offer_.send ? offer_.ece : Ece{};
    return offer_;
}

ActiveDecision EceNegotiator::on_response(ibv_qp *qp, const Ece &reply)
{
    result_.received = reply;

    ActiveDecision d = decide_response(policy_, offer_, reply);
    if (d.ok && d.to_qp.present()) {
        result_.agreed   = d.to_qp;
        const int err    = provider_.set_ece(qp, d.to_qp);
        result_.applied  = (err == 0);
        result_.set_err  = err;
        if ((err != 0) && strict(policy_)) {
            d.ok      = false;
            d.missing = policy_.required;
            d.reason  = std::string("ibv_set_ece: ") + std::strerror(err) +
                       " (cannot apply required ece options)";
        }
    }
    return d;
}

PassiveDecision EceNegotiator::on_request(ibv_qp *qp, const Ece &remote)
{
    result_.received = remote;

    const ProviderEce local = (policy_.mode == EceMode::Off) ? ProviderEce{} :
                                                               query(provider_, qp);
    PassiveDecision d = decide_request(policy_, local, remote);
    if (d.accept && d.to_qp.present()) {
        result_.agreed   = d.to_qp;
        const int err    = provider_.set_ece(qp, d.to_qp);
        result_.applied  = (err == 0);
        result_.set_err  = err;
        if ((err != 0) && strict(policy_)) {
            d.accept  = false;
            d.missing = policy_.required;
            d.reason  = std::string("ibv_set_ece: ") + std::strerror(err) +
                       " (cannot apply required ece options)";
        }
    }
    passive_ = d;
    return d;
}

Ece EceNegotiator::reply(ibv_qp *qp)
{
    if (!passive_.accept || !passive_.to_qp.present()) {
        return {};
    }

    const Ece r  = passive_reply(passive_, query(provider_, qp));
    result_.sent = r;
    return r;
}

} // namespace xqp::wireup
