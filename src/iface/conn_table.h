/*
 * xqp - every connection of an interface, in one table.
 *
 * The table owns the connections: an endpoint's own ones and those the
 * interface accepted. It is the connections' owner (wireup::ConnectionOwner)
 * and passes what one reports on to the endpoint that sends on it. Each
 * entry holds the connection, the endpoint that sends on it (we send), and
 * whether the peer sends on it, as uct_tcp's TX and RX capabilities.
 *
 * Connection sharing (UCX_XQP_SHARE). Interfaces are known by their
 * listener address (ListenerKey). Each endpoint an interface creates toward
 * a peer interface gets the next pair number for that peer (1, 2, ...),
 * which its connect request carries. An accepted request that carries one
 * waits in the table's match index, keyed by (peer, pair number), until
 * this side's endpoint with that number toward that peer is created: that
 * endpoint then sends on it, with no QP and no handshake of its own, and
 * tells the peer so (a bound notice, the caller's job). An endpoint to its
 * own interface never shares.
 *
 * The two flags. We send: an endpoint uses the connection. The peer sends:
 * learned, never assumed. On a connection this side accepted, yes: the
 * peer's endpoint opened it. On this side's own, only after the peer's
 * bound notice. A release notice clears it. When neither side sends any
 * more the connection is closed: rdma_disconnect, no message, no wait. An
 * endpoint whose peer sends releases the connection with a notice after
 * its own requests (the caller's job) and leaves it here until the peer's
 * release or disconnect. The race: the peer's endpoint goes before it read
 * our bound notice, and it disconnects. Our endpoint, if it sent nothing
 * but the notice, opens a connection of its own (open() with share false)
 * and releases the closed one (the caller's job: Endpoint::after_peer_closed).
 *
 * Simultaneous connect. When both sides create their endpoints before
 * either request arrives, the request finds this side's endpoint still
 * attempting with the same pair number. The listener keys decide, the same
 * way on both sides: the connection of the side with the lower key is kept.
 * That side refuses the peer's request with a Yield hello, and the peer's
 * attempt waits (ConnState::Awaiting); the other side accepts the request
 * and moves its endpoint onto it (ConnUser::on_moved), dropping its own
 * attempt. A peer whose request never comes is waited for connect_timeout_s,
 * then connected to again.
 *
 * The connect window. At most connect_window of the table's own attempts
 * are in flight at once (Connection::in_flight: resolving or connecting
 * through rdma_cm); an endpoint created beyond that waits, Queued, and is
 * started when one of them ends, in the order they were created. A burst of
 * endpoints (UCX's 2048-endpoint pending tests) would otherwise send its
 * connect requests all at once, and the CM's MADs overflow the port's
 * receive queue (ib_core's recv_queue_size, 512) and the listener's backlog:
 * the kernel CM then retransmits them after seconds. A retry keeps its
 * attempt's place; an attempt that awaits the peer's connection gives it up,
 * and its retry, if the peer's never comes, goes beyond the window. A
 * queued attempt the peer's request crosses is dropped for the peer's
 * connection whichever listener key is lower: it never reached the peer.
 *
 * All of it runs with the interface's wireup lock held.
 */
#ifndef XQP_IFACE_CONN_TABLE_H
#define XQP_IFACE_CONN_TABLE_H

#include "iface/passive_log.h"
#include "wireup/connection.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xqp::iface {

/* What sends on a connection of the table (an endpoint): it hears what the
 * connection reports while it sends on it. */
class ConnUser : public wireup::ConnectionOwner {
public:
    /* the user's own attempt is dropped: it sends on conn now, which the
     * peer opened while we connected to it (simultaneous connect) */
    virtual void on_moved(wireup::Connection &conn) = 0;
};

/* The record of conn (state, ECE, QP number, error) for introspection. */
void fill_wireup_info(const wireup::Connection &conn, xqp_wireup_info_t *info);

class ConnTable final : public wireup::ConnectionOwner {
public:
    static constexpr size_t kPassiveRecords = 4096;

    /* name: for the log (the interface's resource name) */
    ConnTable(wireup::CmOps &cm, wireup::EceProvider &ece_provider,
              const wireup::WireupConfig &config, std::string name);
    ~ConnTable() override;
    ConnTable(const ConnTable &) = delete;
    ConnTable &operator=(const ConnTable &) = delete;

    /* The connection user sends on toward the listener at dst. With
     * sharing (and not to this side's own listener), the one the peer
     * opened for the same pair number, if it did (its user then owes the
     * peer a bound notice: !conn.active()); otherwise a new connection,
     * connecting. conn_id: the new connection's number. share false: a
     * new connection of user's own, which the peer matches to no endpoint
     * (pair number 0), whatever UCX_XQP_SHARE says. */
    wireup::Connection &open(ConnUser &user, const sockaddr_storage &dst, uint32_t conn_id,
                             bool share = true);

