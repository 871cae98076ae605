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

/* ================================================================== text */

TEST(EceText, EceToString)
{
    EXPECT_EQ("none", to_string(Ece{}));
    EXPECT_EQ("none", to_string(Ece{0, 0x3})); /* vendor 0 is "no ECE" */
    EXPECT_EQ("vendor 0x15b3 options 0x3", to_string(Ece{kMlx, 0x3}));
    EXPECT_EQ("vendor 0x10015b3 options 0x0", to_string(Ece{kWide, 0}));
    EXPECT_EQ("vendor 0xffffffff options 0xffffffff",
              to_string(Ece{0xffffffffu, 0xffffffffu}));
}

TEST(EceText, DescribeMissing)
{
    EXPECT_EQ("missing ece options 0x4 (required 0x5, agreed 0x1)", describe_missing(0x5, 0x1));
    EXPECT_EQ("missing ece options 0x5 (required 0x5, agreed 0x0)", describe_missing(0x5, 0x0));
    EXPECT_EQ("missing ece options 0x80000000 (required 0x80000001, agreed 0x3)",
              describe_missing(0x80000001u, 0x3));
}

TEST(EceText, ResultToString)
{
    EceResult r;
    r.sent     = {kMlx, 0x3};
    r.received = {kMlx, 0x1};
    r.agreed   = {kMlx, 0x1};
    r.applied  = true;
    EXPECT_EQ("sent vendor 0x15b3 options 0x3, received vendor 0x15b3 options 0x1, "
              "agreed vendor 0x15b3 options 0x1 (applied)",
              to_string(r));

    r.applied = false;
    r.set_err = EOPNOTSUPP;
    EXPECT_EQ("sent vendor 0x15b3 options 0x3, received vendor 0x15b3 options 0x1, "
              "agreed vendor 0x15b3 options 0x1 (not applied: ibv_set_ece: Operation not "
              "supported)",
              to_string(r));

    EXPECT_EQ("sent none, received none, agreed none", to_string(EceResult{}));
    EXPECT_FALSE(EceResult{}.negotiated());
    EXPECT_TRUE(r.negotiated());
}

/* ================================================================== make_offer */

struct OfferCase {
    const char        *name;
    EcePolicy          policy;
    ProviderEce        local;
    bool               fail;
    bool               send;
    Ece                ece;
    uint32_t           missing;
    std::vector<const char *> reason_has; /* substrings of the reason */
};

