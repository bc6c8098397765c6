/*
 * MPI_Alltoallw with a datatype per peer (issue 40): a block of COUNT elements between every pair of ranks,
 * MPI_DOUBLE to itself and MPI_INT to every other rank, so each rank's mean block is
 * COUNT x (8 + 4 (n - 1)) / n bytes (2 ranks: 6 x COUNT). Per repetition: UNIFORM calls with equal counts and
 * one whose counts are the bench engine's sparse distribution (n x COUNT to the next rank only; engine.h).
 *
 * Every result is checked; a wrong one exits 1. Rank 0 prints `checksum: N` (over what it received).
 * usage: alltoallw_app REPS COUNT
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { UNIFORM = 3 };

static int rank, size;

static int value(int source, int dest, int i, int it) { return source * 1000003 + dest * 10007 + i * 7 + it; }

/* One alltoallw: `sparse` sends size x count elements to the next rank only. Returns the sum received. */
static long long exchange(int count, int sparse, int it)
{
    int *scounts = calloc((size_t)size, sizeof(int)), *rcounts = calloc((size_t)size, sizeof(int));
    int *sdispls = calloc((size_t)size, sizeof(int)), *rdispls = calloc((size_t)size, sizeof(int));
    MPI_Datatype *stypes = calloc((size_t)size, sizeof(MPI_Datatype));
    MPI_Datatype *rtypes = calloc((size_t)size, sizeof(MPI_Datatype));
    int stotal = 0, rtotal = 0; /* bytes */
    for (int p = 0; p < size; p++) {
        stypes[p] = p == rank ? MPI_DOUBLE : MPI_INT;
        rtypes[p] = stypes[p];
        const int elem = p == rank ? 8 : 4;
        scounts[p] = sparse ? (p == (rank + 1) % size ? count * size : 0) : count;
        rcounts[p] = sparse ? (rank == (p + 1) % size ? count * size : 0) : count;
        sdispls[p] = stotal;
        rdispls[p] = rtotal;
        stotal += scounts[p] * elem;
        rtotal += rcounts[p] * elem;
    }
    char *send = malloc((size_t)stotal + 8), *recv = malloc((size_t)rtotal + 8);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < scounts[p]; i++) {
            if (p == rank)
                ((double *)(send + sdispls[p]))[i] = (double)value(rank, p, i, it);
            else
                ((int *)(send + sdispls[p]))[i] = value(rank, p, i, it);
        }
    MPI_Alltoallw(send, scounts, sdispls, stypes, recv, rcounts, rdispls, rtypes, MPI_COMM_WORLD);
    long long sum = 0;
    for (int p = 0; p < size; p++)
        for (int i = 0; i < rcounts[p]; i++) {
            int got = p == rank ? (int)((double *)(recv + rdispls[p]))[i] : ((int *)(recv + rdispls[p]))[i];
            if (got != value(p, rank, i, it)) {
                fprintf(stderr, "alltoallw_app: rank %d repetition %d: wrong block from %d\n", rank, it, p);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            sum += got;
        }
    free(send), free(recv), free(scounts), free(rcounts), free(sdispls), free(rdispls), free(stypes), free(rtypes);
    return sum;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int reps = argc > 1 ? atoi(argv[1]) : 10, count = argc > 2 ? atoi(argv[2]) : 16;
    long long checksum = 0;
    for (int it = 0; it < reps; it++) {
        for (int k = 0; k < UNIFORM; k++)
            checksum += exchange(count, 0, it);
        checksum += exchange(count, 1, it);
    }
    if (rank == 0)
        printf("checksum: %lld\n", checksum);
    MPI_Finalize();
    return 0;
}
