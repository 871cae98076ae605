/*
 * The test bed the data-path gtests share (datapath_*_test.cc, threads_test.cc): one
 * memory domain, one worker, two interfaces on "<dev>:1" (a sender and a
 * receiver) and an endpoint from the sender to the receiver, connected
 * through rdma_cm, set up once per process; registered regions, completion
 * and pack helpers, an AM sink, byte patterns and their checks.
 */
#ifndef XQP_TEST_INTEGRATION_BED_H
#define XQP_TEST_INTEGRATION_BED_H

#include "uct_util.h"

#include <uct/api/uct.h>
#include <uct/api/v2/uct_v2.h>
#include <ucs/async/async_fwd.h>

#include <gtest/gtest.h>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

namespace xqp_test {


using Clock = std::chrono::steady_clock;

constexpr size_t  kKiB            = 1024;
constexpr size_t  kMiB            = 1024 * kKiB;
constexpr size_t  kGuard          = 64;   /* guard bytes on each side of a target */
constexpr uint8_t kGuardByte      = 0xa5;
constexpr size_t  kRemoteMisalign = 3;    /* targets start at odd addresses */
constexpr size_t  kLocalMisalign  = 5;
constexpr size_t  kGap            = 16;   /* between the pieces of a multi-iov buffer */
constexpr uint8_t kAmId           = 7;
constexpr size_t  kRxHeadroom     = 24;   /* the receiver's, as UCP asks for one */
/* seconds; generous for emulation. XQP_TEST_TIMEOUT overrides it (valgrind
 * on an emulated CPU needs far more) */
const double kTimeout = std::getenv("XQP_TEST_TIMEOUT") ? std::atof(std::getenv("XQP_TEST_TIMEOUT")) : 60.0;

const size_t kSizes[] = {1, 7, 8, 64, kKiB, 8 * kKiB, 64 * kKiB, kMiB, 4 * kMiB};

/* byte i of a message of the given size; salt is an offset or a sequence
 * number (7 is odd: 256 consecutive salts give 256 different bytes) */
inline uint8_t pattern(size_t i, size_t size, size_t salt)
{
    return static_cast<uint8_t>((i * 131 + size + salt * 7) & 0xff);
}

inline std::vector<uint8_t> make_pattern(size_t size, size_t salt)
{
    std::vector<uint8_t> v(size);
    for (size_t i = 0; i < size; ++i) {
        v[i] = pattern(i, size, salt);
    }
    return v;
}

inline std::string size_name(size_t size)
{
    if ((size >= kMiB) && (size % kMiB == 0)) {
        return std::to_string(size / kMiB) + "MiB";
    }
    if ((size >= kKiB) && (size % kKiB == 0)) {
        return std::to_string(size / kKiB) + "KiB";
    }
    return std::to_string(size) + "B";
}

inline ::testing::AssertionResult same_bytes(const uint8_t *got, const uint8_t *want, size_t n,
                                      const std::string &what)
{
    for (size_t i = 0; i < n; ++i) {
        if (got[i] != want[i]) {
            size_t bad = 0;
            for (size_t j = i; j < n; ++j) {
                bad += (got[j] != want[j]) ? 1 : 0;
            }
            return ::testing::AssertionFailure()
                   << what << ": byte " << i << " of " << n << " is 0x" << std::hex
                   << unsigned(got[i]) << ", expected 0x" << unsigned(want[i]) << std::dec
                   << " (" << bad << " bytes differ)";
        }
    }
    return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_bytes(const uint8_t *p, size_t n, uint8_t value,
                                     const std::string &what)
{
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != value) {
            return ::testing::AssertionFailure()
                   << what << ": byte " << i << " of " << n << " was overwritten with 0x"
                   << std::hex << unsigned(p[i]) << " (guard 0x" << unsigned(value) << ")";
        }
    }
    return ::testing::AssertionSuccess();
}

