/*
 * xqp_ucp_cs - UCP's client/server API over whatever UCX_TLS selects, with
 * peer error handling, through UCP's public API only.
 *
 *   xqp_ucp_cs server PORT NCLIENTS SIZE
 *       listens on PORT (all addresses), accepts NCLIENTS connections and
 *       serves each: a stream message (the client's number and SIZE bytes)
 *       echoed on the stream, a tagged message echoed with the tag the
 *       client's number gives, an active message echoed as an active
 *       message. Prints "served N" after each, then keeps its endpoints open
 *       and progresses until it is killed.
 *   xqp_ucp_cs client IP PORT K SIZE WAIT_S
 *       connects to IP:PORT, does the three exchanges as client number K and
 *       compares every byte, prints "client K: stream tag am ok", then waits
 *       up to WAIT_S seconds for its endpoint's error handler (the test
 *       kills the server) and prints "client K: error STATUS".
 *
 * Exit status: 0 on success (a client: the exchanges matched and, with
 * WAIT_S > 0, the error handler ran in time), 1 on a failure, which is
 * printed, 2 on usage errors, 3 when a client's error handler did not run
 * within WAIT_S.
 */
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AM_REQUEST 1
#define AM_REPLY   2
#define TAG_REPLY  (1ull << 32)
#define TIMEOUT_S  60.0
#define MAX_CLIENTS 16

static const char *g_role = "?";

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "xqp_ucp_cs %s: ", g_role);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint8_t pattern(size_t i, unsigned k, int reply)
{
    return (uint8_t)(i * 31 + k * 7 + (reply ? 101 : 0));
}

static void fill(uint8_t *buf, size_t size, unsigned k, int reply)
{
    for (size_t i = 0; i < size; ++i) {
        buf[i] = pattern(i, k, reply);
    }
}

static void check(const uint8_t *buf, size_t size, unsigned k, int reply, const char *what)
{
    for (size_t i = 0; i < size; ++i) {
        if (buf[i] != pattern(i, k, reply)) {
            die("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, size, buf[i],
                pattern(i, k, reply));
        }
    }
}

/* ------------------------------------------------------------------ UCP */

static ucp_context_h g_context;
static ucp_worker_h  g_worker;

static void progress(void);

static void init_ucp(void)
{
    ucp_params_t params = {0};
    params.field_mask   = UCP_PARAM_FIELD_FEATURES;
    params.features     = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_AM;
    ucs_status_t status = ucp_init(&params, NULL, &g_context);
    if (status != UCS_OK) {
        die("ucp_init: %s", ucs_status_string(status));
    }
    ucp_worker_params_t wparams = {0};
    wparams.field_mask          = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode         = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(g_context, &wparams, &g_worker);
    if (status != UCS_OK) {
        die("ucp_worker_create: %s", ucs_status_string(status));
    }
}

/* progresses until the request completes; returns its status */
static ucs_status_t wait_request(void *request, const char *what)
{
    if (request == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }
    const double deadline = now() + TIMEOUT_S;
    ucs_status_t status;
    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        progress();
        if (now() > deadline) {
            die("%s: no completion in %.0f s", what, TIMEOUT_S);
        }
    }
    ucp_request_free(request);
    return status;
}

static void must(ucs_status_t status, const char *what)
{
    if (status != UCS_OK) {
        die("%s: %s", what, ucs_status_string(status));
    }
}

/* a stream receive of exactly size bytes */
static void stream_recv_all(ucp_ep_h ep, void *buf, size_t size, const char *what)
{
    ucp_request_param_t param = {0};
    param.op_attr_mask        = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags               = UCP_STREAM_RECV_FLAG_WAITALL;
    size_t length             = 0;
    must(wait_request(ucp_stream_recv_nbx(ep, buf, size, &length, &param), what), what);
}

