/* xqp - the UCX_XQP_* interface options: their table, and how their values
 * are checked and turned into what the interface and the wireup use */
#include "iface/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace xqp::iface {

/* indexed by wireup::EceMode */
static const char *ece_mode_names[] = {"off", "auto", "on", NULL};
static_assert(static_cast<int>(wireup::EceMode::On) == 2, "ece_mode_names follows EceMode");

static ucs_config_field_t bare_named_table[] = {
    {"RX_MAX_BUFS", "-1",
     "The most receive buffers the interface has, -1 for no limit (as UCX's IB\n"
     "transports). When the application keeps received descriptors, the\n"
     "interface adds buffers to keep RX_QUEUE_LEN posted, up to this many; at\n"
     "the limit senders wait (receiver-not-ready retries, then no resource)\n"
     "until descriptors are released, and no message is lost. At least\n"
     "RX_QUEUE_LEN.",
     ucs_offsetof(BareNamed, rx_max_bufs), UCS_CONFIG_TYPE_INT},

    {}
};

ucs_config_field_t config_table[] = {
    {"", "", NULL, ucs_offsetof(Config, super), UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    /* (config.h: BareNamed) */
    {"", "", NULL, ucs_offsetof(Config, bare), UCS_CONFIG_TYPE_TABLE(bare_named_table)},

    {"ECE", "auto",
     "Negotiate ECE (Enhanced Connection Establishment) options with the peer\n"
     "through rdma_cm while connecting:\n"
     " off  - never query, set or send ECE\n"
     " auto - use the options both sides and both providers support; fall back\n"
     "        to no ECE when a provider lacks it or the peer sends none\n"
     " on   - like auto, but the options in UCX_XQP_ECE_REQUIRED must be agreed:\n"
     "        otherwise the passive side rejects (rdma_reject_ece) and the\n"
     "        active side fails with an error naming the missing options",
     ucs_offsetof(Config, ece_mode), UCS_CONFIG_TYPE_ENUM(ece_mode_names)},

    {"ECE_REQUIRED", "0",
     "ECE option bits (a 32-bit mask, e.g. 0x1) that must be agreed with UCX_XQP_ECE=on.",
     ucs_offsetof(Config, ece_required), UCS_CONFIG_TYPE_STRING},

    {"ECE_DESIRED", "0xffffffff",
     "ECE option bits (a 32-bit mask) offered to and accepted from the peer when\n"
     "both providers support them.",
     ucs_offsetof(Config, ece_desired), UCS_CONFIG_TYPE_STRING},

    {"ECE_LOCAL", "auto",
     "The local ECE to advertise: 'auto' asks the provider (ibv_query_ece);\n"
     "VENDOR:OPTIONS (e.g. 0x15b3:0x1) advertises these instead, for\n"
     "interoperability tests and providers that cannot report ECE.",
     ucs_offsetof(Config, ece_local), UCS_CONFIG_TYPE_STRING},

    {"ADDR_RESOLVE_TIMEOUT", "2s",
     "How long rdma_resolve_addr may take for one connection attempt.",
     ucs_offsetof(Config, addr_resolve_timeout), UCS_CONFIG_TYPE_TIME},

    {"ROUTE_RESOLVE_TIMEOUT", "2s",
     "How long rdma_resolve_route may take for one connection attempt.",
     ucs_offsetof(Config, route_resolve_timeout), UCS_CONFIG_TYPE_TIME},

    {"CONNECT_TIMEOUT", "10s",
     "How long one connection attempt (address and route resolution, then\n"
     "the CM exchange) may wait on a silent peer before it is abandoned and\n"
     "retried: an answer to another attempt to the same peer interface, or a\n"
     "request from it, starts the wait over (a busy peer is not a silent\n"
     "one). A peer that never answers is reported after (retries + 1) times\n"
     "this.",
     ucs_offsetof(Config, connect_timeout), UCS_CONFIG_TYPE_TIME},

    {"PEER_TIMEOUT", "10s",
     "How long requests in flight on an endpoint may go without any of them\n"
     "completing before the endpoint fails with UCS_ERR_ENDPOINT_TIMEOUT: a\n"
     "peer host that died while its NIC never reports it, or a live peer that\n"
     "stopped taking messages (its receive queue stays empty). A request that\n"
     "needs no completion gets a probe behind it, so that a live peer always\n"
     "answers. The failure is seen within 1.5 times this, from the progress of\n"
     "the interface (or its event fd). 0 or inf: no deadline, as UCX's rc\n"
     "transports with an unlimited RNR retry count.",
     ucs_offsetof(Config, peer_timeout), UCS_CONFIG_TYPE_TIME},

    {"CONNECT_RETRIES", "3",
     "How many times a failed connection attempt is retried, each time with a\n"
     "new rdma_cm id and QP. A reject because of ECE options is not retried.",
     ucs_offsetof(Config, connect_retries), UCS_CONFIG_TYPE_UINT},

    {"CONNECT_WINDOW", "64",
     "How many of an interface's connection attempts may be in flight at once\n"
     "(resolving, or waiting for the peer's answer); endpoints created beyond\n"
     "that wait for one to end, in order. A burst of connect requests beyond\n"
     "what the port's CM receive queue holds (ib_core's recv_queue_size, 512\n"
     "MADs) loses some, which the kernel CM resends only after seconds.\n"
     "0: no limit.",
     ucs_offsetof(Config, connect_window), UCS_CONFIG_TYPE_UINT},

    {"TX_QUEUE_LEN", "255",
     "Send queue length of each data QP. One less than a power of two: a\n"
     "provider that keeps one slot free (rxe) rounds 256 up to 512 slots, which\n"
     "the kernel allocates and clears for each connection.",
     ucs_offsetof(Config, tx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"RX_QUEUE_LEN", "1024",
     "Receive buffers posted to the interface's shared receive queue. All\n"
     "connections of the interface share them; a sender that finds none waits\n"
     "(RNR retry) instead of losing the message. Used buffers are reposted in\n"
     "batches of 1/8 of this (at most 16). Also the most requests the interface\n"
     "keeps in flight on all its connections together.",
     ucs_offsetof(Config, rx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"SEG_SIZE", "8k",
     "Size of a bounce/receive buffer: the largest active message, and the\n"
     "largest buffered put/get.",
     ucs_offsetof(Config, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"MAX_INLINE", "128",
     "Largest payload sent inline in the work request (short put/AM).",
     ucs_offsetof(Config, max_inline), UCS_CONFIG_TYPE_MEMUNITS},

    {"SHARE", "y",
     "Share one RC connection between the two endpoints a pair of interfaces\n"
     "create toward each other (one QP per peer instead of two): an endpoint\n"
     "to an interface this one accepted a connection from sends on it, and two\n"
     "interfaces that connect to each other at once keep one of the two\n"
     "connections. Both sides must enable it; a shared connection stays until\n"
     "neither side uses it. With sharing the private data hellos are of\n"
     "version 2, which xqp builds from before sharing reject: set 'n' to talk\n"
     "to those.",
     ucs_offsetof(Config, share), UCS_CONFIG_TYPE_BOOL},

    {}
};

Error config_error(const char *var, const std::string &value, const std::string &why)
{
    return Error(UCS_ERR_INVALID_PARAM,
                 std::string("invalid UCX_XQP_") + var + "='" + value + "': " + why);
}

/* a 32-bit number, decimal or 0x-hex, nothing else */
static bool parse_u32(const std::string &text, uint32_t *value)
{
    if (text.empty() || (text[0] == '-') || (text[0] == '+') || std::isspace(text[0])) {
        return false;
    }
    errno     = 0;
    char *end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
    if ((errno != 0) || (end == text.c_str()) || (*end != '\0') || (v > UINT32_MAX)) {
        return false;
    }
    *value = static_cast<uint32_t>(v);
    return true;
}

static uint32_t parse_mask(const char *var, const char *text)
{
    const std::string value = (text != nullptr) ? text : "";
    uint32_t mask;
    if (!parse_u32(value, &mask)) {
        throw config_error(var, value, "expected a 32-bit option mask such as 0x1");
    }
    return mask;
}

wireup::EcePolicy ece_policy_from_config(const Config &config)
{
    wireup::EcePolicy policy;
    policy.mode     = static_cast<wireup::EceMode>(config.ece_mode);
    policy.required = parse_mask("ECE_REQUIRED", config.ece_required);
    policy.desired  = parse_mask("ECE_DESIRED", config.ece_desired);

    const std::string local = (config.ece_local != nullptr) ? config.ece_local : "";
    if (local != "auto") {
        const auto colon = local.find(':');
        wireup::Ece ece;
        if ((colon == std::string::npos) ||
            !parse_u32(local.substr(0, colon), &ece.vendor_id) ||
            !parse_u32(local.substr(colon + 1), &ece.options)) {
            throw config_error("ECE_LOCAL", local,
                               "expected 'auto' or VENDOR:OPTIONS such as 0x15b3:0x1");
        }
        if (ece.vendor_id == 0) {
            throw config_error("ECE_LOCAL", local,
                               "vendor 0 means no ECE (rdma_set_local_ece refuses it)");
        }
        policy.local_override = ece;
    }
    return policy;
}

int to_timeout_ms(const char *var, double seconds)
{
    if (!(seconds > 0) || (seconds > INT_MAX / 1000.0)) {
        throw config_error(var, std::to_string(seconds) + "s", "must be positive");
    }
    return std::max(1, static_cast<int>(seconds * 1000.0));
}

} // namespace xqp::iface
