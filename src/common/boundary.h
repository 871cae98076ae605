/*
 * xqp - the extern "C" boundary between UCX and the C++ core.
 *
 * Every callback UCX invokes runs its body through xqp::boundary(), which
 * turns exceptions into a ucs_status_t and one lowercase log line, so that
 * no exception ever unwinds through UCX's C frames.
 */
#ifndef XQP_COMMON_BOUNDARY_H
#define XQP_COMMON_BOUNDARY_H

#include "common/error.h"
#include "compat/ucx.h"

#include <exception>
#include <new>

namespace xqp {

template <typename Body>
ucs_status_t boundary(const char *where, Body &&body) noexcept
{
    try {
        return body();
    } catch (const Error &e) {
        ucs_error("xqp %s: %s", where, e.what());
        return e.status();
    } catch (const std::bad_alloc &) {
        ucs_error("xqp %s: out of memory", where);
        return UCS_ERR_NO_MEMORY;
    } catch (const std::exception &e) {
        ucs_error("xqp %s: %s", where, e.what());
        return UCS_ERR_IO_ERROR;
    } catch (...) {
        ucs_error("xqp %s: unknown failure", where);
        return UCS_ERR_IO_ERROR;
    }
}

} // namespace xqp

#endif
