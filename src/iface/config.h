/*
 * xqp - the UCX_XQP_* interface options (README.md and xqp(7) describe
 * them). A bad value is an Error(UCS_ERR_INVALID_PARAM) whose message names
 * the variable: "invalid UCX_XQP_<NAME>='<value>': <why>".
 */
#ifndef XQP_IFACE_CONFIG_H
#define XQP_IFACE_CONFIG_H

#include "common/error.h"
#include "compat/ucx.h"
#include "wireup/ece.h"

#include <string>

namespace xqp::iface {

/* UCX_XQP_* interface options */
/* The options a UCX test or application may set by their bare names
 * (uct_config_modify(config, "RX_MAX_BUFS", ...)), as for UCX's own
 * transports: UCX >= 1.22 matches a bare name only in a sub-table whose
 * prefix is empty (the top-level fields only as XQP_<name>). The
 * variables are still UCX_XQP_<name>. */
struct BareNamed {
    int rx_max_bufs; /* -1: unlimited */
};

struct Config {
    uct_iface_config_t super;
    BareNamed          bare;
    int                ece_mode;      /* wireup::EceMode */
    char              *ece_required;  /* option mask, e.g. 0x1 */
    char              *ece_desired;
    char              *ece_local;     /* "auto" or VENDOR:OPTIONS */
    double             addr_resolve_timeout;
    double             route_resolve_timeout;
    double             connect_timeout;
    double             peer_timeout;  /* 0 or inf: no deadline */
    unsigned           connect_retries;
    unsigned           connect_window; /* 0: no limit */
    unsigned           tx_queue_len;
    unsigned           rx_queue_len;
    size_t             seg_size;
    size_t             max_inline;
    int                share;         /* connection sharing (iface/conn_table.h) */
};

extern ucs_config_field_t config_table[];

/* Turns the ECE options into a policy; throws Error(UCS_ERR_INVALID_PARAM)
 * naming the variable when a value is out of range or malformed. */
wireup::EcePolicy ece_policy_from_config(const Config &config);

/* the error for a bad value of UCX_XQP_<var> */
Error config_error(const char *var, const std::string &value, const std::string &why);

/* a positive time in seconds as milliseconds (at least 1); throws
 * config_error naming UCX_XQP_<var> otherwise */
int to_timeout_ms(const char *var, double seconds);

} // namespace xqp::iface

#endif
