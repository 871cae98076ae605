/* xqp - every connection of an interface, in one table (conn_table.h) */
#include "iface/conn_table.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

#include <algorithm>
#include <cstring>

namespace xqp::iface {

ConnTable::ConnTable(wireup::CmOps &cm, wireup::EceProvider &ece_provider,
                     const wireup::WireupConfig &config, std::string name)
    : cm_(cm), ece_provider_(ece_provider), config_(config), name_(std::move(name))
{
}

ConnTable::~ConnTable()
{
    clear();
}

wireup::Connection &ConnTable::open(ConnUser &user, const sockaddr_storage &dst, uint32_t conn_id,
                                    bool share)
{
    const wireup::ListenerKey peer = wireup::listener_key(dst);
    /* an endpoint to its own interface connects its QP to itself */
    const bool self                = (peer == config_.listener);
    uint32_t pair_sn               = 0;
    if (config_.share && share && !self) {
        pair_sn = ++pair_seq_[peer];
        const auto it = unmatched_.find({peer, pair_sn});
        if (it != unmatched_.end()) {
            Entry &entry     = *it->second;
            const auto state = entry.conn->state();
            unmatched_.erase(it);
            if (entry.peer_sends && ((state == wireup::ConnState::Accepting) ||
                                     (state == wireup::ConnState::Connected))) {
                entry.sender = &user;
                ucs_debug("xqp: %s: an endpoint shares the connection accepted from %s (pair %u)",
                          name_.c_str(), wireup::to_string(peer).c_str(), pair_sn);
                return *entry.conn;
            }
        }
    }
    Entry &entry = add(Entry{std::make_unique<wireup::Connection>(cm_, ece_provider_, config_,
                                                                  *this, conn_id),
                             {peer, pair_sn}, &user, false});
    if (pair_sn != 0) {
        ours_[entry.key] = &entry;
    }
    wireup::Connection &conn = *entry.conn;
    if ((config_.connect_window == 0) || self) {
        conn.connect(dst, pair_sn, self);
        return conn;
    }
    conn.queue(dst, pair_sn);
    queued_.push_back(&conn);
    pump();
    return conn;
}

void ConnTable::pump()
{
    if ((config_.connect_window == 0) || queued_.empty()) {
        return;
    }
    flying_.erase(std::remove_if(flying_.begin(), flying_.end(),
                                 [](const wireup::Connection *conn) { return !conn->in_flight(); }),
                  flying_.end());
    while ((flying_.size() < config_.connect_window) && !queued_.empty()) {
        wireup::Connection *conn = queued_.front();
        queued_.pop_front();
        conn->start(); /* may fail at once: then it is not in flight */
        if (conn->in_flight()) {
            flying_.push_back(conn);
        }
    }
}

ConnTable::Entry &ConnTable::add(Entry entry)
{
    entries_.push_back(std::move(entry));
    const auto it = std::prev(entries_.end());
    by_conn_.emplace(it->conn.get(), it);
    return *it;
}

void ConnTable::erase(Entries::iterator it)
{
    for (auto *index : {&unmatched_, &ours_}) {
        const auto found = index->find(it->key);
        if ((found != index->end()) && (found->second == &*it)) {
            index->erase(found);
        }
    }
    log_.forget(it->conn.get());
    by_conn_.erase(it->conn.get());
    if (config_.connect_window != 0) {
        const wireup::Connection *conn = it->conn.get();
        flying_.erase(std::remove(flying_.begin(), flying_.end(), conn), flying_.end());
        if (conn->active() && (conn->attempts() == 0)) { /* never started */
            queued_.erase(std::remove(queued_.begin(), queued_.end(), conn), queued_.end());
        }
    }
    entries_.erase(it);
}

ConnTable::Entry *ConnTable::crossing(const wireup::Hello &hello)
{
    const auto it = ours_.find({hello.listener, hello.pair_sn});
    if (it == ours_.end()) {
        return nullptr;
    }
    Entry &entry = *it->second;
    return ((entry.sender != nullptr) && entry.conn->active() && entry.conn->attempting()) ? &entry
                                                                                : nullptr;
}

void ConnTable::accept(const wireup::CmEvent &event)
{
    /* decoded once: the matching here, the connection's accept below */
    std::string why;
    const auto hello = wireup::decode(event.private_data.data(), event.private_data.size(), &why);
    const bool shared = config_.share && hello && (hello->kind == wireup::Hello::Kind::Request) &&
                        hello->share && hello->listener.known() && (hello->pair_sn != 0) &&
                        (hello->listener != config_.listener);
    if (hello && hello->listener.known()) {
        ++heard_[hello->listener]; /* the peer is alive */
    }
    Entry *ours = shared ? crossing(*hello) : nullptr;
    /* a queued attempt of ours never reached the peer: the peer's is kept */
    const bool ours_sent = (ours != nullptr) && (ours->conn->state() != wireup::ConnState::Queued);
    if (ours_sent && (config_.listener < hello->listener)) {
        /* both sides connect at once, and ours is kept: the peer's
         * endpoint waits for it */
        ucs_debug("xqp: %s: both sides connect (pair %u with %s): keeping ours", name_.c_str(),
                  hello->pair_sn, wireup::to_string(hello->listener).c_str());
        const int err = wireup::yield_request(cm_, config_, event, *hello);
        if (err != 0) {
            ucs_debug("xqp: %s: rdma_reject: %s", name_.c_str(), strerror(err));
        }
        return;
    }
    const MatchKey key = shared ? MatchKey{hello->listener, hello->pair_sn} : MatchKey{};
    Entry &entry = add(Entry{std::make_unique<wireup::Connection>(cm_, ece_provider_, config_,
                                                                  *this, 0),
                             key, nullptr, true /* the peer's endpoint opened it */});
    log_.add(entry.conn.get());
    if (ours != nullptr) {
        /* the peer's is kept: our endpoint drops its own attempt (the data
         * path never saw its QP) and sends on this one */
        ucs_debug("xqp: %s: both sides connect (pair %u with %s): using the peer's",
                  name_.c_str(), hello->pair_sn, wireup::to_string(hello->listener).c_str());
        entry.sender = ours->sender;
        /* our attempt's QP is not kept for the peer's connection, although
         * creating one is most of a connection's cost: its number was in our
         * request, and the peer's CM rejects a reply naming it again as a
         * stale connection (REJ reason 10; tried, 2 of 40 runs of 256 pairs) */
        ours->conn->close();
        erase(by_conn_.at(ours->conn.get()));
        entry.sender->on_moved(*entry.conn);
    } else if (shared) {
        Entry *&slot = unmatched_[key];
        slot         = &entry; /* a retried request replaces the one before */
    }
    /* the peer learns from the reply that our endpoint sends on it too:
     * were it to close its own endpoint before our first message reached
     * it, it would keep the connection for ours (release, not disconnect) */
    entry.conn->accept_request(event, hello, why, entry.sender != nullptr);
    record(*entry.conn);
    pump(); /* a crossing queued attempt may have gone */
}

void ConnTable::on_event(wireup::Connection &conn, const wireup::CmEvent &event)
{
    const bool from_peer = (event.type == RDMA_CM_EVENT_CONNECT_RESPONSE) ||
                           (event.type == RDMA_CM_EVENT_REJECTED) ||
                           (event.type == RDMA_CM_EVENT_ESTABLISHED);
    if (from_peer && conn.active()) {
        if (const Entry *entry = find(conn)) {
            ++heard_[entry->key.first];
        }
    }
    conn.on_event(event);
    if (!conn.active()) {
        record(conn);
    } else if ((event.type == RDMA_CM_EVENT_CONNECT_RESPONSE) && conn.peer_hello().sends) {
        /* the peer's endpoint took our connection for its sends (its
         * reply said so): learned now, before any message of it */
        if (Entry *entry = find(conn)) {
            entry->peer_sends = true;
        }
    }
    pump();
}

void ConnTable::check_timeout(wireup::Connection &conn, double now)
{
    const Entry *entry = find(conn);
    if (entry == nullptr) {
        return;
    }
    const auto it = heard_.find(entry->key.first);
    conn.check_timeout(now, (it != heard_.end()) ? it->second : 0);
    pump();
}

void ConnTable::release(wireup::Connection &conn)
{
    Entry *entry = find(conn);
    if (entry == nullptr) {
        return;
    }
    entry->sender = nullptr;
    if (!entry->peer_sends) {
        entry->conn->close(); /* neither side sends on it */
    }
    maybe_ended(conn);
    reap();
}

bool ConnTable::peer_sends(const wireup::Connection &conn) const
{
    const Entry *entry = find(conn);
    return (entry != nullptr) && entry->peer_sends;
}

void ConnTable::on_notice(uint32_t qp_num, bool sends)
{
    for (auto &entry : entries_) {
        const ibv_qp *qp = entry.conn->qp();
        if ((qp == nullptr) || (qp->qp_num != qp_num)) {
            continue;
        }
        entry.peer_sends = sends;
        if (!sends && (entry.sender == nullptr)) {
            entry.conn->close(); /* neither side sends on it */
            maybe_ended(*entry.conn);
            reap();
        }
        return;
    }
    ucs_debug("xqp: %s: %s notice on qp 0x%x, which no connection has", name_.c_str(),
              sends ? "bound" : "release", qp_num);
}

void ConnTable::reap()
{
    /* an entry ends when its connection failed or closed and nobody sends
     * on it: each change of either is reported to maybe_ended() */
    std::vector<const wireup::Connection *> ended;
    ended.swap(ended_);
    for (const auto *conn : ended) {
        const auto found = by_conn_.find(conn);
        if (found == by_conn_.end()) {
            continue; /* already destroyed */
        }
        const auto it    = found->second;
        const auto state = it->conn->state();
        if ((it->sender == nullptr) &&
            ((state == wireup::ConnState::Failed) || (state == wireup::ConnState::Closed))) {
            erase(it);
        }
    }
    pump();
}

void ConnTable::clear()
{
    unmatched_.clear();
    ours_.clear();
    flying_.clear();
    queued_.clear();
    ended_.clear();
    by_conn_.clear();
    entries_.clear();
}

size_t ConnTable::held() const
{
    size_t n = 0;
    for (const auto &entry : entries_) {
        n += (!entry.conn->active() || (entry.sender == nullptr)) ? 1 : 0;
    }
    return n;
}

void ConnTable::count_attempts(unsigned *in_flight, unsigned *queued) const
{
    *in_flight = 0;
    *queued    = 0;
    for (const auto &entry : entries_) {
        *in_flight += entry.conn->in_flight() ? 1 : 0;
        *queued    += (entry.conn->state() == wireup::ConnState::Queued) ? 1 : 0;
    }
}

ConnTable::Entry *ConnTable::find(const wireup::Connection &conn)
{
    const auto it = by_conn_.find(&conn);
    return (it != by_conn_.end()) ? &*it->second : nullptr;
}

const ConnTable::Entry *ConnTable::find(const wireup::Connection &conn) const
{
    return const_cast<ConnTable *>(this)->find(conn);
}

void ConnTable::record(wireup::Connection &conn)
{
    if (xqp_wireup_info_t *info = log_.find(&conn)) {
        const uint32_t qp_num = info->qp_num;
        fill_wireup_info(conn, info);
        if (info->qp_num == 0) {
            info->qp_num = qp_num; /* keep it after teardown */
        }
    }
}

/* ------------------------------------------------------------------ owner */

void ConnTable::on_established(wireup::Connection &conn)
{
    record(conn);
    const Entry *entry = find(conn);
    if ((entry != nullptr) && (entry->sender != nullptr)) {
        entry->sender->on_established(conn);
    }
}

void ConnTable::on_failed(wireup::Connection &conn)
{
    record(conn);
    maybe_ended(conn);
    const Entry *entry = find(conn);
    if ((entry != nullptr) && (entry->sender != nullptr)) {
        entry->sender->on_failed(conn);
    } else {
        ucs_debug("xqp: %s: %s connection failed: %s", name_.c_str(),
                  conn.active() ? "released" : "passive", conn.error().c_str());
    }
}

void ConnTable::on_closed(wireup::Connection &conn)
{
    record(conn);
    maybe_ended(conn);
    const Entry *entry = find(conn);
    if ((entry != nullptr) && (entry->sender != nullptr)) {
        entry->sender->on_closed(conn);
    }
}

void ConnTable::on_log(wireup::Connection &conn, const std::string &line)
{
    const Entry *entry = find(conn);
    if ((entry != nullptr) && (entry->sender != nullptr)) {
        entry->sender->on_log(conn, line);
    } else {
        ucs_debug("xqp: %s: %s", name_.c_str(), line.c_str());
    }
}

void fill_wireup_info(const wireup::Connection &conn, xqp_wireup_info_t *info)
{
    std::memset(info, 0, sizeof(*info));
    static_assert(int(wireup::ConnState::Closed) == XQP_CONN_CLOSED, "states match");
    static_assert(int(wireup::ConnState::Awaiting) == XQP_CONN_AWAITING, "states match");
    static_assert(int(wireup::ConnState::Queued) == XQP_CONN_QUEUED, "states match");
    info->state         = static_cast<int>(conn.state());
    info->attempts      = conn.attempts();
    info->status        = conn.status();
    info->reject_reason = conn.reject_reason();
    const auto &ece     = conn.ece_result();
    info->ece_sent      = {ece.sent.vendor_id, ece.sent.options};
    info->ece_received  = {ece.received.vendor_id, ece.received.options};
    info->ece_agreed    = {ece.agreed.vendor_id, ece.agreed.options};
    info->ece_applied   = ece.applied;
    info->ece_set_err   = ece.set_err;
    info->qp_num        = (conn.qp() != nullptr) ? conn.qp()->qp_num : 0;
    ucs_strncpy_zero(info->error, conn.error().c_str(), sizeof(info->error));
}

} // namespace xqp::iface
