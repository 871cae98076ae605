/*
 * xqp - the unit tests' fakes of the rdma_cm/verbs seams (wireup::CmOps,
 * wireup::EceProvider) and a connection owner, all recorders: every call
 * goes, in order, into one shared log, so that a test asserts the exact
 * sequence of calls. The rdma_cm_id / ibv_qp objects are plain structs
 * owned by the fake and never reach a real library.
 */
#ifndef XQP_TEST_UNIT_FAKE_CM_H
#define XQP_TEST_UNIT_FAKE_CM_H

#include "wireup/connection.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace xqp::test {

using namespace xqp::wireup;

/* the AF_INET address ip:port (both in host order) */
inline sockaddr_storage ipv4(uint32_t ip, uint16_t port)
{
    sockaddr_storage ss = {};
    auto            *in = reinterpret_cast<sockaddr_in *>(&ss);
    in->sin_family      = AF_INET;
    in->sin_port        = htons(port);
    in->sin_addr.s_addr = htonl(ip);
    return ss;
}

using Calls = std::vector<std::string>;

constexpr uint32_t kMlx = 0x15b3;

inline std::string hex(uint32_t v)
{
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%x", v);
    return buf;
}

/* "0x15b3:0x3" */
inline std::string ece_str(const Ece &e)
{
    return hex(e.vendor_id) + ":" + hex(e.options);
}

inline std::string strerr(int err)
{
    return std::strerror(err);
}

/* ------------------------------------------------------------------ fakes */

class RecordingEce;

/* CmOps that records every call and hands out fake ids and QPs. */
class RecordingCm final : public CmOps {
public:
    struct Sent {
        rdma_cm_id          *id = nullptr;
        ConnParams           params;
        std::vector<uint8_t> pdata; /* a copy of params.private_data */
    };

    explicit RecordingCm(Calls &log) : log_(log) {}

    /* the next `times` calls of `op` return err (times < 0: every call) */
    void inject(const std::string &op, int err, int times = -1) { faults_[op] = {err, times}; }

    /* the id of a CONNECT_REQUEST (made by the CM, not by create_id) */
    rdma_cm_id *passive_id()
    {
        rdma_cm_id *id = new_id();
        passive_ids.push_back(id);
        return id;
    }

    void attach(RecordingEce *ece) { ece_ = ece; }

    int create_id(void *context, rdma_cm_id **id) override
    {
        log_.push_back("create_id");
        if (const int err = fault("create_id")) {
            return err;
        }
        *id            = new_id();
        (*id)->context = context;
        created_ids.push_back(*id);
        return 0;
    }

    int resolve_addr(rdma_cm_id *id, const sockaddr *dst, int timeout_ms) override
    {
        log_.push_back("resolve_addr");
        check_id(id, "resolve_addr");
        EXPECT_NE(nullptr, dst);
        if (dst != nullptr) {
            std::memcpy(&last_dst, dst, sizeof(last_dst));
        }
        last_addr_timeout = timeout_ms;
        return fault("resolve_addr");
    }

    int resolve_route(rdma_cm_id *id, int timeout_ms) override
    {
        log_.push_back("resolve_route");
        check_id(id, "resolve_route");
        last_route_timeout = timeout_ms;
        return fault("resolve_route");
    }

    int set_local_ece(rdma_cm_id *id, const Ece &ece) override
    {
        log_.push_back("set_local_ece " + ece_str(ece));
        check_id(id, "set_local_ece");
        return fault("set_local_ece");
    }

    int get_remote_ece(rdma_cm_id *id, Ece *ece) override
    {
        log_.push_back("get_remote_ece");
        check_id(id, "get_remote_ece");
        if (const int err = fault("get_remote_ece")) {
            *ece = Ece{0xdead, 0xbeef}; /* garbage a failed call may leave */
            return err;
        }
        *ece = remote_ece;
        return 0;
    }

    int connect(rdma_cm_id *id, const ConnParams &params) override
    {
        log_.push_back("connect qp=" + std::to_string(params.qp_num) +
                       " pdata=" + std::to_string(params.private_data_len));
        check_id(id, "connect");
        connects.push_back(capture(id, params));
        return fault("connect");
    }

    int establish(rdma_cm_id *id) override
    {
        log_.push_back("establish");
        check_id(id, "establish");
        return fault("establish");
    }

    int accept(rdma_cm_id *id, const ConnParams &params) override
    {
        log_.push_back("accept qp=" + std::to_string(params.qp_num) +
                       " pdata=" + std::to_string(params.private_data_len));
        check_id(id, "accept");
        accepts.push_back(capture(id, params));
        return fault("accept");
    }