static void stream_send(ucp_ep_h ep, const void *buf, size_t size, const char *what)
{
    ucp_request_param_t param = {0};
    must(wait_request(ucp_stream_send_nbx(ep, buf, size, &param), what), what);
}

static void tag_send(ucp_ep_h ep, const void *buf, size_t size, ucp_tag_t tag, const char *what)
{
    ucp_request_param_t param = {0};
    must(wait_request(ucp_tag_send_nbx(ep, buf, size, tag, &param), what), what);
}

static void tag_recv(void *buf, size_t size, ucp_tag_t tag, const char *what)
{
    ucp_request_param_t param = {0};
    must(wait_request(ucp_tag_recv_nbx(g_worker, buf, size, tag, ~0ull, &param), what), what);
}

/* active messages, copied out of the handler into the slot of the client
 * number their header gives (clients send concurrently) */
struct am_slot {
    uint8_t *data;
    size_t   length;
    ucp_ep_h reply_ep;
    int      arrived;
    void    *rndv_desc; /* a rendezvous message's descriptor, until received */
};
static struct am_slot g_am[MAX_CLIENTS + 1];

static ucs_status_t am_handler(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg;
    uint32_t k = 0;
    if (header_length == sizeof(k)) {
        memcpy(&k, header, sizeof(k));
    }
    if ((header_length != sizeof(k)) || (k == 0) || (k > MAX_CLIENTS) || g_am[k].arrived) {
        fprintf(stderr, "xqp_ucp_cs %s: unexpected active message (header %zu bytes, k %u)\n",
                g_role, header_length, k);
        return UCS_OK;
    }
    struct am_slot *slot = &g_am[k];
    slot->length   = length;
    slot->reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    slot->arrived  = 1;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        /* large messages come by rendezvous: received in am_wait */
        slot->rndv_desc = data;
        return UCS_INPROGRESS;
    }
    slot->data = malloc(length ? length : 1);
    memcpy(slot->data, data, length);
    return UCS_OK;
}

static void set_am_handler(unsigned id)
{
    ucp_am_handler_param_t param = {0};
    param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    param.id    = id;
    param.cb    = am_handler;
    param.flags = UCP_AM_FLAG_WHOLE_MSG;
    must(ucp_worker_set_am_recv_handler(g_worker, &param), "ucp_worker_set_am_recv_handler");
}

static void am_send(ucp_ep_h ep, unsigned id, uint32_t header, const void *buf, size_t size,
                    const char *what)
{
    ucp_request_param_t param = {0};
    param.op_attr_mask        = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags               = UCP_AM_SEND_FLAG_REPLY;
    must(wait_request(ucp_am_send_nbx(ep, id, &header, sizeof(header), buf, size, &param), what),
         what);
}

static struct am_slot *am_wait(unsigned k, const char *what)
{
    const double deadline = now() + TIMEOUT_S;
    while (!g_am[k].arrived) {
        progress();
        if (now() > deadline) {
            die("%s: no active message in %.0f s", what, TIMEOUT_S);
        }
    }
    struct am_slot *slot = &g_am[k];
    if (slot->rndv_desc != NULL) {
        slot->data = malloc(slot->length ? slot->length : 1);
        ucp_request_param_t param = {0};
        void *desc                = slot->rndv_desc;
        slot->rndv_desc           = NULL;
        must(wait_request(ucp_am_recv_data_nbx(g_worker, desc, slot->data, slot->length, &param),
                          what),
             what);
    }
    return slot;
}

static void am_consumed(struct am_slot *slot)
{
    free(slot->data);
    memset(slot, 0, sizeof(*slot));
}

/* ------------------------------------------------------------------ errors */

static ucs_status_t g_ep_error   = UCS_OK;
static int          g_ep_errors  = 0;

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    g_ep_error = status;
    ++g_ep_errors;
}

static ucp_ep_params_t ep_params_peer_errors(void)
{
    ucp_ep_params_t params   = {0};
    params.field_mask        = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                               UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode          = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb    = ep_error_cb;
    params.err_handler.arg   = NULL;
    return params;
}

