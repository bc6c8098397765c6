/*
 * A pipelined Krylov-style solver loop (issue 41): the overlap pattern of pipelined CG (Ghysels & Vanroose) and
 * of PETSc's KSPPIPECG: each iteration starts the reduction of its dot products (MPI_Iallreduce) together with
 * the halo exchange of a 1-D stencil (MPI_Isend/Irecv to both ring neighbours), computes the stencil's interior
 * while both are in flight, completes them with one MPI_Waitall, then the boundary points.
 * Every EVERY iterations it also re-broadcasts the solver's parameters (MPI_Ibcast, completed by polling
 * MPI_Test), and exchanges blocks of a transpose (MPI_Ialltoall, completed by MPI_Wait) and gathers every rank's
 * norm (MPI_Iallgather, completed by MPI_Testall polling).
 *
 * Every collective's result is checked exactly (integer-valued doubles and ints, whatever algorithm the library
 * runs); a wrong one exits 1. Rank 0 prints `checksum: N stencil: X`, which no algorithm choice may change.
 *
 * usage: nbc_solver ITERS NDOTS BLOCK [EVERY]  (NDOTS doubles reduced per iteration, BLOCK ints per peer in
 * the alltoall and allgather; EVERY default 4). The stencil has 4096 points per rank.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define POINTS 4096

static void fail(const char *what, int it, int rank)
{
    fprintf(stderr, "nbc_solver: rank %d iteration %d: wrong %s\n", rank, it, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 4) {
        fprintf(stderr, "usage: nbc_solver ITERS NDOTS BLOCK [EVERY]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), ndots = atoi(argv[2]), block = atoi(argv[3]);
    int every = argc > 4 ? atoi(argv[4]) : 4;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;

    double *x = malloc((POINTS + 2) * sizeof *x), *y = malloc((POINTS + 2) * sizeof *y);
    double *dots = malloc((size_t)ndots * sizeof *dots), *sums = malloc((size_t)ndots * sizeof *sums);
    double *params = malloc((size_t)ndots * sizeof *params);
    int *send = malloc((size_t)block * size * sizeof *send), *recv = malloc((size_t)block * size * sizeof *recv);
    int *mine = malloc((size_t)block * sizeof *mine), *all = malloc((size_t)block * size * sizeof *all);
    if (!x || !y || !dots || !sums || !params || !send || !recv || !mine || !all)
        MPI_Abort(MPI_COMM_WORLD, 3);
    for (int i = 0; i <= POINTS + 1; i++)
        x[i] = (double)((rank * POINTS + i) % 17);
    long long checksum = 0;

    for (int it = 0; it < iters; it++) {
        /* start the dot products' reduction and the halo exchange; compute the interior meanwhile */
        for (int j = 0; j < ndots; j++)
            dots[j] = (double)((rank + 1) * (j + 1) + it);
        MPI_Request req[5];
        MPI_Iallreduce(dots, sums, ndots, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req[0]);
        MPI_Irecv(&x[0], 1, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &req[1]);
        MPI_Irecv(&x[POINTS + 1], 1, MPI_DOUBLE, right, 2, MPI_COMM_WORLD, &req[2]);
        MPI_Isend(&x[1], 1, MPI_DOUBLE, left, 2, MPI_COMM_WORLD, &req[3]);
        MPI_Isend(&x[POINTS], 1, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &req[4]);
        for (int i = 2; i < POINTS; i++)
            y[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0;
        MPI_Waitall(5, req, MPI_STATUSES_IGNORE);
        y[1] = (x[0] + x[1] + x[2]) / 3.0;
        y[POINTS] = (x[POINTS - 1] + x[POINTS] + x[POINTS + 1]) / 3.0;
        for (int i = 1; i <= POINTS; i++)
            x[i] = y[i];
        for (int j = 0; j < ndots; j++) {
            double want = (double)(j + 1) * size * (size + 1) / 2 + (double)size * it;
            if (sums[j] != want)
                fail("iallreduce", it, rank);
        }
        checksum += (long long)sums[0];

        if (it % every != every - 1)
            continue;
        /* the parameters from rank 0, polled with MPI_Test while computing */
        for (int j = 0; j < ndots; j++)
            params[j] = rank == 0 ? (double)(it + j) : -1.0;
        MPI_Request bcast;
        MPI_Ibcast(params, ndots, MPI_DOUBLE, 0, MPI_COMM_WORLD, &bcast);
        int done = 0;
        while (!done) {
            for (int i = 1; i <= POINTS; i += 64)
                y[i] = x[i] * 0.5;
            MPI_Test(&bcast, &done, MPI_STATUS_IGNORE);
        }
        for (int j = 0; j < ndots; j++)
            if (params[j] != (double)(it + j))
                fail("ibcast", it, rank);
        /* a transpose's blocks, and every rank's block gathered; completed by MPI_Wait and MPI_Testall */
        for (int p = 0; p < size; p++)
            for (int k = 0; k < block; k++)
                send[p * block + k] = rank * 1000000 + p * 1000 + k % 1000;
        for (int k = 0; k < block; k++)
            mine[k] = rank * 7 + k + it;
        MPI_Request two[2];
        MPI_Ialltoall(send, block, MPI_INT, recv, block, MPI_INT, MPI_COMM_WORLD, &two[0]);
        MPI_Iallgather(mine, block, MPI_INT, all, block, MPI_INT, MPI_COMM_WORLD, &two[1]);
        MPI_Wait(&two[0], MPI_STATUS_IGNORE);
        done = 0;
        while (!done)
            MPI_Testall(1, &two[1], &done, MPI_STATUSES_IGNORE);
        for (int p = 0; p < size; p++)
            for (int k = 0; k < block; k++) {
                if (recv[p * block + k] != p * 1000000 + rank * 1000 + k % 1000)
                    fail("ialltoall", it, rank);
                if (all[p * block + k] != p * 7 + k + it)
                    fail("iallgather", it, rank);
            }
        checksum += recv[0] + all[block * size - 1];
    }
    double local = 0.0, stencil = 0.0;
    for (int i = 1; i <= POINTS; i++)
        local += x[i];
    MPI_Reduce(&local, &stencil, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("checksum: %lld stencil: %.6f\n", checksum, stencil);
    free(x), free(y), free(dots), free(sums), free(params), free(send), free(recv), free(mine), free(all);
    MPI_Finalize();
    return 0;
}
