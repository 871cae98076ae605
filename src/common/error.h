/*
 * xqp - errors inside the C++ core.
 *
 * Everything below the UCX boundary reports failure by throwing xqp::Error,
 * which carries the UCX status the boundary returns and a lowercase message
 * the boundary logs. No exception crosses into UCX: see boundary.h.
 */
#ifndef XQP_COMMON_ERROR_H
#define XQP_COMMON_ERROR_H

#include <ucs/type/status.h>

#include <stdexcept>
#include <string>

namespace xqp {

class Error : public std::runtime_error {
public:
    Error(ucs_status_t status, const std::string &message)
        : std::runtime_error(message), status_(status) {}

    ucs_status_t status() const noexcept { return status_; }

private:
    ucs_status_t status_;
};

/* "what: strerror(err)" for a failed C call that set an errno-style code. */
std::string errno_message(const std::string &what, int err);

/* Throws Error(UCS_ERR_IO_ERROR) built with errno_message(). */
[[noreturn]] void throw_errno(const std::string &what, int err);

} // namespace xqp

#endif
