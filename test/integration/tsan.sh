#!/bin/bash
# The data-path gtest's Datapath.*, Threads.* and Sharing.* tests under ThreadSanitizer,
# in the testbed. Run by 'make check-tsan' in a build configured with
# --enable-sanitizers=thread (the plugin and the gtest instrumented; UCX and
# rdma-core are not). Fails on any report: halt_on_error, exit code 66.
set -u
: "${XQP_PLUGIN:?}" "${XQP_BUILDDIR:?}" "${XQP_SRCDIR:?}"
export XQP_EXPECT_DEVICE=${XQP_EXPECT_DEVICE:-${XQP_VM_RDMA_DEV:-rxe0}}
# UCX's memory hooks (libucm) intercept madvise, which glibc calls on a
# thread's stack while the thread exits, after TSan has torn the thread's
# state down: TSan crashes in its rwlock interceptor under ucm_event_enter.
# With the hooks off UCX delivers no memory events, so xqp's registration
# cache is off too (the valgrind and suite runs cover it).
export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no UCX_XQP_RCACHE=no
export TSAN_OPTIONS="suppressions=$XQP_SRCDIR/test/tsan.supp halt_on_error=1 second_deadlock_stack=1 exitcode=66"
export XQP_STRESS_ROUNDS=${XQP_STRESS_ROUNDS:-50} XQP_RACE_ROUNDS=${XQP_RACE_ROUNDS:-50}
export XQP_TEST_LOOPBACK_GET_MIB=${XQP_TEST_LOOPBACK_GET_MIB:-16} # not the deadline's allowance
log=$XQP_BUILDDIR/tsan-datapath.log
rc=0
LD_PRELOAD=$XQP_PLUGIN "$XQP_BUILDDIR/test/integration/xqp_datapath_tests" \
    --gtest_filter='Datapath.*:Threads.*:Sharing.*' > "$log" 2>&1 || rc=$?
grep -E '^\[ +(OK|FAILED) \]|^\[  PASSED|WARNING: ThreadSanitizer|SUMMARY: ThreadSanitizer' "$log"
reports=$(grep -c 'WARNING: ThreadSanitizer' "$log")
echo "tsan: data-path gtest exit $rc, $reports reports (log: $log)"
[ "$rc" = 0 ] && [ "$reports" = 0 ]
