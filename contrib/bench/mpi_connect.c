/*
 * mpi_connect: the first all-to-all exchange of an MPI job, for the
 * connection-scale benchmark (contrib/bench/mpi-scale.sh, issue #16).
 *
 * Every rank sends one integer to every other rank and receives one from
 * each, the values checked. With Open MPI's pml ucx, endpoints are created
 * on first use, so this exchange is where the job's connections are made.
 * Then rank 0 counts the RC QPs each rank holds (`rdma resource show qp`,
 * by process), while all ranks are still alive; XQP_MPI_CONNECT_SHOW_QPS=1
 * prints what it counted from. Rank 0 prints one line:
 *
 *   mpi_connect ranks P init_to_connected_ms T exchange_ms E qps_min A qps_max B
 *
 * T runs from the earliest rank's call of MPI_Init to the latest rank's end
 * of the exchange (the ranks share one host's clock); E is the exchange
 * alone, the slowest rank's. Exits 1 on a wrong value or a failed count.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* the process a thread id belongs to (rdma resource show names the thread
 * that created a QP: UCX's async thread for QPs made in rdma_cm events) */
static int tgid_of(int tid)
{
    char path[64], line[256];
    int tgid = tid;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", tid);
    f = fopen(path, "r");
    if (f == NULL) {
        return tid;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "Tgid: %d", &tgid) == 1) {
            break;
        }
    }
    fclose(f);
    return tgid;
}

/* RC QPs of each process in pids[0..n) into qps[]; 0 on success */
static int count_qps(const int *pids, int n, int *qps)
{
    char line[1024];
    FILE *p = popen("rdma resource show qp 2>/dev/null", "r");
    int i, lines = 0;

    if (p == NULL) {
        return -1;
    }
    memset(qps, 0, sizeof(*qps) * (size_t)n);
    while (fgets(line, sizeof(line), p) != NULL) {
        const char *at = strstr(line, " pid ");
        int pid;
        ++lines;
        if (getenv("XQP_MPI_CONNECT_SHOW_QPS") != NULL) {
            fputs(line, stdout);
        }
        if ((strstr(line, " type RC ") == NULL) || (at == NULL) ||
            (sscanf(at, " pid %d", &pid) != 1)) {
            continue;
        }
        pid = tgid_of(pid);
        for (i = 0; i < n; ++i) {
            if (pids[i] == pid) {
                ++qps[i];
            }
        }
    }
    return (pclose(p) == 0 && lines > 0) ? 0 : -1;
}

int main(int argc, char **argv)
{
    const double t_init = now_ms();
    int rank, nranks, peer, failed = 0, pid, *pids = NULL, *qps = NULL;
    int *send, *recv;
    double t_start, t_end, span[2], worst[2], exchange, worst_exchange;
    MPI_Request *reqs;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    send = calloc((size_t)nranks, sizeof(*send));
    recv = calloc((size_t)nranks, sizeof(*recv));
    reqs = calloc(2 * (size_t)nranks, sizeof(*reqs));
    if ((send == NULL) || (recv == NULL) || (reqs == NULL)) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    /* the exchange, point to point: no collective has connected anything */
    t_start = now_ms();
    for (peer = 0; peer < nranks; ++peer) {
        send[peer] = rank * 1000 + peer;
        recv[peer] = -1;
        MPI_Irecv(&recv[peer], 1, MPI_INT, peer, 7, MPI_COMM_WORLD, &reqs[2 * peer]);
        MPI_Isend(&send[peer], 1, MPI_INT, peer, 7, MPI_COMM_WORLD, &reqs[2 * peer + 1]);
    }
    MPI_Waitall(2 * nranks, reqs, MPI_STATUSES_IGNORE);
    t_end = now_ms();
    for (peer = 0; peer < nranks; ++peer) {
        if (recv[peer] != peer * 1000 + rank) {
            fprintf(stderr, "rank %d: from %d got %d, expected %d\n", rank, peer,
                    recv[peer], peer * 1000 + rank);
            failed = 1;
        }
    }

    /* -t_init so that the maximum gives the earliest start */
    span[0]  = -t_init;
    span[1]  = t_end;
    exchange = t_end - t_start;
    MPI_Reduce(span, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&exchange, &worst_exchange, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    /* every rank alive while rank 0 counts */
    pid = (int)getpid();
    if (rank == 0) {
        pids = calloc((size_t)nranks, sizeof(*pids));
        qps  = calloc((size_t)nranks, sizeof(*qps));
    }
    MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int lo, hi, i;
        if ((pids == NULL) || (qps == NULL) || (count_qps(pids, nranks, qps) != 0)) {
            fprintf(stderr, "could not count QPs (rdma resource show qp)\n");
            failed = 1;
        } else {
            lo = hi = qps[0];
            for (i = 1; i < nranks; ++i) {
                lo = (qps[i] < lo) ? qps[i] : lo;
                hi = (qps[i] > hi) ? qps[i] : hi;
            }
            printf("mpi_connect ranks %d init_to_connected_ms %.1f exchange_ms %.1f qps_min %d qps_max %d\n",
                   nranks, worst[1] + worst[0], worst_exchange, lo, hi);
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    free(send);
    free(recv);
    free(reqs);
    free(pids);
    free(qps);
    return failed;
}