inline uint64_t load64(const void *p)
{
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

/* a completion that counts its calls (standard layout: uct first) */
struct Comp {
    uct_completion_t uct;
    int              calls  = 0;
    ucs_status_t     status = UCS_INPROGRESS; /* never called */
    void (*hook)(void *) = nullptr;
    void            *hook_arg = nullptr;

    explicit Comp(int count = 1)
    {
        uct.func   = &Comp::done;
        uct.count  = count;
        uct.status = UCS_OK;
    }
    static void done(uct_completion_t *self)
    {
        auto *c = reinterpret_cast<Comp *>(self);
        ++c->calls;
        c->status = self->status;
        if (c->hook != nullptr) {
            c->hook(c->hook_arg);
        }
    }
};

struct PackArg {
    const uint8_t *src    = nullptr;
    size_t         length = 0;
    int            calls  = 0;
};

inline size_t pack_cb(void *dest, void *arg)
{
    auto *a = static_cast<PackArg *>(arg);
    ++a->calls;
    std::memcpy(dest, a->src, a->length);
    return a->length;
}

struct UnpackArg {
    uint8_t *dst      = nullptr;
    size_t   capacity = 0;
    size_t   length   = 0;
    int      calls    = 0;
};

inline void unpack_cb(void *arg, const void *data, size_t length)
{
    auto *a = static_cast<UnpackArg *>(arg);
    ++a->calls;
    a->length = length;
    std::memcpy(a->dst, data, std::min(length, a->capacity));
}

/* ------------------------------------------------------------------ AM sink */

struct Held {
    uint8_t             *data;
    size_t               length;
    std::vector<uint8_t> copy;
};

/* what one receiver interface got, in arrival order */
struct AmSink {
    std::vector<std::vector<uint8_t>> msgs;
    std::vector<unsigned>             flags;
    /* the handler keeps the descriptor (UCS_INPROGRESS) of message i when
     * keep_every > 0 and i % keep_every == keep_phase, or when keep_all */
    size_t            keep_every = 0;
    size_t            keep_phase = 0;
    bool              keep_all   = false;
    std::vector<Held> held;
    size_t            headroom   = kRxHeadroom;
};

inline ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    auto *sink        = static_cast<AmSink *>(arg);
    auto *bytes       = static_cast<uint8_t *>(data);
    const size_t index = sink->msgs.size();
    sink->msgs.emplace_back(bytes, bytes + length);
    sink->flags.push_back(flags);
    const bool keep = sink->keep_all ||
                      ((sink->keep_every > 0) && (index % sink->keep_every == sink->keep_phase));
    if (keep && (flags & UCT_CB_PARAM_FLAG_DESC)) {
        /* the headroom before the data belongs to the handler now (UCP puts
         * its receive descriptor there) */
        std::memset(bytes - sink->headroom, 0xcc, sink->headroom);
        sink->held.push_back({bytes, length, sink->msgs.back()});
        return UCS_INPROGRESS;
    }
    return UCS_OK;
}

/* messages that arrive while no test expects any */
inline int g_stray_messages = 0;

inline ucs_status_t stray_handler(void *, void *, size_t, unsigned)
{
    ++g_stray_messages;
    return UCS_OK;
}

inline void release_held(AmSink &sink)
{
    for (auto &h : sink.held) {
        uct_iface_release_desc(h.data - sink.headroom);
    }
    sink.held.clear();
}

/* ------------------------------------------------------------------ testbed */

inline std::string expected_device()
{
    const char *dev = std::getenv("XQP_EXPECT_DEVICE");
    return dev ? dev : "";
}

inline uct_component_h find_component(const char *name)
{
    uct_component_h *components = nullptr;
    unsigned num                = 0;
    if (uct_query_components(&components, &num) != UCS_OK) {
        return nullptr;
    }
    uct_component_h found = nullptr;
    for (unsigned i = 0; i < num; ++i) {
        uct_component_attr_t attr = {};
        attr.field_mask           = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            (std::strcmp(attr.name, name) == 0)) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    return found;
}

/* everything the tests share, set up once (connections are slow under
 * emulation) and torn down by the environment at exit */
struct Bed {
    std::string          device;
    uct_component_h      component = nullptr;
    uct_md_h             md        = nullptr;
    uct_md_attr_t        md_attr   = {};
    ucs_async_context_t *async     = nullptr;
    uct_worker_h         worker    = nullptr;
    uct_iface_h          sender    = nullptr;
    uct_iface_h          receiver  = nullptr;
    uct_iface_attr_t     sattr     = {};
    uct_iface_attr_t     rattr     = {};
    uct_ep_h             ep        = nullptr;
    std::string          failure; /* why the setup failed */
    std::vector<std::pair<uct_ep_h, ucs_status_t>> ep_errors;

    static inline Bed *instance = nullptr;
    static Bed *get();
    void setup();
    void teardown();

    /* connections are set up on UCX's async thread: a loop that found
     * nothing to do lets it run (matters on few CPUs and under valgrind) */
    void progress()
    {
        if (uct_worker_progress(worker) == 0) {
            std::this_thread::yield();
        }
    }

