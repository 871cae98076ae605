/*
 * xqp unit tests - what the ECE tests share: gtest's printer for Ece and
 * the builders of policies, provider answers, offers and decisions
 * (test_ece_policy.cc: the decision tables; test_ece_negotiation.cc: both
 * sides negotiating over a model of the CM).
 */
#ifndef XQP_TEST_UNIT_ECE_TEST_UTIL_H
#define XQP_TEST_UNIT_ECE_TEST_UTIL_H

#include "wireup/ece.h"

#include <optional>
#include <ostream>

namespace xqp::wireup {
/* readable gtest failure messages */
inline void PrintTo(const Ece &ece, std::ostream *os)
{
    *os << "{" << to_string(ece) << "}";
}
} // namespace xqp::wireup

namespace xqp::test {

constexpr uint32_t kMlx   = 0x15b3; /* Mellanox OUI */
constexpr uint32_t kOther = 0x1234; /* some other vendor with ECE */
/* a vendor id that needs more than the 24 bits the CM carries */
constexpr uint32_t kWide = 0x010015b3;

inline wireup::EcePolicy policy(wireup::EceMode mode, uint32_t required = 0,
                                uint32_t desired = 0xffffffffu,
                                std::optional<wireup::Ece> override_ece = std::nullopt)
{
    wireup::EcePolicy p;
    p.mode           = mode;
    p.required       = required;
    p.desired        = desired;
    p.local_override = override_ece;
    return p;
}

inline wireup::ProviderEce provider_ok(uint32_t vendor, uint32_t options)
{
    return {0, wireup::Ece{vendor, options}};
}

inline wireup::ProviderEce provider_err(int err)
{
    return {err, wireup::Ece{}};
}

inline wireup::Offer sent_offer(uint32_t vendor, uint32_t options)
{
    wireup::Offer o;
    o.send = true;
    o.ece  = {vendor, options};
    return o;
}

inline wireup::PassiveDecision accepted(uint32_t vendor, uint32_t options)
{
    wireup::PassiveDecision d;
    d.to_qp = {vendor, options};
    return d;
}

} // namespace xqp::test

#endif