TEST(EceMakeOffer, Table)
{
    const std::vector<OfferCase> cases = {
            {"off never sends, even with a provider",
             policy(EceMode::Off, 0x1), provider_ok(kMlx, 0x7), false, false, {}, 0,
             {"ece disabled (UCX_XQP_ECE=off)"}},
            {"off ignores the override",
             policy(EceMode::Off, 0, ~0u, Ece{kMlx, 0x3}), provider_ok(kMlx, 0x7), false,
             false, {}, 0, {"ece disabled"}},
            {"auto offers what the provider supports",
             policy(EceMode::Auto), provider_ok(kMlx, 0x7), false, true, {kMlx, 0x7}, 0, {}},
            {"auto offers only desired options",
             policy(EceMode::Auto, 0, 0x5), provider_ok(kMlx, 0x7), false, true, {kMlx, 0x5},
             0, {}},
            {"desired outside the provider's options is dropped",
             policy(EceMode::Auto, 0, 0x18), provider_ok(kMlx, 0x7), false, true, {kMlx, 0x0},
             0, {}},
            {"auto without provider ece sends nothing",
             policy(EceMode::Auto), provider_err(EOPNOTSUPP), false, false, {}, 0,
             {"provider has no ece (ibv_query_ece: Operation not supported)"}},
            {"auto with provider vendor 0 sends nothing",
             policy(EceMode::Auto), provider_ok(0, 0x7), false, false, {}, 0,
             {"provider has no ece", "vendor 0"}},
            {"provider error other than EOPNOTSUPP is named",
             policy(EceMode::Auto), provider_err(EINVAL), false, false, {}, 0,
             {"ibv_query_ece: Invalid argument"}},
            {"on without required bits falls back like auto",
             policy(EceMode::On), provider_err(EOPNOTSUPP), false, false, {}, 0,
             {"provider has no ece"}},
            {"strict without provider ece fails",
             policy(EceMode::On, 0x5), provider_err(EOPNOTSUPP), true, false, {}, 0x5,
             {"provider has no ece (ibv_query_ece: Operation not supported)",
              "UCX_XQP_ECE=on requires options 0x5"}},
            {"override replaces the provider",
             policy(EceMode::Auto, 0, ~0u, Ece{kOther, 0x30}), provider_ok(kMlx, 0x7), false,
             true, {kOther, 0x30}, 0, {}},
            {"override works on a provider without ece",
             policy(EceMode::Auto, 0, 0x3, Ece{kMlx, 0x7}), provider_err(EOPNOTSUPP), false,
             true, {kMlx, 0x3}, 0, {}},
            {"override with vendor 0 sends nothing",
             policy(EceMode::Auto, 0, ~0u, Ece{0, 0x7}), provider_ok(kMlx, 0x7), false, false,
             {}, 0, {"UCX_XQP_ECE_LOCAL has vendor 0"}},
            {"strict satisfied, required added to desired",
             policy(EceMode::On, 0x4, 0x1), provider_ok(kMlx, 0x7), false, true, {kMlx, 0x5},
             0, {}},
            {"strict, provider lacks a required bit",
             policy(EceMode::On, 0x5), provider_ok(kMlx, 0x3), true, false, {}, 0x4,
             {"missing ece options 0x4 (required 0x5, agreed 0x3)", "vendor 0x15b3 options 0x3"}},
            {"auto never fails on required bits",
             policy(EceMode::Auto, 0x8), provider_ok(kMlx, 0x3), false, true, {kMlx, 0x3}, 0,
             {}},
            {"vendor wider than 24 bits is offered as is (the cm cuts it)",
             policy(EceMode::Auto, 0, ~0u, Ece{kWide, 0x1}), provider_err(EOPNOTSUPP),
             false, true, {kWide, 0x1}, 0, {}},
    };

    for (const auto &c : cases) {
        SCOPED_TRACE(c.name);
        const Offer o = make_offer(c.policy, c.local);
        EXPECT_EQ(c.fail, o.fail);
        EXPECT_EQ(c.send, o.send);
        EXPECT_EQ(to_string(c.ece), to_string(o.ece));
        EXPECT_EQ(c.ece, o.ece);
        EXPECT_EQ(c.missing, o.missing);
        for (const char *s : c.reason_has) {
            EXPECT_NE(std::string::npos, o.reason.find(s)) << "reason: " << o.reason
                                                           << "\nexpected: " << s;
        }
        if (!c.send) {
            EXPECT_FALSE(o.reason.empty());
        }
    }
}

/* ================================================================== decide_request */

struct RequestCase {
    const char        *name;
    EcePolicy          policy;
    ProviderEce        local;
    Ece                remote;
    bool               accept;
    Ece                to_qp;
    uint32_t           missing;
    std::vector<const char *> reason_has;
};

