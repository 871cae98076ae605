/*
 * The access rights of a registration (md::access_flags) against what the
 * UCP of the UCX under test does with registrations: configure's probe
 * XQP_UCX_HAVE_UCP_MEMH_ACCESS_FLAGS says whether its UCP records the
 * rights of a cached registration before handing it out again.
 */
#include "compat/ucx.h"
#include "md/md.h"

#include <gtest/gtest.h>

#include <infiniband/verbs.h>

namespace {

constexpr int kEveryRight = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

/* what UCP's protocols ask for (UCX 1.13-1.22) and what the rights alone
 * would give */
struct Request {
    const char *what;
    unsigned    flags;
    int         exact;
};
const Request kRequests[] = {
    {"eager zero-copy source", UCT_MD_MEM_ACCESS_LOCAL_READ, IBV_ACCESS_LOCAL_WRITE},
    {"rendezvous get destination", UCT_MD_MEM_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE},
    {"rendezvous receive buffer", UCT_MD_MEM_ACCESS_REMOTE_PUT | UCT_MD_MEM_ACCESS_LOCAL_WRITE,
     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE},
    {"rendezvous send buffer", UCT_MD_MEM_ACCESS_RMA | UCT_MD_MEM_FLAG_HIDE_ERRORS,
     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ},
    {"remote reads only", UCT_MD_MEM_ACCESS_REMOTE_GET,
     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ},
    {"everything", UCT_MD_MEM_ACCESS_ALL, kEveryRight},
    {"no access flag (UCT: all)", UCT_MD_MEM_FLAG_NONBLOCK, kEveryRight},
};

} // namespace

#ifdef XQP_UCX_HAVE_UCP_MEMH_ACCESS_FLAGS
/* UCP registers again when a cached registration lacks a right: grant
 * exactly the rights asked */
TEST(MdAccess, RegistrationsGrantExactlyTheRightsAsked)
{
    for (const Request &r : kRequests) {
        EXPECT_EQ(r.exact, xqp::md::access_flags(r.flags)) << r.what;
    }
}
#else
/* UCP (up to UCX 1.16) hands a cached registration out for any later
 * operation on the same buffer, e.g. a buffer received into (local write)
 * is sent with rendezvous and the peer reads it through the packed key:
 * every registration must grant every right (issue #15) */
TEST(MdAccess, RegistrationsUcpReusesGrantEveryRight)
{
    for (const Request &r : kRequests) {
        EXPECT_EQ(kEveryRight, xqp::md::access_flags(r.flags)) << r.what;
    }
}
#endif
