/*
 * What the data-path tests share beyond the test bed (bed.h): the state of
 * an endpoint's connection, a wait for a disconnect that runs no progress,
 * and an endpoint whose peer closed before any progress. The data path's concerns, one file each:
 *   datapath_rma_test.cc      RMA (and the gtest environment that tears the
 *                             bed down at exit, registered there once)
 *   datapath_am_test.cc       active messages
 *   datapath_atomics_test.cc  64-bit atomics
 *   datapath_flush_test.cc    flush, fence, endpoint check
 *   datapath_pending_test.cc  pending queues
 *   datapath_misc_test.cc     AM alignment, wireup vs destroy, requests
 *                             while connecting, malformed input
 * Makefile.am links them in this order, the one of the single file they
 * were split from: gtest runs the tests in the order they register.
 */
#ifndef XQP_TEST_INTEGRATION_DATAPATH_UTIL_H
#define XQP_TEST_INTEGRATION_DATAPATH_UTIL_H

#include "bed.h"

#include <xqp/xqp.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <thread>

namespace xqp_test {

/* the state of e's connection (xqp_ep_wireup_info) */
inline int wireup_state(uct_ep_h e)
{
    using InfoFn = int (*)(uct_ep_h, xqp_wireup_info_t *);
    static auto info_fn = xqp_test::xqp_api<InfoFn>("xqp_ep_wireup_info");
    xqp_wireup_info_t info = {};
    return ((info_fn != nullptr) && (info_fn(e, &info) == 0)) ? info.state : -1;
}

/* waits, with no progress (the async thread sees the disconnect), until no
 * endpoint of eps is connected; false when one still is after kTimeout */
inline bool disconnected_without_progress(std::initializer_list<uct_ep_h> eps)
{
    const auto deadline = Clock::now() + std::chrono::duration<double>(kTimeout);
    const auto any_up   = [&] {
        return std::any_of(eps.begin(), eps.end(),
                           [](uct_ep_h e) { return wireup_state(e) == XQP_CONN_CONNECTED; });
    };
    while (any_up() && (Clock::now() < deadline)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return !any_up();
}

/* e: an endpoint of the sender to an interface that then closed, whose
 * disconnect the async thread has seen, with no progress since: its error
 * handler has not run (b's errors still number errors_at_start) */
inline void connect_to_closed_iface(Bed *b, size_t errors_at_start, uct_ep_h *e)
{
    uct_iface_h gone = nullptr;
    ASSERT_EQ(UCS_OK, b->open_iface(kRxHeadroom, nullptr, &gone));
    ASSERT_EQ(UCS_OK, b->connect(b->sender, gone, e));
    uct_iface_close(gone); /* disconnects its side */
    ASSERT_TRUE(disconnected_without_progress({*e})) << "the disconnect never arrived";
    ASSERT_EQ(errors_at_start, b->ep_errors.size()) << "the handler runs from progress";
}

} // namespace xqp_test

#endif
