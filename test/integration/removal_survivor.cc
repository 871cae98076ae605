/*
 * xqp_removal_survivor - an application that outlives the removal of its
 * RDMA device, through the public UCT API only.
 *
 *   xqp_removal_survivor --dev rxe0:1 --rounds N --dir DIR [--timeout S]
 *
 * Each round it opens the memory domain and an interface (with an error
 * handler), connects an endpoint to its own interface and streams active
 * messages to itself, checking that every message arrives once and in
 * order. It touches DIR/ready.R once the stream runs. When the device is
 * removed, the error handler must run once for the endpoint with an error
 * status, operations and flush must return errors; then it closes
 * everything it holds on the device (so that the kernel can finish the
 * removal), touches DIR/released.R, waits for DIR/readded.R (the device is
 * back) and opens an interface on it again. After the last round it connects once
 * more and checks a stream on the re-added device.
 *
 * Prints one line per round; exit status 0 when every check passed.
 */
#include "uct_util.h"

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

clock_type::time_point after(double seconds)
{
    return clock_type::now() +
           std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
}

struct Received {
    uint64_t next = 0;      /* the sequence number expected next */
    uint64_t bad  = 0;      /* duplicated, lost or reordered messages */
};
Received received;
std::vector<std::pair<uct_ep_h, ucs_status_t>> ep_errors;

ucs_status_t am_handler(void *, void *data, size_t length, unsigned)
{
    uint64_t sn = 0;
    if (length >= sizeof(sn)) {
        std::memcpy(&sn, data, sizeof(sn));
    }
    if ((length != sizeof(sn)) || (sn != received.next)) {
        ++received.bad;
    }
    received.next = sn + 1;
    return UCS_OK;
}

ucs_status_t err_handler(void *, uct_ep_h ep, ucs_status_t status)
{
    ep_errors.emplace_back(ep, status);
    return UCS_OK;
}

void touch(const std::string &path)
{
    std::ofstream(path + ".tmp") << "done\n";
    std::rename((path + ".tmp").c_str(), path.c_str());
}

/* What the application holds on the device: opened and closed as one. */
class Stack {
public:
    /* false (and a reason) while the device is not there */
    bool open(uct_component_h component, const std::string &dev, std::string *why)
    {
        const std::string md_name = dev.substr(0, dev.rfind(':'));
        uct_md_config_t *md_config;
        if (uct_md_config_read(component, nullptr, nullptr, &md_config) != UCS_OK) {
            *why = "uct_md_config_read";
            return false;
        }
        ucs_status_t status = uct_md_open(component, md_name.c_str(), md_config, &md_);
        uct_config_release(md_config);
        if (status != UCS_OK) {
            md_  = nullptr;
            *why = std::string("uct_md_open: ") + ucs_status_string(status);
            return false;
        }
        if ((ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async_) != UCS_OK) ||
            (uct_worker_create(async_, UCS_THREAD_MODE_SINGLE, &worker_) != UCS_OK)) {
            *why = "async context or worker";
            return false;
        }
        uct_iface_config_t *config;
        if (uct_md_iface_config_read(md_, "xqp", nullptr, nullptr, &config) != UCS_OK) {
            *why = "uct_md_iface_config_read";
            return false;
        }
        uct_iface_params_t params   = {};
        params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                      UCT_IFACE_PARAM_FIELD_DEVICE |
                                      UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                      UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        params.err_handler          = err_handler;
        params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
        params.mode.device.tl_name  = "xqp";
        params.mode.device.dev_name = dev.c_str();
        status = uct_iface_open(md_, worker_, &params, config, &iface_);
        uct_config_release(config);
        if (status != UCS_OK) {
            iface_ = nullptr;
            *why   = std::string("uct_iface_open: ") + ucs_status_string(status);
            return false;
        }
        uct_iface_progress_enable(iface_, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
        return uct_iface_set_am_handler(iface_, 1, am_handler, nullptr, 0) == UCS_OK;
    }

    /* an endpoint to this stack's own interface */
    uct_ep_h connect_self()
    {
        xqp_test::IfaceAddress self;
        if ((xqp_test::iface_address(iface_, &self) != UCS_OK) ||
            (xqp_test::create_ep_to(iface_, self, &ep_) != UCS_OK)) {
            ep_ = nullptr;
        }
        return ep_;
    }

    void close()
    {
        if (ep_ != nullptr) {
            uct_ep_destroy(ep_);
        }
        if (iface_ != nullptr) {
            uct_iface_close(iface_);
        }
        if (worker_ != nullptr) {
            uct_worker_destroy(worker_);
        }
        if (async_ != nullptr) {
            ucs_async_context_destroy(async_);
        }
        if (md_ != nullptr) {
            uct_md_close(md_);
        }
        ep_ = nullptr, iface_ = nullptr, worker_ = nullptr, async_ = nullptr, md_ = nullptr;
    }

    ~Stack() { close(); }
    uct_worker_h worker() const { return worker_; }
    uct_ep_h ep() const { return ep_; }

private:
    uct_md_h             md_     = nullptr;
    ucs_async_context_t *async_  = nullptr;
    uct_worker_h         worker_ = nullptr;
    uct_iface_h          iface_  = nullptr;
    uct_ep_h             ep_     = nullptr;
};

struct Stream {
    uint64_t     sent = 0;
    ucs_status_t last = UCS_OK;
};

