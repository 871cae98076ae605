/*
 * xqp_wireup_peer - one side of an xqp connection test, through the public
 * UCT API plus the plugin's introspection API (include/xqp/xqp.h).
 *
 *   xqp_wireup_peer --dev rxe0:1 --addr-file FILE [options]
 *
 * Opens an xqp interface, writes its address to --addr-file, optionally
 * connects --eps N endpoints to the address in --connect-to FILE, and
 * progresses until every endpoint has connected or failed and
 * --expect-passive connection requests were handled. Then prints one line
 * per connection (parsed by test/integration/suite.sh), checks the outcome
 * against --expect, touches --done-file and waits for --wait-for (so that
 * neither side tears its connections down while the other still checks).
 *
 *   --expect connected|rejected|unreachable   what every endpoint must end as
 *                                 (rejected: by the peer's ECE policy, reason
 *                                 35; unreachable: after all retries)
 *   --pending                     queue one pending request per endpoint
 *                                 before it connects; each must run once
 *   --check-leaks                 QP, cm_id and fd counts of this process
 *                                 must return to their values before the
 *                                 endpoints once they are destroyed
 *   --timeout SECONDS             give up (default 120)
 *   --poll-us N                   sleep between progress calls (default 1000)
 *   --stream SECONDS              after connecting, keep sending active
 *                                 messages for at most SECONDS; with
 *                                 --expect-peer-failure the peer is killed
 *                                 meanwhile: the endpoint must fail (error
 *                                 handler called, operations return the
 *                                 error) and a new endpoint to --reconnect-to
 *                                 FILE must then connect
 *   --ready-file FILE             with --stream: touched when the stream starts
 *   --serve SECONDS               count received active messages for SECONDS
 *   --storm CYCLES                create --eps endpoints, wait until all are
 *                                 connected, destroy them; CYCLES times. QP,
 *                                 MR, cm_id and fd counts must come back
 *   --report-passive              print the passive connections' summary
 *                                 without waiting for any (with sharing, how
 *                                 many a side accepts depends on the peer)
 *
 * Exit status 0 when every check passed.
 */
#include <xqp/xqp.h>

#include "uct_util.h"

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct Options {
    std::string dev, addr_file, connect_to, expect = "connected", done_file, wait_for;
    unsigned    eps = 0, expect_passive = 0;
    bool        report_passive = false;
    bool        pending = false, check_leaks = false;
    double      timeout = 120;
    unsigned    poll_us = 1000;
    double      stream = 0, serve = 0;
    unsigned    storm = 0;
    bool        expect_peer_failure = false;
    std::string reconnect_to, ready_file;
};

[[noreturn]] void die(const std::string &msg)
{
    std::cerr << "xqp_wireup_peer: " << msg << std::endl;
    std::exit(1);
}

void check(ucs_status_t status, const char *what)
{
    if (status != UCS_OK) {
        die(std::string(what) + ": " + ucs_status_string(status));
    }
}

std::string hex(const std::vector<uint8_t> &bytes)
{
    std::string out;
    char b[3];
    for (auto v : bytes) {
        std::snprintf(b, sizeof(b), "%02x", v);
        out += b;
    }
    return out;
}

std::vector<uint8_t> unhex(const std::string &text)
{
    std::vector<uint8_t> out;
    for (size_t i = 0; i + 1 < text.size(); i += 2) {
        out.push_back(static_cast<uint8_t>(std::stoul(text.substr(i, 2), nullptr, 16)));
    }
    return out;
}

bool exists(const std::string &path)
{
    return access(path.c_str(), F_OK) == 0;
}

void touch(const std::string &path)
{
    std::ofstream(path + ".tmp") << "done\n";
    std::rename((path + ".tmp").c_str(), path.c_str());
}

struct Resources {
    int fds, qps, cm_ids, mrs;
    bool operator==(const Resources &o) const
    {
        return fds == o.fds && qps == o.qps && cm_ids == o.cm_ids && mrs == o.mrs;
    }
};

Resources measure()
{
    return {xqp_test::count_fds(), xqp_test::count_rdma_resources("qp"),
            xqp_test::count_rdma_resources("cm_id"), xqp_test::count_rdma_resources("mr")};
}

std::string ece(const xqp_ece_t &e)
{
    char buf[64];
    std::snprintf(buf, sizeof(buf), "0x%x:0x%x", e.vendor_id, e.options);
    return buf;
}

