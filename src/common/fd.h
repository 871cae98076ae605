/*
 * xqp - an owned file descriptor, closed exactly once.
 */
#ifndef XQP_COMMON_FD_H
#define XQP_COMMON_FD_H

#include <unistd.h>

namespace xqp {

class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    ~UniqueFd() { reset(); }
    UniqueFd(const UniqueFd &) = delete;
    UniqueFd &operator=(const UniqueFd &) = delete;

    int get() const { return fd_; }
    void reset(int fd = -1)
    {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

} // namespace xqp

#endif