    template <class Pred>
    bool wait_for(Pred &&pred, double seconds = kTimeout)
    {
        const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
        while (!pred()) {
            if (Clock::now() > deadline) {
                return pred();
            }
            progress();
        }
        return true;
    }

    /* progress for a while (to see what should NOT happen) */
    void spin(double seconds)
    {
        const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
        while (Clock::now() < deadline) {
            progress();
        }
    }

    /* ep flush until it is neither in progress nor waiting for resources */
    ucs_status_t flush(uct_ep_h e, double seconds = kTimeout)
    {
        const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
        for (;;) {
            const ucs_status_t status = uct_ep_flush(e, 0, nullptr);
            if ((status != UCS_INPROGRESS) && (status != UCS_ERR_NO_RESOURCE)) {
                return status;
            }
            if (Clock::now() > deadline) {
                return UCS_ERR_TIMED_OUT;
            }
            progress();
        }
    }

    /* retries an operation that has no resources, progressing in between */
    template <class Op>
    ssize_t post(Op &&op, double seconds = kTimeout)
    {
        const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
        for (;;) {
            const ssize_t r = op();
            if ((r != UCS_ERR_NO_RESOURCE) || (Clock::now() > deadline)) {
                return r;
            }
            progress();
        }
    }

    /* tweak, when given, changes the parameters before the open */
    ucs_status_t open_iface(size_t rx_headroom, const char *rx_queue_len, uct_iface_h *iface,
                            const std::function<void(uct_iface_params_t &)> &tweak = {});
    /* the same with interface variables set (names without UCX_XQP_);
     * bare_only: set by the bare name alone, as UCX's own tests do */
    ucs_status_t open_iface_with(size_t rx_headroom,
                                 const std::vector<std::pair<std::string, std::string>> &vars,
                                 uct_iface_h *iface,
                                 const std::function<void(uct_iface_params_t &)> &tweak = {},
                                 bool bare_only = false);
    /* creates an ep (it connects in the background) */
    ucs_status_t create_ep(uct_iface_h from, uct_iface_h to, uct_ep_h *ep);
    ucs_status_t connect(uct_iface_h from, uct_iface_h to, uct_ep_h *ep);
};


inline ucs_status_t ep_error_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    static_cast<Bed *>(arg)->ep_errors.emplace_back(ep, status);
    return UCS_OK;
}

inline ucs_status_t Bed::open_iface(size_t rx_headroom, const char *rx_queue_len, uct_iface_h *iface,
                                    const std::function<void(uct_iface_params_t &)> &tweak)
{
    std::vector<std::pair<std::string, std::string>> vars;
    if (rx_queue_len != nullptr) {
        vars.emplace_back("RX_QUEUE_LEN", rx_queue_len);
    }
    return open_iface_with(rx_headroom, vars, iface, tweak);
}

