/*
 * xqp - entry point of libuct_xqp.so.
 *
 * UCX >= 1.22 dlopen()s the plugin from its module directory; older UCX
 * releases need it preloaded (xqp-run). Either way the loader runs this
 * constructor after libucs/libuct are initialized, and the component is
 * registered only when the running UCX is the one xqp was built against.
 */
#include "component/component.h"

__attribute__((constructor)) static void xqp_plugin_load()
{
    xqp::component::register_with_ucx();
}

__attribute__((destructor)) static void xqp_plugin_unload()
{
    xqp::component::unregister_from_ucx();
}