std::string describe(const xqp_wireup_info_t &i)
{
    std::ostringstream s;
    s << "state " << i.state << " attempts " << i.attempts << " status "
      << ucs_status_string(static_cast<ucs_status_t>(i.status)) << " reject " << i.reject_reason
      << " sent " << ece(i.ece_sent) << " received " << ece(i.ece_received) << " agreed "
      << ece(i.ece_agreed) << " applied " << i.ece_applied << " set_err " << i.ece_set_err
      << " error \"" << i.error << "\"";
    return s.str();
}

/* an endpoint to the interface whose address is in dev/iface */
uct_ep_h create_ep(uct_iface_h iface, const std::vector<uint8_t> &dev,
                   const std::vector<uint8_t> &iface_addr)
{
    uct_ep_h ep;
    check(xqp_test::create_ep_to(iface, {dev, iface_addr}, &ep), "uct_ep_create");
    return ep;
}

unsigned pending_runs = 0;
unsigned pending_busy = 0;
unsigned long am_received = 0;
std::vector<std::pair<uct_ep_h, ucs_status_t>> ep_errors;

ucs_status_t am_handler(void *, void *, size_t, unsigned)
{
    ++am_received;
    return UCS_OK;
}

ucs_status_t err_handler(void *, uct_ep_h ep, ucs_status_t status)
{
    ep_errors.emplace_back(ep, status);
    return UCS_OK;
}

ucs_status_t pending_cb(uct_pending_req_t *)
{
    ++pending_runs;
    return UCS_OK;
}

} // namespace