TEST(EceDecideRequest, Table)
{
    const std::vector<RequestCase> cases = {
            {"off accepts and applies nothing", policy(EceMode::Off, 0x1),
             provider_ok(kMlx, 0x7), {kMlx, 0x7}, true, {}, 0, {"ece disabled"}},
            {"peer sent nothing, auto", policy(EceMode::Auto), provider_ok(kMlx, 0x7), {},
             true, {}, 0, {"peer sent no ece"}},
            {"peer sent nothing, on without required", policy(EceMode::On),
             provider_ok(kMlx, 0x7), {}, true, {}, 0, {}},
            {"peer sent nothing, strict rejects", policy(EceMode::On, 0x3),
             provider_ok(kMlx, 0x7), {}, false, {}, 0x3,
             {"peer sent no ece, required options 0x3 missing"}},
            {"local provider without ece, auto", policy(EceMode::Auto),
             provider_err(EOPNOTSUPP), {kMlx, 0x7}, true, {}, 0,
             {"provider has no ece (ibv_query_ece: Operation not supported)"}},
            {"local provider without ece, strict rejects", policy(EceMode::On, 0x1),
             provider_err(EOPNOTSUPP), {kMlx, 0x7}, false, {}, 0x1,
             {"local provider has no ece", "0x1"}},
            {"vendor mismatch, auto", policy(EceMode::Auto), provider_ok(kMlx, 0x7),
             {kOther, 0x7}, true, {}, 0, {"vendor mismatch", "0x1234", "0x15b3"}},
            {"vendor mismatch, strict rejects naming both", policy(EceMode::On, 0x1),
             provider_ok(kMlx, 0x7), {kOther, 0x7}, false, {}, 0x1,
             {"peer 0x1234", "local 0x15b3"}},
            {"vendors compared on 24 bits (local wide)",
             policy(EceMode::Auto, 0, ~0u, Ece{kWide, 0x7}), provider_err(EOPNOTSUPP),
             {kMlx, 0x3}, true, {kWide, 0x3}, 0, {}},
            {"0x115b3 fits in 24 bits: it is not 0x15b3",
             policy(EceMode::Auto, 0, ~0u, Ece{0x0115b3, 0x7}), provider_err(EOPNOTSUPP),
             {kMlx, 0x3}, true, {}, 0, {"peer 0x15b3, local 0x115b3"}},
            {"vendors compared on 24 bits (remote wide)", policy(EceMode::Auto),
             provider_ok(kMlx, 0x7), {0xff0015b3u, 0x6}, true, {kMlx, 0x6}, 0, {}},
            {"intersection of both sides", policy(EceMode::Auto), provider_ok(kMlx, 0x5),
             {kMlx, 0x3}, true, {kMlx, 0x1}, 0, {}},
            {"intersection limited by desired", policy(EceMode::Auto, 0, 0x2),
             provider_ok(kMlx, 0x7), {kMlx, 0x7}, true, {kMlx, 0x2}, 0, {}},
            {"required counts as desired", policy(EceMode::On, 0x4, 0x1),
             provider_ok(kMlx, 0x7), {kMlx, 0x7}, true, {kMlx, 0x5}, 0, {}},
            {"empty intersection is still an agreement", policy(EceMode::Auto),
             provider_ok(kMlx, 0x4), {kMlx, 0x3}, true, {kMlx, 0x0}, 0, {}},
            {"strict, peer lacks a required bit", policy(EceMode::On, 0x5),
             provider_ok(kMlx, 0x7), {kMlx, 0x3}, false, {}, 0x4,
             {"missing ece options 0x4 (required 0x5, agreed 0x3)"}},
            {"strict, local lacks a required bit", policy(EceMode::On, 0x6),
             provider_ok(kMlx, 0x3), {kMlx, 0x7}, false, {}, 0x4,
             {"missing ece options 0x4 (required 0x6, agreed 0x3)"}},
            {"auto never rejects for required bits", policy(EceMode::Auto, 0x8),
             provider_ok(kMlx, 0x3), {kMlx, 0x7}, true, {kMlx, 0x3}, 0, {}},
            {"override replaces the provider", policy(EceMode::Auto, 0, ~0u, Ece{kOther, 0xf0}),
             provider_ok(kMlx, 0x7), {kOther, 0x30}, true, {kOther, 0x30}, 0, {}},
            {"override vendor 0 acts like no ece", policy(EceMode::Auto, 0, ~0u, Ece{0, 0xf}),
             provider_ok(kMlx, 0x7), {kMlx, 0x7}, true, {}, 0, {"UCX_XQP_ECE_LOCAL"}},
    };

    for (const auto &c : cases) {
        SCOPED_TRACE(c.name);
        const PassiveDecision d = decide_request(c.policy, c.local, c.remote);
        EXPECT_EQ(c.accept, d.accept);
        EXPECT_EQ(c.to_qp, d.to_qp) << to_string(d.to_qp);
        EXPECT_EQ(c.missing, d.missing);
        for (const char *s : c.reason_has) {
            EXPECT_NE(std::string::npos, d.reason.find(s)) << "reason: " << d.reason
                                                           << "\nexpected: " << s;
        }
    }
}

/* ================================================================== passive_reply */

TEST(EcePassiveReply, Table)
{
    struct Case {
        const char     *name;
        PassiveDecision decision;
        ProviderEce     after;
        Ece             expect;
    };
    PassiveDecision rejected = accepted(kMlx, 0x3);
    rejected.accept          = false;

    const std::vector<Case> cases = {
            {"rejected: nothing", rejected, provider_ok(kMlx, 0x3), {}},
            {"no agreement: nothing", PassiveDecision{}, provider_ok(kMlx, 0x3), {}},
            {"provider's accepted options", accepted(kMlx, 0x3), provider_ok(kMlx, 0x1),
             {kMlx, 0x1}},
            {"never more than agreed", accepted(kMlx, 0x3), provider_ok(kMlx, 0x7),
             {kMlx, 0x3}},
            {"the provider's vendor is used", accepted(kWide, 0x3), provider_ok(kMlx, 0x3),
             {kMlx, 0x3}},
            {"provider without ece: the wire agreement", accepted(kMlx, 0x3),
             provider_err(EOPNOTSUPP), {kMlx, 0x3}},
            {"provider error: the wire agreement", accepted(kOther, 0x2), provider_err(EINVAL),
             {kOther, 0x2}},
            {"provider reports vendor 0: the wire agreement", accepted(kMlx, 0x3),
             provider_ok(0, 0x1), {kMlx, 0x3}},
            {"provider accepted nothing", accepted(kMlx, 0x3), provider_ok(kMlx, 0),
             {kMlx, 0}},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.name);
        EXPECT_EQ(c.expect, passive_reply(c.decision, c.after)) << to_string(
                passive_reply(c.decision, c.after));
    }
}