    int reject(rdma_cm_id *id) override
    {
        log_.push_back("reject");
        check_id(id, "reject");
        return fault("reject");
    }

    int reject_ece(rdma_cm_id *id) override
    {
        log_.push_back("reject_ece");
        check_id(id, "reject_ece");
        return fault("reject_ece");
    }

    int reject_yield(rdma_cm_id *id, const uint8_t *pdata, uint8_t len) override
    {
        log_.push_back("reject_yield pdata=" + std::to_string(len));
        check_id(id, "reject_yield");
        yields.emplace_back(pdata, pdata + len);
        return fault("reject_yield");
    }

    int disconnect(rdma_cm_id *id) override
    {
        log_.push_back("disconnect");
        check_id(id, "disconnect");
        return fault("disconnect");
    }

    void destroy_id(rdma_cm_id *id) override
    {
        log_.push_back("destroy_id");
        EXPECT_EQ(1u, live_ids.erase(id)) << "destroy_id of an id that is not live";
        destroyed_ids.push_back(id);
    }

    int create_qp(rdma_cm_id *id, QpRole role, ibv_qp **qp) override
    {
        log_.push_back("create_qp");
        qp_roles.push_back(role);
        check_id(id, "create_qp");
        if (const int err = fault("create_qp")) {
            return err;
        }
        qps_.push_back(std::make_unique<ibv_qp>());
        *qp           = qps_.back().get();
        (*qp)->qp_num = next_qp_num_++;
        live_qps.insert(*qp);
        created_qps.push_back(*qp);
        qp_id_[*qp] = id;
        return 0;
    }

    int modify_qp(rdma_cm_id *id, ibv_qp *qp, ibv_qp_state state) override;

    int connect_self(rdma_cm_id *id, ibv_qp *qp, const ConnParams &params) override
    {
        log_.push_back("connect_self qp=" + std::to_string(params.qp_num));
        check_id(id, "connect_self");
        EXPECT_EQ(1u, live_qps.count(qp)) << "connect_self of a QP that is not live";
        EXPECT_EQ(qp->qp_num, params.qp_num);
        return fault("connect_self");
    }

    int error_qp(ibv_qp *qp) override
    {
        log_.push_back("error_qp");
        EXPECT_EQ(1u, live_qps.count(qp)) << "error_qp of a QP that is not live";
        return fault("error_qp");
    }

    void destroy_qp(ibv_qp *qp) override
    {
        log_.push_back("destroy_qp");
        EXPECT_EQ(1u, live_qps.erase(qp)) << "destroy_qp of a QP that is not live";
    }

    Ece remote_ece; /* what get_remote_ece returns */

    std::vector<Sent>        connects;
    std::vector<Sent>        accepts;
    std::vector<std::vector<uint8_t>> yields;
    std::vector<rdma_cm_id *> created_ids;
    std::vector<rdma_cm_id *> passive_ids;
    std::vector<rdma_cm_id *> destroyed_ids;
    std::vector<ibv_qp *>     created_qps;
    std::vector<QpRole>       qp_roles;
    std::set<rdma_cm_id *>    live_ids;
    std::set<ibv_qp *>        live_qps;
    sockaddr_in               last_dst           = {};
    int                       last_addr_timeout  = -1;
    int                       last_route_timeout = -1;

private:
    struct Fault {
        int err   = 0;
        int times = 0;
    };

    int fault(const std::string &op)
    {
        auto it = faults_.find(op);
        if ((it == faults_.end()) || (it->second.times == 0)) {
            return 0;
        }
        if (it->second.times > 0) {
            --it->second.times;
        }
        return it->second.err;
    }

    rdma_cm_id *new_id()
    {
        ids_.push_back(std::make_unique<rdma_cm_id>());
        live_ids.insert(ids_.back().get());
        return ids_.back().get();
    }

    void check_id(rdma_cm_id *id, const char *op)
    {
        EXPECT_EQ(1u, live_ids.count(id)) << op << " on an id that is not live";
    }

    static Sent capture(rdma_cm_id *id, const ConnParams &params)
    {
        Sent s;
        s.id     = id;
        s.params = params;
        if (params.private_data != nullptr) {
            s.pdata.assign(params.private_data, params.private_data + params.private_data_len);
        }
        s.params.private_data = nullptr; /* points into the caller's stack */
        return s;
    }

    Calls                                    &log_;
    RecordingEce                             *ece_ = nullptr;
    std::map<std::string, Fault>              faults_;
    std::vector<std::unique_ptr<rdma_cm_id>> ids_;
    std::vector<std::unique_ptr<ibv_qp>>     qps_;
    std::map<ibv_qp *, rdma_cm_id *>          qp_id_;
    uint32_t                                  next_qp_num_ = 0x101;
};

