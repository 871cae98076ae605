/*
 * Preloaded ahead of the plugin, this reports a UCX release other than the
 * one xqp was built for, so the load-time version guard can be exercised
 * against the real UCX libraries.
 */
#include <ucp/api/ucp.h>

void ucp_get_version(unsigned *major_version, unsigned *minor_version,
                     unsigned *release_number)
{
    *major_version  = 1;
    *minor_version  = 12;
    *release_number = 0;
}
