#include "common/error.h"

#include <cstring>

namespace xqp {

std::string errno_message(const std::string &what, int err)
{
    return what + ": " + std::strerror(err) + " (" + std::to_string(err) + ")";
}

void throw_errno(const std::string &what, int err)
{
    throw Error(UCS_ERR_IO_ERROR, errno_message(what, err));
}

} // namespace xqp