inline ucs_status_t Bed::open_iface_with(size_t rx_headroom,
                                         const std::vector<std::pair<std::string, std::string>> &vars,
                                         uct_iface_h *iface,
                                         const std::function<void(uct_iface_params_t &)> &tweak,
                                         bool bare_only)
{
    uct_iface_config_t *config = nullptr;
    ucs_status_t status = uct_md_iface_config_read(md, "xqp", nullptr, nullptr, &config);
    if (status != UCS_OK) {
        return status;
    }
    for (const auto &[name, value] : vars) {
        /* the name with the transport's prefix (UCX >= 1.22 matches only
         * that), else without it (UCX before 1.22 matches only that) */
        status = bare_only ? UCS_ERR_NO_ELEM :
                             uct_config_modify(config, ("XQP_" + name).c_str(), value.c_str());
        if (status == UCS_ERR_NO_ELEM) {
            status = uct_config_modify(config, name.c_str(), value.c_str());
        }
        if (status != UCS_OK) {
            uct_config_release(config);
            return status;
        }
    }
    const std::string dev_name    = device + ":1";
    uct_iface_params_t params     = {};
    params.field_mask             = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                    UCT_IFACE_PARAM_FIELD_DEVICE |
                                    UCT_IFACE_PARAM_FIELD_RX_HEADROOM |
                                    UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                    UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                    UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.open_mode              = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name    = "xqp";
    params.mode.device.dev_name   = dev_name.c_str();
    params.rx_headroom            = rx_headroom;
    params.err_handler            = ep_error_handler;
    params.err_handler_arg        = this;
    params.err_handler_flags      = UCT_CB_FLAG_ASYNC;
    if (tweak) {
        tweak(params);
    }
    status = uct_iface_open(md, worker, &params, config, iface);
    uct_config_release(config);
    if (status == UCS_OK) {
        uct_iface_progress_enable(*iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    }
    return status;
}

inline ucs_status_t Bed::create_ep(uct_iface_h from, uct_iface_h to, uct_ep_h *ep_p)
{
    IfaceAddress addr;
    const ucs_status_t status = iface_address(to, &addr);
    return (status == UCS_OK) ? create_ep_to(from, addr, ep_p) : status;
}

/* creates an ep and waits until it is connected (flush says UCS_OK) */
inline ucs_status_t Bed::connect(uct_iface_h from, uct_iface_h to, uct_ep_h *ep_p)
{
    ucs_status_t status = create_ep(from, to, ep_p);
    if (status != UCS_OK) {
        return status;
    }
    status = flush(*ep_p);
    if (status != UCS_OK) {
        uct_ep_destroy(*ep_p);
        *ep_p = nullptr;
    }
    return status;
}

inline void Bed::setup()
{
    auto fail = [this](const std::string &what, ucs_status_t status) {
        failure = what + ": " + ucs_status_string(status);
    };
    device    = expected_device();
    component = find_component("xqp");
    if (component == nullptr) {
        failure = "component xqp is not registered: run under xqp-run";
        return;
    }
    uct_md_config_t *md_config = nullptr;
    ucs_status_t status = uct_md_config_read(component, nullptr, nullptr, &md_config);
    if (status != UCS_OK) {
        return fail("uct_md_config_read", status);
    }
    status = uct_md_open(component, device.c_str(), md_config, &md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        return fail("uct_md_open(" + device + ")", status);
    }
    if ((status = uct_md_query(md, &md_attr)) != UCS_OK) {
        return fail("uct_md_query", status);
    }
    if ((status = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async)) != UCS_OK) {
        return fail("ucs_async_context_create", status);
    }
    if ((status = uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker)) != UCS_OK) {
        return fail("uct_worker_create", status);
    }
    if ((status = open_iface(0, nullptr, &sender)) != UCS_OK) {
        return fail("uct_iface_open(sender)", status);
    }
    if ((status = open_iface(kRxHeadroom, nullptr, &receiver)) != UCS_OK) {
        return fail("uct_iface_open(receiver)", status);
    }
    if (((status = uct_iface_query(sender, &sattr)) != UCS_OK) ||
        ((status = uct_iface_query(receiver, &rattr)) != UCS_OK)) {
        return fail("uct_iface_query", status);
    }
    if ((status = connect(sender, receiver, &ep)) != UCS_OK) {
        return fail("connecting sender to receiver", status);
    }
}

inline void Bed::teardown()
{
    if (ep != nullptr) {
        flush(ep, 10);
        uct_ep_destroy(ep);
    }
    for (auto *iface : {sender, receiver}) {
        if (iface != nullptr) {
            uct_iface_close(iface);
        }
    }
    if (worker != nullptr) {
        uct_worker_destroy(worker);
    }
    if (async != nullptr) {
        ucs_async_context_destroy(async);
    }
    if (md != nullptr) {
        uct_md_close(md);
    }
}

inline Bed *Bed::get()
{
    if (instance == nullptr) {
        instance = new Bed;
        instance->setup();
    }
    return instance;
}


/* registered memory with its unpacked remote key */
class Region {
public:
    /* registers length bytes of its own, or of shared (which it does not own)
     * with the given access rights */
    Region(Bed &bed, size_t length, unsigned access = UCT_MD_MEM_ACCESS_ALL,
           uint8_t *shared = nullptr)
        : bed_(bed), length_(length), owned_(shared == nullptr)
    {
        const size_t alloc = (length + 4095) / 4096 * 4096;
        base_ = owned_ ? static_cast<uint8_t *>(std::aligned_alloc(4096, alloc)) : shared;
        if (base_ == nullptr) {
            status_ = UCS_ERR_NO_MEMORY;
            return;
        }
        if (owned_) {
            std::memset(base_, kGuardByte, alloc);
        }
        status_ = uct_md_mem_reg(bed.md, base_, length, access, &memh_);
        if (status_ != UCS_OK) {
            memh_ = UCT_MEM_HANDLE_NULL;
            return;
        }
        packed_.resize(bed.md_attr.rkey_packed_size);
        status_ = uct_md_mkey_pack(bed.md, memh_, packed_.data());
        if (status_ != UCS_OK) {
            return;
        }
        status_ = uct_rkey_unpack(bed.component, packed_.data(), &bundle_);
        unpacked_ = (status_ == UCS_OK);
    }
    ~Region()
    {
        if (unpacked_) {
            uct_rkey_release(bed_.component, &bundle_);
        }
        if (memh_ != UCT_MEM_HANDLE_NULL) {
            uct_md_mem_dereg(bed_.md, memh_);
        }
        if (owned_) {
            std::free(base_);
        }
    }
    Region(const Region &) = delete;
    Region &operator=(const Region &) = delete;

