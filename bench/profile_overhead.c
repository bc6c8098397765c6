/*
 * 8-byte MPI_Allreduce loop for bench/profile_overhead.py (or, with `alltoallv`, MPI_Alltoallv of one int per
 * peer: a vector collective, whose counts the profile mode classifies). Runs `blocks` blocks of `iters` calls
 * and alternates, block by block, the application path (MPI_X: through the interposer when it is
 * preloaded) and the direct path (PMPI_X: never intercepted). Rank 0 prints one line per block:
 *   mpi <ns per call>   or   pmpi <ns per call>
 * usage: profile_overhead [ITERS [BLOCKS [allreduce|alltoallv]]]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    int blocks = argc > 2 ? atoi(argv[2]) : 10;
    int vector = argc > 3 && strcmp(argv[3], "alltoallv") == 0;
    double x = 1.0, y = 0.0;
    int *counts = malloc((size_t)size * sizeof(int)), *displs = malloc((size_t)size * sizeof(int));
    int *send = malloc((size_t)size * sizeof(int)), *recv = malloc((size_t)size * sizeof(int));
    for (int p = 0; p < size; p++) {
        counts[p] = 1;
        displs[p] = p;
        send[p] = rank;
    }
    for (long i = 0; i < iters / 4; i++) /* warm-up */
        if (vector)
            PMPI_Alltoallv(send, counts, displs, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
        else
            PMPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int b = 0; b < 2 * blocks; b++) {
        int direct = (b % 4 == 1 || b % 4 == 2); /* ABBA order: no position bias */
        PMPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (direct && vector)
            for (long i = 0; i < iters; i++)
                PMPI_Alltoallv(send, counts, displs, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
        else if (vector)
            for (long i = 0; i < iters; i++)
                MPI_Alltoallv(send, counts, displs, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD);
        else if (direct)
            for (long i = 0; i < iters; i++)
                PMPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else
            for (long i = 0; i < iters; i++)
                MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        if (rank == 0)
            printf("%s %.2f\n", direct ? "pmpi" : "mpi", t / (double)iters * 1e9);
    }
    free(counts);
    free(displs);
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