/* ------------------------------------------------------------------ server */

static ucp_conn_request_h g_requests[MAX_CLIENTS];
static unsigned           g_num_requests;
static ucp_ep_h           g_server_eps[MAX_CLIENTS];
static unsigned           g_num_server_eps;
static int                g_is_server;

/* the worker's progress; a server also accepts every connection request as
 * soon as it arrives, so that no client waits for the ones before it */
static void progress(void)
{
    ucp_worker_progress(g_worker);
    while (g_is_server && (g_num_server_eps < g_num_requests)) {
        ucp_ep_params_t params = ep_params_peer_errors();
        params.field_mask     |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
        params.conn_request    = g_requests[g_num_server_eps];
        must(ucp_ep_create(g_worker, &params, &g_server_eps[g_num_server_eps]),
             "ucp_ep_create (server)");
        ++g_num_server_eps;
    }
}

static void conn_handler(ucp_conn_request_h request, void *arg)
{
    (void)arg;
    if (g_num_requests < MAX_CLIENTS) {
        g_requests[g_num_requests++] = request;
    } else {
        ucp_listener_reject(*(ucp_listener_h *)arg, request);
    }
}

static void serve(ucp_ep_h ep, size_t size)
{
    uint8_t *buf = malloc(sizeof(uint32_t) + size);
    uint32_t k;
    stream_recv_all(ep, buf, sizeof(k) + size, "stream receive");
    memcpy(&k, buf, sizeof(k));
    check(buf + sizeof(k), size, k, 0, "stream message");
    fill(buf, size, k, 1);
    stream_send(ep, buf, size, "stream reply");

    tag_recv(buf, size, k, "tag receive");
    check(buf, size, k, 0, "tagged message");
    fill(buf, size, k, 1);
    tag_send(ep, buf, size, k | TAG_REPLY, "tag reply");

    struct am_slot *am = am_wait(k, "active message");
    if (am->length != size) {
        die("active message of client %u: %zu bytes, expected %zu", k, am->length, size);
    }
    check(am->data, size, k, 0, "active message");
    if (am->reply_ep != ep) {
        die("active message of client %u: reply endpoint %p, expected %p", k,
            (void *)am->reply_ep, (void *)ep);
    }
    am_consumed(am);
    fill(buf, size, k, 1);
    am_send(ep, AM_REPLY, k, buf, size, "active message reply");
    free(buf);
}

static int run_server(int port, unsigned nclients, size_t size)
{
    init_ucp();
    set_am_handler(AM_REQUEST);
    struct sockaddr_in addr  = {0};
    addr.sin_family          = AF_INET;
    addr.sin_addr.s_addr     = htonl(INADDR_ANY);
    addr.sin_port            = htons(port);
    ucp_listener_h listener  = NULL;
    ucp_listener_params_t lp = {0};
    lp.field_mask            = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                               UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr         = (const struct sockaddr *)&addr;
    lp.sockaddr.addrlen      = sizeof(addr);
    lp.conn_handler.cb       = conn_handler;
    lp.conn_handler.arg      = &listener;
    must(ucp_listener_create(g_worker, &lp, &listener), "ucp_listener_create");
    printf("listening on port %d\n", port);
    fflush(stdout);

    g_is_server = 1;
    for (unsigned served = 0; served < nclients; ++served) {
        while (g_num_server_eps <= served) {
            progress();
        }
        serve(g_server_eps[served], size);
        printf("served %u\n", served + 1);
        fflush(stdout);
    }
    /* until killed: the clients see that as a peer failure */
    for (;;) {
        progress();
    }
    return 0;
}

/* ------------------------------------------------------------------ client */