    /* deregisters with UCT_MD_MEM_DEREG_FLAG_INVALIDATE: comp runs once no
     * remote access through the rkey can succeed */
    ucs_status_t invalidate(uct_completion_t *comp)
    {
        uct_md_mem_dereg_params_t params = {};
        params.field_mask = UCT_MD_MEM_DEREG_FIELD_MEMH | UCT_MD_MEM_DEREG_FIELD_FLAGS |
                            UCT_MD_MEM_DEREG_FIELD_COMPLETION;
        params.memh       = memh_;
        params.flags      = UCT_MD_MEM_DEREG_FLAG_INVALIDATE;
        params.comp       = comp;
        const ucs_status_t status = uct_md_mem_dereg_v2(bed_.md, &params);
        if (status == UCS_OK) {
            memh_ = UCT_MEM_HANDLE_NULL;
        }
        return status;
    }

    ucs_status_t status() const { return status_; }
    uint8_t *ptr(size_t offset = 0) const { return base_ + offset; }
    uint64_t addr(size_t offset = 0) const { return reinterpret_cast<uintptr_t>(base_ + offset); }
    size_t length() const { return length_; }
    uct_mem_h memh() const { return memh_; }
    uct_rkey_t rkey() const { return bundle_.rkey; }
    const std::vector<uint8_t> &packed() const { return packed_; }

private:
    Bed              &bed_;
    size_t            length_;
    bool              owned_    = true;
    uint8_t          *base_     = nullptr;
    uct_mem_h         memh_     = UCT_MEM_HANDLE_NULL;
    std::vector<uint8_t> packed_;
    uct_rkey_bundle_t bundle_   = {};
    bool              unpacked_ = false;
    ucs_status_t      status_   = UCS_OK;
};

/* n pieces (each at least 1 byte, growing) that add up to size */
inline std::vector<size_t> split(size_t size, size_t n)
{
    n = std::max<size_t>(1, std::min(n, size));
    std::vector<size_t> lengths(n, 1);
    const size_t rest   = size - n;
    const size_t weight = n * (n + 1) / 2;
    size_t given        = 0;
    for (size_t j = 0; j < n; ++j) {
        const size_t extra = rest * (j + 1) / weight;
        lengths[j] += extra;
        given += extra;
    }
    lengths.back() += rest - given;
    return lengths;
}

/* ------------------------------------------------------------------ fixture */

class Datapath : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (expected_device().empty()) {
            GTEST_SKIP() << "XQP_EXPECT_DEVICE is not set (no RDMA device to test)";
        }
        b_ = Bed::get();
        ASSERT_TRUE(b_->failure.empty()) << b_->failure;
        ASSERT_EQ(UCS_OK, uct_iface_set_am_handler(b_->receiver, kAmId, am_handler, &sink_,
                                                   UCT_CB_FLAG_ASYNC));
        stray_at_start_ = g_stray_messages;
        errors_at_start_ = b_->ep_errors.size();
    }

    void TearDown() override
    {
        if ((b_ == nullptr) || !b_->failure.empty()) {
            return;
        }
        /* nothing may stay queued with pointers into this test's frame */
        uct_ep_pending_purge(b_->ep, [](uct_pending_req_t *, void *) {}, nullptr);
        EXPECT_EQ(UCS_OK, b_->flush(b_->ep)) << "the endpoint must stay usable";
        release_held(sink_);
        uct_iface_set_am_handler(b_->receiver, kAmId, stray_handler, nullptr, UCT_CB_FLAG_ASYNC);
        EXPECT_EQ(stray_at_start_, g_stray_messages) << "messages arrived after the test";
        EXPECT_EQ(errors_at_start_, b_->ep_errors.size())
                << "endpoint error: "
                << ucs_status_string(b_->ep_errors.empty() ? UCS_OK :
                                                             b_->ep_errors.back().second);
    }

    uct_ep_h ep() const { return b_->ep; }
    const uct_iface_attr_t &attr() const { return b_->sattr; }

    Bed   *b_ = nullptr;
    AmSink sink_;
    int    stray_at_start_  = 0;
    size_t errors_at_start_ = 0;
};

} // namespace xqp_test

#endif
