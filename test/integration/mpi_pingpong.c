/*
 * Two-rank MPI check for xqp: ping-pong across sizes up to 4 MiB with the
 * data verified byte for byte on both sides, then an allreduce. Prints
 * "mpi ok" on rank 0 when everything matched.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(size_t i, size_t size, int round)
{
    return (unsigned char)((i * 131u + size + (size_t)round * 7u) & 0xffu);
}

int main(int argc, char **argv)
{
    int rank, nranks, failed = 0;
    size_t size, i;
    const size_t max_size = 4u << 20;
    unsigned char *buf;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 2) {
        if (rank == 0) {
            fprintf(stderr, "run with 2 ranks\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    buf = malloc(max_size);

    for (size = 1; size <= max_size; size *= 4) {
        const int rounds = (size >= (1u << 20)) ? 2 : 10;
        int round;
        for (round = 0; round < rounds; ++round) {
            if (rank == 0) {
                for (i = 0; i < size; ++i) {
                    buf[i] = pattern(i, size, round);
                }
                MPI_Send(buf, (int)size, MPI_BYTE, 1, round, MPI_COMM_WORLD);
                memset(buf, 0, size);
                MPI_Recv(buf, (int)size, MPI_BYTE, 1, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (i = 0; i < size; ++i) {
                    if (buf[i] != (unsigned char)~pattern(i, size, round)) {
                        fprintf(stderr, "rank 0: size %zu round %d byte %zu: 0x%02x\n", size,
                                round, i, buf[i]);
                        failed = 1;
                        break;
                    }
                }
            } else {
                MPI_Recv(buf, (int)size, MPI_BYTE, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (i = 0; i < size; ++i) {
                    if (buf[i] != pattern(i, size, round)) {
                        fprintf(stderr, "rank 1: size %zu round %d byte %zu: 0x%02x\n", size,
                                round, i, buf[i]);
                        failed = 1;
                        break;
                    }
                    buf[i] = (unsigned char)~buf[i];
                }
                MPI_Send(buf, (int)size, MPI_BYTE, 0, round, MPI_COMM_WORLD);
            }
        }
        if (size == max_size) {
            break;
        }
        if (size * 4 > max_size) {
            size = max_size / 4;
        }
    }

    {
        long local[4] = {rank + 1, 10 * (rank + 1), -rank, 1000}, sum[4];
        MPI_Allreduce(local, sum, 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if ((sum[0] != 3) || (sum[1] != 30) || (sum[2] != -1) || (sum[3] != 2000)) {
            fprintf(stderr, "rank %d: allreduce gave %ld %ld %ld %ld\n", rank, sum[0], sum[1],
                    sum[2], sum[3]);
            failed = 1;
        }
    }

    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if ((rank == 0) && !failed) {
        printf("mpi ok: ping-pong 1 B .. 4 MiB verified, allreduce verified\n");
    }
    free(buf);
    MPI_Finalize();
    return failed;
}