/* sends sequence numbers until the error handler runs or the deadline */
Stream stream(Stack &stack, clock_type::time_point deadline, uint64_t at_most,
              const std::string &ready_file)
{
    Stream s;
    bool ready = ready_file.empty();
    while (ep_errors.empty() && (clock_type::now() < deadline) && (s.sent < at_most)) {
        s.last = uct_ep_am_short(stack.ep(), 1, s.sent, nullptr, 0);
        if (s.last == UCS_OK) {
            ++s.sent;
        } else if (s.last != UCS_ERR_NO_RESOURCE) {
            break; /* the error handler follows from progress */
        }
        uct_worker_progress(stack.worker());
        if (!ready && (s.sent >= 1000)) {
            touch(ready_file);
            ready = true;
        }
    }
    return s;
}

bool wait_connected(Stack &stack, clock_type::time_point deadline)
{
    while (uct_ep_flush(stack.ep(), 0, nullptr) == UCS_ERR_NO_RESOURCE) {
        if (clock_type::now() > deadline) {
            return false;
        }
        uct_worker_progress(stack.worker());
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return uct_ep_flush(stack.ep(), 0, nullptr) != UCS_ERR_NO_RESOURCE;
}

/* one removal: stream, see the failure, release the device */
bool survive_one(Stack &stack, unsigned round, const std::string &dir, double timeout)
{
    const auto deadline = after(timeout);
    received  = Received{};
    ep_errors.clear();
    if ((stack.connect_self() == nullptr) || !wait_connected(stack, deadline)) {
        std::printf("round %u: no connection on the device\n", round);
        return false;
    }
    const Stream s = stream(stack, deadline, UINT64_MAX, dir + "/ready." + std::to_string(round));
    for (int i = 0; (i < 2000) && ep_errors.empty(); ++i) {
        uct_worker_progress(stack.worker());
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const ucs_status_t flush = uct_ep_flush(stack.ep(), 0, nullptr);
    const ucs_status_t again = uct_ep_am_short(stack.ep(), 1, s.sent, nullptr, 0);
    const bool failed = (ep_errors.size() == 1) && (ep_errors.front().first == stack.ep()) &&
                        (ep_errors.front().second != UCS_OK) && (flush != UCS_OK) &&
                        (flush != UCS_INPROGRESS) && (again != UCS_OK) &&
                        (again != UCS_ERR_NO_RESOURCE);
    /* what arrived before the failure arrived once and in order; the
     * messages in flight when the device went may be lost */
    const bool in_order = (received.bad == 0) && (received.next <= s.sent) &&
                          (received.next > 0);
    std::printf("round %u: sent %lu received %lu in order %s, error handler calls %zu status %s,"
                " flush %s, am_short %s\n", round, static_cast<unsigned long>(s.sent),
                static_cast<unsigned long>(received.next), in_order ? "yes" : "NO",
                ep_errors.size(),
                ep_errors.empty() ? "-" : ucs_status_string(ep_errors.front().second),
                ucs_status_string(flush), ucs_status_string(again));
    stack.close();
    touch(dir + "/released." + std::to_string(round));
    std::fflush(stdout);
    return failed && in_order;
}

/* until an interface opens on the device (once `wait_for` exists) */
bool reopen(Stack &stack, uct_component_h component, const std::string &dev, double timeout,
            const std::string &wait_for = "")
{
    const auto deadline = after(timeout);
    while (!wait_for.empty() && (access(wait_for.c_str(), F_OK) != 0)) {
        if (clock_type::now() > deadline) {
            std::printf("nobody re-added the device (%s)\n", wait_for.c_str());
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::string why;
    while (!stack.open(component, dev, &why)) {
        stack.close();
        if (clock_type::now() > deadline) {
            std::printf("the device did not come back: %s\n", why.c_str());
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
}

} // namespace

int main(int argc, char **argv)
{
    std::string dev, dir;
    unsigned rounds = 1;
    double timeout  = 60;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--dev") dev = v;
        else if (a == "--dir") dir = v;
        else if (a == "--rounds") rounds = std::stoul(v);
        else if (a == "--timeout") timeout = std::stod(v);
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (dev.empty() || dir.empty()) {
        std::fprintf(stderr, "usage: xqp_removal_survivor --dev DEV:PORT --dir DIR"
                             " [--rounds N] [--timeout S]\n");
        return 2;
    }

    uct_component_h *components;
    unsigned count;
    if (uct_query_components(&components, &count) != UCS_OK) {
        return 1;
    }
    uct_component_h xqp = nullptr;
    for (unsigned i = 0; i < count; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
        uct_component_query(components[i], &attr);
        if (std::string(attr.name) == "xqp") {
            xqp = components[i];
        }
    }
    bool ok = (xqp != nullptr);
    {
        Stack stack;
        ok = ok && reopen(stack, xqp, dev, timeout);
        for (unsigned r = 1; ok && (r <= rounds); ++r) {
            ok = survive_one(stack, r, dir, timeout) &&
                 reopen(stack, xqp, dev, timeout, dir + "/readded." + std::to_string(r));
        }
        if (ok) {
            /* the re-added device carries a stream again */
            const auto deadline = after(timeout);
            received  = Received{};
            ep_errors.clear();
            ok = (stack.connect_self() != nullptr) && wait_connected(stack, deadline);
            const Stream s = ok ? stream(stack, deadline, 20000, "") : Stream{};
            while (ok && (received.next < s.sent) && (clock_type::now() < deadline)) {
                uct_worker_progress(stack.worker());
            }
            ok = ok && (s.sent == 20000) && (received.next == s.sent) && (received.bad == 0) &&
                 ep_errors.empty();
            std::printf("after %u removals: sent %lu received %lu on the re-added device\n",
                        rounds, static_cast<unsigned long>(s.sent),
                        static_cast<unsigned long>(received.next));
        }
    }
    uct_release_component_list(components);
    std::printf("survivor %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
