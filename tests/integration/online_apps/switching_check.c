/*
 * Correctness under per-call random algorithm switching (online mode): allreduce, bcast, reduce,
 * allgather, alltoall, barrier, gather, scatter on MPI_COMM_WORLD, a duplicate and a split (all alive at
 * once, used interleaved), at several sizes. Every result is checked against the known answer; the
 * program prints "ok <checks>" or the first failure and exits 1.
 *
 *   switching_check ITERATIONS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long checks;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        checks++;                                                                                            \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "FAIL rank %d: ", world_rank);                                                   \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                    \
        }                                                                                                    \
    } while (0)

static int world_rank;

static void exercise(MPI_Comm comm, int count, int salt)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    long *a = malloc(sizeof(long) * (size_t)count * (size_t)size);
    long *b = malloc(sizeof(long) * (size_t)count * (size_t)size);

    /* allreduce: sum over ranks of (rank + i + salt) */
    for (int i = 0; i < count; i++)
        a[i] = rank + i + salt;
    MPI_Allreduce(a, b, count, MPI_LONG, MPI_SUM, comm);
    for (int i = 0; i < count; i++) {
        long want = (long)size * (size - 1) / 2 + (long)size * (i + salt);
        CHECK(b[i] == want, "allreduce count %d i %d: %ld != %ld", count, i, b[i], want);
    }
    /* allreduce in place, MAX */
    for (int i = 0; i < count; i++)
        b[i] = (long)rank * 1000 + i;
    MPI_Allreduce(MPI_IN_PLACE, b, count, MPI_LONG, MPI_MAX, comm);
    for (int i = 0; i < count; i++)
        CHECK(b[i] == (long)(size - 1) * 1000 + i, "allreduce max count %d i %d", count, i);

    /* bcast from the last rank */
    int root = size - 1;
    for (int i = 0; i < count; i++)
        a[i] = rank == root ? (long)i * 7 + salt : -1;
    MPI_Bcast(a, count, MPI_LONG, root, comm);
    for (int i = 0; i < count; i++)
        CHECK(a[i] == (long)i * 7 + salt, "bcast count %d i %d: %ld", count, i, a[i]);

    /* reduce to rank 0 */
    for (int i = 0; i < count; i++)
        a[i] = rank * 3 + i;
    memset(b, 0, sizeof(long) * (size_t)count);
    MPI_Reduce(a, b, count, MPI_LONG, MPI_SUM, 0, comm);
    if (rank == 0)
        for (int i = 0; i < count; i++)
            CHECK(b[i] == 3L * size * (size - 1) / 2 + (long)size * i, "reduce count %d i %d", count, i);

    /* allgather: block r holds r * 100000 + i */
    for (int i = 0; i < count; i++)
        a[i] = (long)rank * 100000 + i + salt;
    MPI_Allgather(a, count, MPI_LONG, b, count, MPI_LONG, comm);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < count; i++)
            CHECK(b[(size_t)r * count + i] == (long)r * 100000 + i + salt, "allgather count %d r %d i %d", count, r, i);

    /* alltoall: block d from rank s holds s * 1000 + d */
    for (int d = 0; d < size; d++)
        for (int i = 0; i < count; i++)
            a[(size_t)d * count + i] = (long)rank * 1000 + d + (long)i * 1000000;
    MPI_Alltoall(a, count, MPI_LONG, b, count, MPI_LONG, comm);
    for (int s = 0; s < size; s++)
        for (int i = 0; i < count; i++)
            CHECK(b[(size_t)s * count + i] == (long)s * 1000 + rank + (long)i * 1000000,
                  "alltoall count %d s %d i %d", count, s, i);

    /* gather to rank 0, scatter from rank 0 */
    for (int i = 0; i < count; i++)
        a[i] = (long)rank * 10 + i;
    MPI_Gather(a, count, MPI_LONG, b, count, MPI_LONG, 0, comm);
    if (rank == 0)
        for (int r = 0; r < size; r++)
            for (int i = 0; i < count; i++)
                CHECK(b[(size_t)r * count + i] == (long)r * 10 + i, "gather count %d r %d i %d", count, r, i);
    if (rank == 0)
        for (int r = 0; r < size; r++)
            for (int i = 0; i < count; i++)
                b[(size_t)r * count + i] = (long)r * 77 + i + salt;
    MPI_Scatter(b, count, MPI_LONG, a, count, MPI_LONG, 0, comm);
    for (int i = 0; i < count; i++)
        CHECK(a[i] == (long)rank * 77 + i + salt, "scatter count %d i %d", count, i);

    MPI_Barrier(comm);
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int iterations = argc > 1 ? atoi(argv[1]) : 10;
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dup, split;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &split); /* 2 ranks: singletons */
    const int counts[] = {1, 3, 64, 1000, 20000};
    for (int it = 0; it < iterations; it++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            exercise(MPI_COMM_WORLD, counts[k], it);
            exercise(dup, counts[k], it + 1);
            exercise(split, counts[k], it + 2);
        }
    /* A communicator created and freed mid-run (its shadows go with it), then another. */
    for (int round = 0; round < 3; round++) {
        MPI_Comm tmp;
        MPI_Comm_dup(dup, &tmp);
        exercise(tmp, 64, round);
        exercise(tmp, 1000, round);
        MPI_Comm_free(&tmp);
    }
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);
    if (world_rank == 0)
        printf("ok %ld\n", checks);
    MPI_Finalize();
    return 0;
}