    /* A CONNECT_REQUEST (a new cm_id): accepted into a new entry, or, when
     * both sides connect at once and ours is kept, refused (Yield). */
    void accept(const wireup::CmEvent &event);

    /* A later rdma_cm event of conn's id. */
    void on_event(wireup::Connection &conn, const wireup::CmEvent &event);

    /* conn's connect timeout (Connection::check_timeout), which counts only
     * the time its peer is silent: an answer to another of our attempts to
     * the same peer interface, or a request from it, restarts the clock */
    void check_timeout(wireup::Connection &conn, double now);

    /* Its user no longer sends on conn (its requests are complete). The
     * connection stays while the peer sends on it; otherwise it is closed
     * and destroyed now. */
    void release(wireup::Connection &conn);

    /* The peer sends on conn, as far as this side knows. */
    bool peer_sends(const wireup::Connection &conn) const;

    /* A notice from the peer on the QP numbered qp_num: it sends on the
     * connection from now on (bound), or no more (release). */
    void on_notice(uint32_t qp_num, bool sends);

    /* Destroys the connections that ended and that nobody sends on; never
     * called from inside a connection's own callback. Only the entries
     * whose state or sender changed since the last call are looked at. */
    void reap();

    /* Destroys every connection (the interface goes). */
    void clear();

    /* The connections no endpoint opened itself and uses: the accepted
     * ones, and those that outlived their endpoint (xqp.h). */
    size_t held() const;
    /* every connection */
    size_t size() const { return entries_.size(); }
    /* our attempts in flight and those queued behind the connect window */
    void count_attempts(unsigned *in_flight, unsigned *queued) const;

    /* what the last kPassiveRecords connect requests became */
    const PassiveLog &passive_log() const { return log_; }

    /* wireup::ConnectionOwner: on to the entry's user */
    void on_established(wireup::Connection &conn) override;
    void on_failed(wireup::Connection &conn) override;
    void on_closed(wireup::Connection &conn) override;
    void on_log(wireup::Connection &conn, const std::string &line) override;

private:
    /* (peer listener, pair number) */
    using MatchKey = std::pair<wireup::ListenerKey, uint32_t>;

    struct Entry {
        std::unique_ptr<wireup::Connection> conn;
        MatchKey   key;                  /* pair number 0: not shared */
        ConnUser  *sender     = nullptr; /* we send: the endpoint that does */
        bool       peer_sends = false;   /* the peer sends */
    };

    using Entries = std::list<Entry>;

    Entry       *find(const wireup::Connection &conn);
    const Entry *find(const wireup::Connection &conn) const;
    /* our endpoint's attempt that crosses the peer's request (hello) */
    Entry       *crossing(const wireup::Hello &hello);
    void         record(wireup::Connection &conn);
    Entry       &add(Entry entry);
    void         erase(Entries::iterator it);
    /* starts queued attempts while the window has room */
    void         pump();
    /* conn may have ended, or lost its sender: reap() looks at it */
    void         maybe_ended(const wireup::Connection &conn) { ended_.push_back(&conn); }

    wireup::CmOps               &cm_;
    wireup::EceProvider         &ece_provider_;
    const wireup::WireupConfig   config_;
    const std::string            name_;
    Entries                      entries_;
    /* every entry by its connection: the events and the owner's callbacks
     * find theirs in constant time, not by a walk of the table */
    std::unordered_map<const wireup::Connection *, Entries::iterator> by_conn_;
    /* accepted shared connections no endpoint of ours sends on yet */
    std::map<MatchKey, Entry *>  unmatched_;
    /* our own shared connections (pair number not 0), by key: what a
     * peer's request crosses */
    std::map<MatchKey, Entry *>  ours_;
    /* what reap() looks at */
    std::vector<const wireup::Connection *> ended_;
    /* endpoints created toward each peer interface (pair numbers) */
    std::map<wireup::ListenerKey, uint32_t> pair_seq_;
    /* what we heard from each peer interface (answers, requests): a count */
    std::map<wireup::ListenerKey, uint64_t> heard_;
    PassiveLog                   log_{kPassiveRecords};
    /* the connect window: our attempts in flight (some may have ended
     * since: pump() looks), and those queued, oldest first */
    std::vector<wireup::Connection *> flying_;
    std::deque<wireup::Connection *>  queued_;
};

} // namespace xqp::iface

#endif
