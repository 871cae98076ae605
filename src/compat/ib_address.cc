#include "compat/ib_address.h"

#include "compat/ucx.h"

extern "C" {
#include <uct/ib/base/ib_device.h>
}

namespace xqp::compat {

/* flags byte, then for the Ethernet link layer the raw GID first */
static_assert(sizeof(uct_ib_address_t) == 1, "uct_ib_address_t is one flags byte");
static_assert(kIbEthAddressLen == sizeof(uct_ib_address_t) + sizeof(ibv_gid),
              "a RoCE address starts with its GID");

bool ib_eth_address(const uint8_t *dev_addr, IbEthAddress *out)
{
    const uint8_t flags = dev_addr[0];
    if (!(flags & UCT_IB_ADDRESS_FLAG_LINK_LAYER_ETH)) {
        return false;
    }
    /* the bits from ETH_LAST up hold the RoCE version */
    const unsigned version = flags / UCT_IB_ADDRESS_FLAG_ETH_LAST;
    if (version > UCT_IB_DEVICE_ROCE_ANY) {
        return false;
    }
    out->gid  = dev_addr + sizeof(uct_ib_address_t);
    out->ipv6 = (flags & UCT_IB_ADDRESS_FLAG_ROCE_IPV6) != 0;
    return true;
}

} // namespace xqp::compat
