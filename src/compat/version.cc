#include "compat/version.h"

namespace xqp::compat {

std::string to_string(const Version &v)
{
    return std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
           std::to_string(v.patch);
}

std::string version_mismatch(const Version &built, const Version &running)
{
    if ((built.major == running.major) && (built.minor == running.minor) &&
        (built.patch == running.patch)) {
        return std::string();
    }
    return "xqp: plugin built for UCX " + to_string(built) +
           " but the running UCX is " + to_string(running) +
           "; transport xqp is disabled (rebuild xqp against UCX " +
           to_string(running) + ")";
}

} // namespace xqp::compat