/* ================================================================== decide_response */

TEST(EceDecideResponse, Table)
{
    struct Case {
        const char               *name;
        EcePolicy                 policy;
        Offer                     sent;
        Ece                       reply;
        bool                      ok;
        Ece                       to_qp;
        uint32_t                  missing;
        std::vector<const char *> reason_has;
    };
    Offer failed;
    failed.fail = true;

    const std::vector<Case> cases = {
            {"nothing sent: the reply is ignored", policy(EceMode::Auto), Offer{},
             {kMlx, 0x3}, true, {}, 0, {}},
            {"nothing sent, strict policy: still ignored", policy(EceMode::On, 0x1), failed,
             {kMlx, 0x3}, true, {}, 0, {}},
            {"off: nothing sent", policy(EceMode::Off), Offer{}, {kMlx, 0x3}, true, {}, 0, {}},
            {"no reply, auto", policy(EceMode::Auto), sent_offer(kMlx, 0x7), {}, true, {}, 0,
             {"peer did not negotiate ece"}},
            {"no reply, strict fails", policy(EceMode::On, 0x2), sent_offer(kMlx, 0x7), {},
             false, {}, 0x2, {"peer did not negotiate ece", "0x2"}},
            {"vendor mismatch, auto", policy(EceMode::Auto), sent_offer(kMlx, 0x7),
             {kOther, 0x7}, true, {}, 0, {"vendor mismatch"}},
            {"vendor mismatch, strict fails", policy(EceMode::On, 0x1), sent_offer(kMlx, 0x7),
             {kOther, 0x7}, false, {}, 0x1, {"peer 0x1234", "local 0x15b3"}},
            {"echoed vendor cut to 24 bits matches", policy(EceMode::Auto),
             sent_offer(kWide, 0x7), {kMlx, 0x5}, true, {kWide, 0x5}, 0, {}},
            {"agreement = reply", policy(EceMode::Auto), sent_offer(kMlx, 0x7), {kMlx, 0x5},
             true, {kMlx, 0x5}, 0, {}},
            {"peer cannot add options", policy(EceMode::Auto), sent_offer(kMlx, 0x3),
             {kMlx, 0xc1}, true, {kMlx, 0x1}, 0, {}},
            {"strict satisfied", policy(EceMode::On, 0x4), sent_offer(kMlx, 0x7), {kMlx, 0x5},
             true, {kMlx, 0x5}, 0, {}},
            {"strict, peer dropped a required bit", policy(EceMode::On, 0x5),
             sent_offer(kMlx, 0x7), {kMlx, 0x1}, false, {}, 0x4,
             {"missing ece options 0x4 (required 0x5, agreed 0x1)"}},
            {"strict, peer 'added' a required bit we did not offer", policy(EceMode::On, 0x8),
             sent_offer(kMlx, 0x7), {kMlx, 0xf}, false, {}, 0x8,
             {"missing ece options 0x8 (required 0x8, agreed 0x7)"}},
            {"auto ignores required bits", policy(EceMode::Auto, 0x4), sent_offer(kMlx, 0x7),
             {kMlx, 0x1}, true, {kMlx, 0x1}, 0, {}},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.name);
        const ActiveDecision d = decide_response(c.policy, c.sent, c.reply);
        EXPECT_EQ(c.ok, d.ok);
        EXPECT_EQ(c.to_qp, d.to_qp) << to_string(d.to_qp);
        EXPECT_EQ(c.missing, d.missing);
        for (const char *s : c.reason_has) {
            EXPECT_NE(std::string::npos, d.reason.find(s)) << "reason: " << d.reason
                                                           << "\nexpected: " << s;
        }
    }
}
