/*
 * xqp - connection sharing (UCX_XQP_SHARE): one RC connection for the two
 * endpoints a pair of interfaces create toward each other.
 *
 * Matching. Interfaces are known by their listener address (ListenerKey).
 * Every endpoint an interface creates toward a peer interface gets the next
 * pair number for that peer (1, 2, ...), which its connect request carries
 * (hello version 2). When interface B accepted a connection from A with pair
 * number n, and B's user then creates its n-th endpoint toward A, that
 * endpoint sends on the accepted connection: no QP and no handshake of its
 * own. So the i-th endpoint either side creates pairs with the other side's
 * i-th. An endpoint to its own interface never shares.
 *
 * Lifetime, as uct_tcp's TX and RX capabilities. Each side knows whether
 * the peer sends on a connection (Connection::peer_sends): on one it
 * accepted, yes, as the peer's endpoint opened it; on its own, only once
 * the peer says so. An endpoint bound to an accepted connection says so
 * with a bound notice (SEND with immediate data kBoundImm), its first
 * request. An endpoint destroyed while the peer does not send on its
 * connection disconnects it at once, with no word and no wait: so a peer
 * that never creates an endpoint back, and does not progress, costs
 * nothing (UCX's test_uct_pending.pending_ucs_ok_dc_arbiter_bug, 2048
 * endpoints). An endpoint destroyed while the peer sends sends a release
 * notice (kReleaseImm) after its own requests, and leaves the connection
 * to its interface:
 *  - an endpoint's own connection is adopted by the interface (adopt);
 *  - an accepted one stays held, and is never bound again (released).
 * The side that receives a release while no endpoint of its own uses the
 * connection any more disconnects it; otherwise its endpoint disconnects
 * when it is destroyed, as without sharing. The disconnect ends it on both
 * sides; a failure fails both sides' users. A peer that binds just as this
 * side closes (its notice not read yet) sees its endpoint fail with
 * UCS_ERR_ENDPOINT_TIMEOUT, as when the peer destroys it.
 *
 * Simultaneous connect. When both sides create their endpoints before
 * either request arrives, each side's request finds the other's endpoint
 * still connecting (crossing_ep). The listener keys decide, the same way on
 * both sides: the connection of the side with the lower key is kept. That
 * side refuses the peer's request with a Yield hello (yield_request), and
 * the peer's endpoint waits (ConnState::Awaiting); the other side accepts
 * the request and binds its endpoint to it, dropping its own attempt
 * (Endpoint::take_accepted). A peer whose request never comes is waited for
 * connect_timeout_s, then connected to again.
 */
#include "iface/iface.h"

#include "ep/ep.h"

namespace xqp::iface {

uint32_t Iface::next_pair_sn(const wireup::ListenerKey &key)
{
    return ++pair_seq_[key];
}

Iface::Held *Iface::held_of(const wireup::Connection *conn)
{
    for (auto &held : passive_) {
        if (held.conn.get() == conn) {
            return &held;
        }
    }
    return nullptr;
}

ep::Endpoint *Iface::user_of(const wireup::Connection &conn)
{
    const Held *held = held_of(&conn);
    return (held != nullptr) ? held->user : nullptr;
}

wireup::Connection *Iface::bind_shared(ep::Endpoint *ep, const wireup::ListenerKey &key,
                                       uint32_t pair_sn)
{
    for (auto &held : passive_) {
        wireup::Connection &conn = *held.conn;
        const auto state = conn.state();
        if ((held.user == nullptr) && !held.released && conn.peer_sends() &&
            !conn.active() && conn.shared() && (conn.pair_sn() == pair_sn) &&
            (conn.peer_hello().listener == key) &&
            ((state == wireup::ConnState::Accepting) ||
             (state == wireup::ConnState::Connected))) {
            held.user = ep;
            ucs_debug("xqp: %s: ep %p shares the connection accepted from %s (pair %u)",
                      resource_name_.c_str(), ep, wireup::to_string(key).c_str(), pair_sn);
            return &conn;
        }
    }
    return nullptr;
}

ep::Endpoint *Iface::crossing_ep(const wireup::Hello &hello) const
{
    if (!hello.listener.known() || (hello.listener == wireup_config_.listener)) {
        return nullptr;
    }
    for (auto *ep : eps_) {
        if (ep->crosses(hello.listener, hello.pair_sn)) {
            return ep;
        }
    }
    return nullptr;
}

void Iface::unbind_shared(wireup::Connection *conn)
{
    Held *held = held_of(conn);
    if (held == nullptr) {
        return;
    }
    held->user     = nullptr;
    held->released = true;
    if (!held->conn->peer_sends()) {
        held->conn->close(); /* neither side uses it: disconnect */
    }
    reap_held();
}

void Iface::adopt(std::unique_ptr<wireup::Connection> conn)
{
    conn->set_owner(*this);
    passive_.push_back(Held{std::move(conn), nullptr, true});
    reap_held(); /* it may have ended meanwhile */
}

void Iface::on_peer_notice(uint32_t qp_num, bool sends)
{
    WireupGuard guard(*this);
    for (auto &held : passive_) {
        const ibv_qp *qp = held.conn->qp();
        if ((qp == nullptr) || (qp->qp_num != qp_num)) {
            continue;
        }
        held.conn->set_peer_sends(sends);
        if (!sends && (held.user == nullptr)) {
            held.conn->close(); /* neither side uses it: disconnect */
            reap_held();
        }
        return;
    }
    if (ep::Endpoint *ep = ep_of_qp(qp_num)) {
        /* its own connection: the endpoint reads the flag when destroyed */
        ep->connection().set_peer_sends(sends);
        return;
    }
    ucs_debug("xqp: %s: %s notice on qp 0x%x, which no connection has", resource_name_.c_str(),
              sends ? "bound" : "release", qp_num);
}

void Iface::reap_held()
{
    for (auto it = passive_.begin(); it != passive_.end();) {
        const auto state = it->conn->state();
        if ((it->user == nullptr) &&
            ((state == wireup::ConnState::Failed) || (state == wireup::ConnState::Closed))) {
            passive_log_.forget(it->conn.get());
            it = passive_.erase(it);
        } else {
            ++it;
        }
    }
}

} // namespace xqp::iface