/* closes the endpoint (forced: the peer may be gone), then worker and context */
static void close_and_clean_up(ucp_ep_h ep, const char *what)
{
    ucp_request_param_t param = {0};
    param.op_attr_mask        = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags               = UCP_EP_CLOSE_FLAG_FORCE;
    wait_request(ucp_ep_close_nbx(ep, &param), what);
    ucp_worker_destroy(g_worker);
    ucp_cleanup(g_context);
}

static int run_client(const char *ip, int port, unsigned k, size_t size, double wait_s)
{
    init_ucp();
    set_am_handler(AM_REPLY);
    struct sockaddr_in addr = {0};
    addr.sin_family         = AF_INET;
    addr.sin_port           = htons(port);
    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) {
        die("not an IPv4 address: %s", ip);
    }
    ucp_ep_params_t params  = ep_params_peer_errors();
    params.field_mask      |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr    = (const struct sockaddr *)&addr;
    params.sockaddr.addrlen = sizeof(addr);
    ucp_ep_h ep;
    must(ucp_ep_create(g_worker, &params, &ep), "ucp_ep_create (client)");

    uint8_t *buf = malloc(sizeof(uint32_t) + size);
    memcpy(buf, &k, sizeof(k));
    fill(buf + sizeof(k), size, k, 0);
    stream_send(ep, buf, sizeof(k) + size, "stream send");
    memset(buf, 0, size);
    stream_recv_all(ep, buf, size, "stream reply");
    check(buf, size, k, 1, "stream reply");

    fill(buf, size, k, 0);
    tag_send(ep, buf, size, k, "tag send");
    memset(buf, 0, size);
    tag_recv(buf, size, k | TAG_REPLY, "tag reply");
    check(buf, size, k, 1, "tag reply");

    fill(buf, size, k, 0);
    am_send(ep, AM_REQUEST, k, buf, size, "active message");
    struct am_slot *am = am_wait(k, "active message reply");
    if (am->length != size) {
        die("active message reply: %zu bytes, expected %zu", am->length, size);
    }
    check(am->data, size, k, 1, "active message reply");
    am_consumed(am);
    free(buf);
    if (g_ep_errors != 0) {
        die("error handler called during the exchanges: %s", ucs_status_string(g_ep_error));
    }
    printf("client %u: stream tag am ok\n", k);
    fflush(stdout);

    if (wait_s <= 0) {
        close_and_clean_up(ep, "close");
        return 0;
    }
    const double deadline = now() + wait_s;
    while ((g_ep_errors == 0) && (now() < deadline)) {
        progress();
    }
    if (g_ep_errors == 0) {
        printf("client %u: no error within %.0f s\n", k, wait_s);
        return 3;
    }
    printf("client %u: error %s\n", k, ucs_status_string(g_ep_error));
    fflush(stdout);
    /* a failed endpoint still closes, and the worker goes away cleanly */
    close_and_clean_up(ep, "close of the failed endpoint");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((argc == 5) && !strcmp(argv[1], "server")) {
        g_role = "server";
        const unsigned n = (unsigned)atoi(argv[3]);
        if ((n == 0) || (n > MAX_CLIENTS)) {
            fprintf(stderr, "xqp_ucp_cs: NCLIENTS must be 1..%d\n", MAX_CLIENTS);
            return 2;
        }
        return run_server(atoi(argv[2]), n, strtoul(argv[4], NULL, 0));
    }
    if ((argc == 7) && !strcmp(argv[1], "client")) {
        g_role = "client";
        const unsigned k = (unsigned)atoi(argv[4]);
        if ((k == 0) || (k > MAX_CLIENTS)) {
            fprintf(stderr, "xqp_ucp_cs: K must be 1..%d\n", MAX_CLIENTS);
            return 2;
        }
        return run_client(argv[2], atoi(argv[3]), k,
                          strtoul(argv[5], NULL, 0), atof(argv[6]));
    }
    fprintf(stderr, "usage: %s server PORT NCLIENTS SIZE\n"
                    "       %s client IP PORT K SIZE WAIT_S\n", argv[0], argv[0]);
    return 2;
}
