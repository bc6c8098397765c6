/*
 * Vector collectives whose counts differ between ranks as the bench engine's distributions make them
 * (src/tunempi/bench/c/engine.h, tm_distribution; `bytes` there is the mean block, BLOCK ints here):
 *   skewed:  rank r's blocks are 2 (r + 1) / (n + 1) x BLOCK;
 *   sparse:  alltoallv sends n x BLOCK to the next rank only; allgatherv and gatherv take blocks of
 *            n / ceil(n / 2) x BLOCK from the even ranks only.
 * Per repetition: alltoallv 1 uniform, 1 skewed, 3 sparse, and 1 uniform in place (its send counts are not
 * significant: only the receive counts are classified); allgatherv 1 uniform,
 * 3 skewed, 1 sparse; gatherv 2 sparse to root n - 1. So the profile's dominant shapes are alltoallv sparse,
 * allgatherv skewed, gatherv sparse (counted at its root only).
 *
 * Every result is checked; a wrong one exits 1. Rank 0 prints `checksum: N` (over what it received).
 * usage: vector_shapes REPS BLOCK
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UNIFORM, SKEWED, SPARSE };

static int rank, size;

static int block_of(int shape, int block, int source, int dest)
{
    switch (shape) {
    case SKEWED:
        return block * 2 * (source + 1) / (size + 1);
    case SPARSE:
        if (dest < 0)
            return source % 2 == 0 ? block * size / ((size + 1) / 2) : 0;
        return dest == (source + 1) % size ? block * size : 0;
    default:
        return block;
    }
}

static int value(int source, int dest, int i, int it) { return source * 1000003 + dest * 10007 + i * 7 + it; }

static void fail(const char *what, int it)
{
    fprintf(stderr, "vector_shapes: rank %d repetition %d: wrong %s\n", rank, it, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static long long alltoallv(int shape, int block, int it, int in_place)
{
    int *scounts = calloc((size_t)size, sizeof(int)), *sdispls = calloc((size_t)size, sizeof(int));
    int *rcounts = calloc((size_t)size, sizeof(int)), *rdispls = calloc((size_t)size, sizeof(int));
    int stotal = 0, rtotal = 0;
    for (int p = 0; p < size; p++) {
        scounts[p] = block_of(shape, block, rank, p);
        rcounts[p] = block_of(shape, block, p, rank);
        if (in_place) /* MPI_IN_PLACE: every block both ways must have the same size */
            scounts[p] = rcounts[p] = block;
        sdispls[p] = stotal;
        rdispls[p] = rtotal;
        stotal += scounts[p];
        rtotal += rcounts[p];
    }
    int *send = malloc((size_t)stotal * sizeof(int) + 1), *recv = malloc((size_t)rtotal * sizeof(int) + 1);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < scounts[p]; i++)
            send[sdispls[p] + i] = value(rank, p, i, it);
    if (in_place) {
        for (int p = 0; p < size; p++) /* the block for rank p sits where p's block will arrive */
            for (int i = 0; i < rcounts[p]; i++)
                recv[rdispls[p] + i] = value(rank, p, i, it);
        MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_INT, recv, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);
    } else {
        MPI_Alltoallv(send, scounts, sdispls, MPI_INT, recv, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);
    }
    long long sum = 0;
    for (int p = 0; p < size; p++)
        for (int i = 0; i < rcounts[p]; i++) {
            if (recv[rdispls[p] + i] != value(p, rank, i, it))
                fail("alltoallv block", it);
            sum += recv[rdispls[p] + i] % 101;
        }
    free(send);
    free(recv);
    free(scounts);
    free(sdispls);
    free(rcounts);
    free(rdispls);
    return sum;
}

/* allgatherv (root < 0) or gatherv to `root` */
static long long gather(int shape, int block, int it, int root)
{
    int *counts = calloc((size_t)size, sizeof(int)), *displs = calloc((size_t)size, sizeof(int));
    int total = 0;
    for (int p = 0; p < size; p++) {
        counts[p] = block_of(shape, block, p, -1);
        displs[p] = total;
        total += counts[p];
    }
    int mine = counts[rank];
    int *send = malloc((size_t)mine * sizeof(int) + 1), *recv = malloc((size_t)total * sizeof(int) + 1);
    for (int i = 0; i < mine; i++)
        send[i] = value(rank, 0, i, it);
    long long sum = 0;
    if (root < 0)
        MPI_Allgatherv(send, mine, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
    else if (rank == root)
        MPI_Gatherv(send, mine, MPI_INT, recv, counts, displs, MPI_INT, root, MPI_COMM_WORLD);
    else /* off the root, the receive arguments are not significant */
        MPI_Gatherv(send, mine, MPI_INT, NULL, NULL, NULL, MPI_INT, root, MPI_COMM_WORLD);
    if (root < 0 || rank == root)
        for (int p = 0; p < size; p++)
            for (int i = 0; i < counts[p]; i++) {
                if (recv[displs[p] + i] != value(p, 0, i, it))
                    fail(root < 0 ? "allgatherv block" : "gatherv block", it);
                sum += recv[displs[p] + i] % 101;
            }
    free(send);
    free(recv);
    free(counts);
    free(displs);
    return sum;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 3) {
        fprintf(stderr, "usage: vector_shapes REPS BLOCK\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int reps = atoi(argv[1]), block = atoi(argv[2]);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long long sum = 0;
    for (int it = 0; it < reps; it++) {
        sum += alltoallv(UNIFORM, block, it, 0);
        sum += alltoallv(SKEWED, block, it, 0);
        for (int k = 0; k < 3; k++)
            sum += alltoallv(SPARSE, block, it, 0);
        sum += alltoallv(UNIFORM, block, it, 1);
        sum += gather(UNIFORM, block, it, -1);
        for (int k = 0; k < 3; k++)
            sum += gather(SKEWED, block, it, -1);
        sum += gather(SPARSE, block, it, -1);
        for (int k = 0; k < 2; k++)
            sum += gather(SPARSE, block, it, size - 1);
    }
    if (rank == 0) /* no collective but the vector ones: tune --from-profile takes only them */
        printf("checksum: %lld\n", sum);
    MPI_Finalize();
    return 0;
}
