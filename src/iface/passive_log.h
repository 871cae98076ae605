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
        records_.push_back(Record{conn, xqp_wireup_info_t{}});
        if (records_.size() > capacity_) {
            records_.pop_front();
            ++dropped_;
        }
    }
    /* conn's record, nullptr when it has none (any more) */
    xqp_wireup_info_t *find(const wireup::Connection *conn)
    {
        for (auto &record : records_) {
            if (record.conn == conn) {
                return &record.info;
            }
        }
        return nullptr;
    }
    /* conn is destroyed: its record stays, unattached */
    void forget(const wireup::Connection *conn)
    {
        for (auto &record : records_) {
            if (record.conn == conn) {
                record.conn = nullptr;
            }
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
};

} // namespace xqp::iface

#endif
