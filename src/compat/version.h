/*
 * xqp - UCX version arithmetic for the load-time guard.
 *
 * UCX's internal structures change between releases, so the plugin only
 * registers with the exact UCX release it was compiled against. This part is
 * pure (no UCX calls) so that unit tests can drive it.
 */
#ifndef XQP_COMPAT_VERSION_H
#define XQP_COMPAT_VERSION_H

#include <string>

namespace xqp::compat {

struct Version {
    unsigned major = 0;
    unsigned minor = 0;
    unsigned patch = 0;
};

std::string to_string(const Version &v);

/*
 * Empty when a plugin built against 'built' may register with the running
 * UCX 'running'; otherwise the one-line error to print.
 */
std::string version_mismatch(const Version &built, const Version &running);

} // namespace xqp::compat

#endif