/*
 * ECE verbs. mlx5-like: ibv_query_ece reports the supported options until the
 * QP is modified, then the accepted ones (what ibv_set_ece asked for, masked
 * by the supported options); ibv_set_ece after a modify is a test failure.
 * rxe-like: EOPNOTSUPP for both.
 */
class RecordingEce final : public EceProvider {
public:
    explicit RecordingEce(Calls &log) : log_(log) {}

    void mlx5(uint32_t supported)
    {
        has_ece_   = true;
        supported_ = supported;
    }
    void rxe() { has_ece_ = false; }

    int query_ece(ibv_qp *qp, Ece *ece) override
    {
        log_.push_back("ibv_query_ece");
        query_qps.push_back(qp);
        if (!has_ece_) {
            *ece = Ece{};
            return EOPNOTSUPP;
        }
        const auto it = accepted_.find(qp);
        *ece = Ece{kMlx, (it != accepted_.end()) ? it->second : supported_};
        return 0;
    }

    int set_ece(ibv_qp *qp, const Ece &ece) override
    {
        log_.push_back("ibv_set_ece " + ece_str(ece));
        set_qps.push_back(qp);
        EXPECT_EQ(0u, accepted_.count(qp)) << "ibv_set_ece after ibv_modify_qp has no effect";
        if (!has_ece_) {
            return EOPNOTSUPP;
        }
        if (set_err != 0) {
            return set_err;
        }
        if (ece.vendor_id != kMlx) {
            return EINVAL;
        }
        pending_[qp] = ece.options & supported_;
        return 0;
    }

    /* ibv_modify_qp: the pending options become the accepted ones */
    void modified(ibv_qp *qp)
    {
        if (has_ece_ && (accepted_.count(qp) == 0)) {
            accepted_[qp] = pending_.count(qp) ? pending_[qp] : 0;
        }
    }

    int                   set_err = 0;
    std::vector<ibv_qp *> query_qps;
    std::vector<ibv_qp *> set_qps;

private:
    Calls                       &log_;
    bool                         has_ece_   = true;
    uint32_t                     supported_ = 0x3;
    std::map<ibv_qp *, uint32_t> pending_;
    std::map<ibv_qp *, uint32_t> accepted_;
};

inline int RecordingCm::modify_qp(rdma_cm_id *id, ibv_qp *qp, ibv_qp_state state)
{
    const char *name = (state == IBV_QPS_INIT) ? "INIT" :
                       (state == IBV_QPS_RTR)  ? "RTR" :
                       (state == IBV_QPS_RTS)  ? "RTS" : "?";
    log_.push_back(std::string("modify ") + name);
    check_id(id, "modify_qp");
    EXPECT_EQ(1u, live_qps.count(qp)) << "modify of a QP that is not live";
    EXPECT_EQ(id, qp_id_[qp]) << "QP modified through another id";
    if (const int err = fault(std::string("modify ") + name)) {
        return err;
    }
    if (ece_ != nullptr) {
        ece_->modified(qp);
    }
    return 0;
}

class RecordingOwner final : public ConnectionOwner {
public:
    explicit RecordingOwner(Calls &log) : log_(log) {}

    void on_established(Connection &conn) override
    {
        log_.push_back("on_established");
        ++established;
        EXPECT_EQ(ConnState::Connected, conn.state());
    }
    void on_failed(Connection &conn) override
    {
        log_.push_back("on_failed");
        ++failed;
        EXPECT_EQ(ConnState::Failed, conn.state());
        if (conn.qp_published()) {
            /* the data path may be posting to it: retired, never freed here */
            EXPECT_NE(nullptr, conn.qp()) << "a published QP freed before ~Connection";
        } else {
            EXPECT_EQ(nullptr, conn.qp()) << "on_failed before the QP was destroyed";
        }
        EXPECT_EQ(nullptr, conn.id()) << "on_failed before the id was destroyed";
    }
    void on_closed(Connection &conn) override
    {
        log_.push_back("on_closed");
        ++closed;
        EXPECT_EQ(ConnState::Closed, conn.state());
    }
    void on_log(Connection &, const std::string &line) override { lines.push_back(line); }

    bool logged(const std::string &needle) const
    {
        for (const auto &l : lines) {
            if (l.find(needle) != std::string::npos) {
                return true;
            }
        }
        return false;
    }

    int   established = 0;
    int   failed      = 0;
    int   closed      = 0;
    Calls lines;

private:
    Calls &log_;
};

} // namespace xqp::test

#endif