int main(int argc, char **argv)
{
    Options opt;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next           = [&]() -> std::string {
            if (i + 1 >= argc) {
                die("missing value for " + a);
            }
            return argv[++i];
        };
        if (a == "--dev") opt.dev = next();
        else if (a == "--addr-file") opt.addr_file = next();
        else if (a == "--connect-to") opt.connect_to = next();
        else if (a == "--eps") opt.eps = std::stoul(next());
        else if (a == "--expect") opt.expect = next();
        else if (a == "--expect-passive") opt.expect_passive = std::stoul(next());
        else if (a == "--report-passive") opt.report_passive = true;
        else if (a == "--done-file") opt.done_file = next();
        else if (a == "--wait-for") opt.wait_for = next();
        else if (a == "--timeout") opt.timeout = std::stod(next());
        else if (a == "--poll-us") opt.poll_us = std::stoul(next());
        else if (a == "--stream") opt.stream = std::stod(next());
        else if (a == "--storm") opt.storm = std::stoul(next());
        else if (a == "--serve") opt.serve = std::stod(next());
        else if (a == "--expect-peer-failure") opt.expect_peer_failure = true;
        else if (a == "--reconnect-to") opt.reconnect_to = next();
        else if (a == "--ready-file") opt.ready_file = next();
        else if (a == "--pending") opt.pending = true;
        else if (a == "--check-leaks") opt.check_leaks = true;
        else die("unknown option " + a);
    }
    if (opt.dev.empty() || opt.addr_file.empty()) {
        die("usage: xqp_wireup_peer --dev DEV:PORT --addr-file FILE [options]");
    }
    if ((opt.expect != "connected") && (opt.expect != "rejected") &&
        (opt.expect != "unreachable")) {
        die("--expect connected|rejected|unreachable");
    }
    using info_fn    = int (*)(uct_ep_h, xqp_wireup_info_t *);
    using pinfo_fn   = int (*)(uct_iface_h, unsigned, xqp_wireup_info_t *);
    using pcount_fn  = int (*)(uct_iface_h);
    using attempts_fn = int (*)(uct_iface_h, unsigned *, unsigned *);
    auto ep_info     = xqp_test::xqp_api<info_fn>("xqp_ep_wireup_info");
    auto pass_info   = xqp_test::xqp_api<pinfo_fn>("xqp_iface_passive_info");
    auto pass_count  = xqp_test::xqp_api<pcount_fn>("xqp_iface_passive_count");
    auto iface_attempts = xqp_test::xqp_api<attempts_fn>("xqp_iface_attempts");
    if (!ep_info || !pass_info || !pass_count || !iface_attempts) {
        die("the xqp introspection API is not loaded (run under xqp-run)");
    }

    /* component, md, worker, iface */
    uct_component_h *components;
    unsigned num_components;
    check(uct_query_components(&components, &num_components), "uct_query_components");
    uct_component_h xqp = nullptr;
    for (unsigned i = 0; i < num_components; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
        check(uct_component_query(components[i], &attr), "uct_component_query");
        if (std::string(attr.name) == "xqp") {
            xqp = components[i];
        }
    }
    if (xqp == nullptr) {
        die("component xqp is not registered");
    }
    const std::string md_name = opt.dev.substr(0, opt.dev.rfind(':'));
    uct_md_config_t *md_config;
    check(uct_md_config_read(xqp, nullptr, nullptr, &md_config), "uct_md_config_read");
    uct_md_h md;
    check(uct_md_open(xqp, md_name.c_str(), md_config, &md), "uct_md_open");
    uct_config_release(md_config);

    ucs_async_context_t *async;
    check(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async), "async");
    uct_worker_h worker;
    check(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker), "uct_worker_create");

    uct_iface_config_t *iface_config;
    check(uct_md_iface_config_read(md, "xqp", nullptr, nullptr, &iface_config), "iface config");
    uct_iface_params_t params   = {};
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.err_handler          = err_handler;
    params.err_handler_flags    = 0;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "xqp";
    params.mode.device.dev_name = opt.dev.c_str();
    uct_iface_h iface;
    check(uct_iface_open(md, worker, &params, iface_config, &iface), "uct_iface_open");
    uct_config_release(iface_config);
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    check(uct_iface_set_am_handler(iface, 1, am_handler, nullptr, UCT_CB_FLAG_ASYNC),
          "uct_iface_set_am_handler");

    uct_iface_attr_t attr;
    check(uct_iface_query(iface, &attr), "uct_iface_query");
    std::vector<uint8_t> dev_addr(attr.device_addr_len), iface_addr(attr.iface_addr_len);
    check(uct_iface_get_device_address(iface, reinterpret_cast<uct_device_addr_t *>(dev_addr.data())),
          "get_device_address");
    check(uct_iface_get_address(iface, reinterpret_cast<uct_iface_addr_t *>(iface_addr.data())),
          "get_address");
    /* the baseline of the leak check: before the peer can know our address,
     * so before any of its connect requests can arrive (a peer quicker to
     * connect than we are to read its address made the baseline count its
     * connections, and the check fail) */
    const Resources baseline = measure();
    std::ofstream(opt.addr_file + ".tmp") << hex(dev_addr) << " " << hex(iface_addr) << "\n";
    std::rename((opt.addr_file + ".tmp").c_str(), opt.addr_file.c_str());

    const auto deadline = clock_type::now() + std::chrono::duration<double>(opt.timeout);
    auto progress_until = [&](auto done) {
        while (!done()) {
            uct_worker_progress(worker);
            if (clock_type::now() > deadline) {
                return false;
            }
            /* the connections progress on UCX's async thread: poll gently */
            std::this_thread::sleep_for(std::chrono::microseconds(opt.poll_us));
        }
        return true;
    };

    bool ok = true;
    std::vector<uct_ep_h> eps;
    std::vector<uct_pending_req_t> reqs(opt.eps);
    Resources before{}, during{};
    double connect_seconds = 0;

    if ((opt.storm > 0) && (opt.eps > 0)) {
        if (!progress_until([&] { return exists(opt.connect_to); })) {
            die("no peer address in " + opt.connect_to);
        }
        std::string dev_hex, iface_hex;
        std::ifstream(opt.connect_to) >> dev_hex >> iface_hex;
        const auto d = unhex(dev_hex), f = unhex(iface_hex);
        const Resources base = measure();
        unsigned total_connected = 0;
        for (unsigned c = 0; c < opt.storm; ++c) {
            std::vector<uct_ep_h> storm_eps;
            for (unsigned i = 0; i < opt.eps; ++i) {
                storm_eps.push_back(create_ep(iface, d, f));
            }
            progress_until([&] {
                for (auto ep : storm_eps) {
                    if (uct_ep_flush(ep, 0, nullptr) == UCS_ERR_NO_RESOURCE) {
                        return false;
                    }
                }
                return true;
            });
            unsigned connected = 0;
            for (auto ep : storm_eps) {
                connected += (uct_ep_flush(ep, 0, nullptr) == UCS_OK);
                uct_ep_destroy(ep);
            }
            total_connected += connected;
            std::printf("storm cycle %u: %u of %u connected, destroyed\n", c + 1, connected, opt.eps);
        }
        Resources after = measure();
        for (int i = 0; (i < 50) && !(after == base); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            after = measure();
        }
        std::printf("storm resources before fds %d qps %d mrs %d cm_ids %d, after fds %d qps %d"
                    " mrs %d cm_ids %d\n", base.fds, base.qps, base.mrs, base.cm_ids, after.fds,
                    after.qps, after.mrs, after.cm_ids);
        ok = ok && (total_connected == opt.storm * opt.eps) && (after == base) &&
             (base.mrs >= 2) && (base.cm_ids >= 1);
        opt.eps = 0; /* the storm replaces the single round below */
    }

    if (opt.eps > 0) {
        if (!progress_until([&] { return exists(opt.connect_to); })) {
            die("no peer address in " + opt.connect_to);
        }
        std::string dev_hex, iface_hex;
        std::ifstream(opt.connect_to) >> dev_hex >> iface_hex;
        const auto peer_dev = unhex(dev_hex), peer_iface = unhex(iface_hex);
        if (!uct_iface_is_reachable(iface, reinterpret_cast<const uct_device_addr_t *>(peer_dev.data()),
                                    reinterpret_cast<const uct_iface_addr_t *>(peer_iface.data()))) {
            std::cout << "peer is not reachable" << std::endl;
            ok = false;
        }
        before = baseline;

        const auto t0 = clock_type::now();
        for (unsigned i = 0; i < opt.eps; ++i) {
            uct_ep_h ep = create_ep(iface, peer_dev, peer_iface);
            eps.push_back(ep);
            if (opt.pending) {
                reqs[i].func = pending_cb;
                const ucs_status_t st = uct_ep_pending_add(ep, &reqs[i], 0);
                if (st == UCS_ERR_BUSY) {
                    /* the connection won the race: BUSY is right only when
                     * the endpoint can send now */
                    xqp_wireup_info_t info;
                    ep_info(ep, &info);
                    if ((info.state != XQP_CONN_CONNECTED) ||
                        (uct_ep_flush(ep, 0, nullptr) != UCS_OK)) {
                        std::cout << "pending_add: busy but not connected" << std::endl;
                        ok = false;
                    }
                    ++pending_busy;
                } else if (st != UCS_OK) {
                    std::cout << "pending_add before connection: " << ucs_status_string(st)
                              << std::endl;
                    ok = false;
                }
            }
        }
        {
            /* the connect window (UCX_XQP_CONNECT_WINDOW): what is on the
             * wire right after the burst, and what waits its turn, counted
             * at one instant (a walk of the endpoints' states would race
             * the async thread: an attempt ending and a queued one starting
             * between two reads count twice) */
            unsigned in_flight = 0, queued = 0;
            if (iface_attempts(iface, &in_flight, &queued) != 0) {
                die("xqp_iface_attempts refused an xqp interface");
            }
            if (iface_attempts(iface, nullptr, &queued) != -EINVAL) {
                die("xqp_iface_attempts took a null count");
            }
            std::printf("after creation: in flight %u queued %u\n", in_flight, queued);
        }
        /* every ep resolves: flush is OK once connected, an error once failed */
        const bool resolved = progress_until([&] {
            for (auto ep : eps) {
                if (uct_ep_flush(ep, 0, nullptr) == UCS_ERR_NO_RESOURCE) {
                    return false;
                }
            }
            return true;
        });
        connect_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
        if (!resolved) {
            std::cout << "timeout: not every endpoint resolved" << std::endl;
            ok = false;
        }
        /* let the one-shot progress callbacks run */
        for (int i = 0; i < 10; ++i) {
            uct_worker_progress(worker);
        }
        during = measure();

        unsigned connected = 0, rejected = 0, unreachable = 0, missing_shown = 0;
        const char *retries_env = std::getenv("UCX_XQP_CONNECT_RETRIES");
        const unsigned attempts = 1 + (retries_env ? std::stoul(retries_env) : 3);
        for (unsigned i = 0; i < eps.size(); ++i) {
            xqp_wireup_info_t info;
            if (ep_info(eps[i], &info) != 0) {
                die("xqp_ep_wireup_info refused an xqp endpoint");
            }
            /* the first three, and (up to ten) endpoints that should have
             * connected and did not */
            const bool missing = (opt.expect == "connected") && (info.state != XQP_CONN_CONNECTED);
            if ((i < 3) || (missing && (++missing_shown <= 10))) {
                std::cout << "active " << i << " " << describe(info) << std::endl;
            }
            connected += (info.state == XQP_CONN_CONNECTED);
            rejected  += (info.state == XQP_CONN_FAILED) && (info.status == UCS_ERR_REJECTED) &&
                        (info.reject_reason == 35) && (info.attempts == 1) &&
                        (std::strstr(info.error, "reject reason 35") != nullptr) &&
                        (uct_ep_flush(eps[i], 0, nullptr) == UCS_ERR_REJECTED);
            unreachable += (info.state == XQP_CONN_FAILED) && (info.status == UCS_ERR_UNREACHABLE) &&
                           (info.attempts == attempts) &&
                           (uct_ep_flush(eps[i], 0, nullptr) == UCS_ERR_UNREACHABLE);
        }
        std::printf("summary eps %u connected %u rejected %u unreachable %u seconds %.3f"
                    " conn_per_sec %.1f\n", opt.eps, connected, rejected, unreachable,
                    connect_seconds,
                    connect_seconds > 0 ? connected / connect_seconds : 0.0);
        if ((opt.expect == "connected") && (connected != opt.eps)) {
            ok = false;
        }
        if ((opt.expect == "rejected") && (rejected != opt.eps)) {
            ok = false;
        }
        if ((opt.expect == "unreachable") && (unreachable != opt.eps)) {
            ok = false;
        }
        if (opt.pending) {
            const unsigned want = (opt.expect == "connected") ? opt.eps - pending_busy : 0;
            std::printf("pending dispatched %u of %u (%u endpoints connected before their"
                        " request was queued)\n", pending_runs, want, pending_busy);
            ok = ok && (pending_runs == want);
            for (auto ep : eps) {
                uct_ep_pending_purge(ep, nullptr, nullptr);
            }
        }
        /* a foreign handle is refused */
        ok = ok && (ep_info(nullptr, nullptr) == -EINVAL);
    }

    if ((opt.stream > 0) && !eps.empty()) {
        if (!opt.ready_file.empty()) {
            touch(opt.ready_file);
        }
        /* send until the peer goes away (or the time is up) */
        const auto stream_end = clock_type::now() + std::chrono::duration<double>(opt.stream);
        unsigned long sent    = 0;
        ucs_status_t last     = UCS_OK;
        while ((clock_type::now() < stream_end) && ep_errors.empty()) {
            last = uct_ep_am_short(eps[0], 1, sent, nullptr, 0);
            if (last == UCS_OK) {
                ++sent;
            } else if (last != UCS_ERR_NO_RESOURCE) {
                break;
            }
            uct_worker_progress(worker);
        }
        const double waited = opt.stream -
                              std::chrono::duration<double>(stream_end - clock_type::now()).count();
        /* the error handler runs from progress */
        for (int i = 0; (i < 1000) && ep_errors.empty(); ++i) {
            uct_worker_progress(worker);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        std::printf("stream sent %lu, stopped after %.1f s with %s, error handler calls %zu%s%s\n",
                    sent, waited, ucs_status_string(last), ep_errors.size(),
                    ep_errors.empty() ? "" : " status ",
                    ep_errors.empty() ? "" : ucs_status_string(ep_errors.front().second));
        if (opt.expect_peer_failure) {
            /* requests in flight complete with errors; then flush reports it */
            progress_until([&] { return uct_ep_flush(eps[0], 0, nullptr) != UCS_INPROGRESS; });
            const ucs_status_t flush = uct_ep_flush(eps[0], 0, nullptr);
            const bool failed = (ep_errors.size() == 1) && (ep_errors.front().first == eps[0]) &&
                                (ep_errors.front().second != UCS_OK) && (flush != UCS_OK) &&
                                (flush != UCS_INPROGRESS) &&
                                (uct_ep_am_short(eps[0], 1, 0, nullptr, 0) != UCS_OK);
            std::printf("peer failure %s (flush: %s)\n", failed ? "detected" : "NOT detected",
                        ucs_status_string(flush));
            ok = ok && failed;
            if (!opt.reconnect_to.empty()) {
                if (!progress_until([&] { return exists(opt.reconnect_to); })) {
                    die("no address in " + opt.reconnect_to);
                }
                std::string dev_hex, iface_hex;
                std::ifstream(opt.reconnect_to) >> dev_hex >> iface_hex;
                const auto d = unhex(dev_hex), f = unhex(iface_hex);
                uct_ep_h ep2 = create_ep(iface, d, f);
                const bool again = progress_until([&] {
                    return uct_ep_flush(ep2, 0, nullptr) != UCS_ERR_NO_RESOURCE;
                }) && (uct_ep_flush(ep2, 0, nullptr) == UCS_OK) &&
                    (uct_ep_am_short(ep2, 1, 42, nullptr, 0) == UCS_OK);
                std::printf("reconnect after the failure %s\n", again ? "ok" : "FAILED");
                ok = ok && again;
                progress_until([&] { return uct_ep_flush(ep2, 0, nullptr) == UCS_OK; });
                uct_ep_destroy(ep2);
            }
        }
    }

    if (opt.serve > 0) {
        const auto serve_end = clock_type::now() + std::chrono::duration<double>(opt.serve);
        progress_until([&] { return clock_type::now() > serve_end; });
        std::printf("served %lu active messages\n", am_received);
    }

    if ((opt.expect_passive > 0) || opt.report_passive) {
        const bool got = progress_until([&] {
            if (pass_count(iface) < static_cast<int>(opt.expect_passive)) {
                return false;
            }
            for (unsigned i = 0; i < opt.expect_passive; ++i) {
                xqp_wireup_info_t info;
                pass_info(iface, i, &info);
                if ((info.state != XQP_CONN_CONNECTED) && (info.state != XQP_CONN_FAILED) &&
                    (info.state != XQP_CONN_CLOSED)) {
                    return false;
                }
            }
            return true;
        });
        if (!got) {
            std::cout << "timeout: " << pass_count(iface) << " passive connections of "
                      << opt.expect_passive << std::endl;
            ok = false;
        }
        const int n = pass_count(iface);
        unsigned connected = 0;
        for (int i = 0; i < n; ++i) {
            xqp_wireup_info_t info;
            pass_info(iface, i, &info);
            if (i < 3) {
                std::cout << "passive " << i << " " << describe(info) << std::endl;
            }
            connected += (info.state == XQP_CONN_CONNECTED);
        }
        std::printf("passive summary requests %d connected %u\n", n, connected);
    }

    if (!opt.done_file.empty()) {
        touch(opt.done_file);
    }
    if (!opt.wait_for.empty() && !progress_until([&] { return exists(opt.wait_for); })) {
        std::cout << "timeout waiting for " << opt.wait_for << std::endl;
        ok = false;
    }

    for (auto ep : eps) {
        uct_ep_destroy(ep);
    }
    if (opt.check_leaks && (opt.eps > 0)) {
        Resources after{};
        /* rdma_destroy_id completes synchronously; give the kernel a moment,
         * and, with sharing, the peer: connections it still used close when
         * its release message or disconnect is progressed */
        for (int i = 0; i < 50; ++i) {
            after = measure();
            if (after == before) {
                break;
            }
            const auto until = clock_type::now() + std::chrono::milliseconds(100);
            while (clock_type::now() < until) {
                uct_worker_progress(worker);
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }
        std::printf("resources before fds %d qps %d cm_ids %d, with endpoints qps %d cm_ids %d,"
                    " after fds %d qps %d cm_ids %d\n", before.fds, before.qps, before.cm_ids,
                    during.qps, during.cm_ids, after.fds, after.qps, after.cm_ids);
        /* the counters must see the connections' QPs and cm_ids (the listener
         * has one cm_id), else the comparison proves nothing */
        const int live = (opt.expect == "connected") ? static_cast<int>(opt.eps) : 0;
        ok = ok && (after == before) && (before.cm_ids >= 1) &&
             (during.qps >= before.qps + live) && (during.cm_ids >= before.cm_ids + live);
    }

    uct_iface_close(iface);
    uct_worker_destroy(worker);
    ucs_async_context_destroy(async);
    uct_md_close(md);
    uct_release_component_list(components);
    std::printf("result %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
