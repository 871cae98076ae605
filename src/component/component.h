/*
 * xqp - the UCT component "xqp": its memory domains (md/), its transport
 * (iface/) and its registration with UCX.
 */
#ifndef XQP_COMPONENT_COMPONENT_H
#define XQP_COMPONENT_COMPONENT_H

#include "compat/ucx.h"

namespace xqp::component {

extern uct_component_t component;

/*
 * Registers the component and its transport when the running UCX is the
 * release xqp was built for. Otherwise prints one error line on stderr and
 * registers nothing. Returns whether it registered.
 */
bool register_with_ucx() noexcept;

/* Undoes register_with_ucx() (no-op when it did not register). */
void unregister_from_ucx() noexcept;

} // namespace xqp::component

#endif
