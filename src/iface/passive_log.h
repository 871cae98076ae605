/*
 * xqp - what an interface's connect requests became, for introspection
 * (xqp_iface_passive_count, xqp_iface_passive_info): one record per
 * request, in arrival order, kept after its connection closes. Only the
 * last `capacity` records are kept, so that a long-lived interface that
 * accepts many connections does not grow without bound; the count still
 * counts every request. Wireup lock held for every call.
 */
#ifndef XQP_IFACE_PASSIVE_LOG_H
#define XQP_IFACE_PASSIVE_LOG_H

#include <xqp/xqp.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>

namespace xqp::wireup {
class Connection;
}

namespace xqp::iface {

class PassiveLog {
public:
    explicit PassiveLog(size_t capacity) : capacity_(capacity) {}

    /* a new request, handled by conn */
    void add(const wireup::Connection *conn)
    {
        forget(conn);
        index_[conn] = count();
        records_.push_back(Record{conn, xqp_wireup_info_t{}});
        if (records_.size() > capacity_) {
            forget(records_.front().conn);
            records_.pop_front();
            ++dropped_;
        }
    }
    /* conn's record, nullptr when it has none (any more) */
    xqp_wireup_info_t *find(const wireup::Connection *conn)
    {
        const auto it = index_.find(conn);
        return (it != index_.end()) ? &records_[it->second - dropped_].info : nullptr;
    }
    /* conn is destroyed: its record stays, unattached */
    void forget(const wireup::Connection *conn)
    {
        const auto it = index_.find(conn);
        if (it != index_.end()) {
            records_[it->second - dropped_].conn = nullptr;
            index_.erase(it);
        }
    }
    /* every request so far, the dropped ones included */
    uint64_t count() const { return dropped_ + records_.size(); }
    /* 0, or -ENOENT past the end or for a dropped record */
    int get(uint64_t index, xqp_wireup_info_t *info) const
    {
        if ((index < dropped_) || (index - dropped_ >= records_.size())) {
            return -ENOENT;
        }
        *info = records_[index - dropped_].info;
        return 0;
    }

private:
    struct Record {
        const wireup::Connection *conn;
        xqp_wireup_info_t         info;
    };
    size_t             capacity_;
    std::deque<Record> records_;
    uint64_t           dropped_ = 0;
    /* the attached records' numbers (count() when added), by connection:
     * a connection's events find its record without a walk of the log */
    std::unordered_map<const wireup::Connection *, uint64_t> index_;
};

} // namespace xqp::iface

#endif
