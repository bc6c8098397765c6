/*
 * 8-byte MPI_Allreduce loop for bench/profile_overhead.py. Runs `blocks` blocks of `iters` calls and
 * alternates, block by block, the application path (MPI_Allreduce: through the interposer when it is
 * preloaded) and the direct path (PMPI_Allreduce: never intercepted). Rank 0 prints one line per block:
 *   mpi <ns per call>   or   pmpi <ns per call>
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    int blocks = argc > 2 ? atoi(argv[2]) : 10;
    double x = 1.0, y = 0.0;
    for (long i = 0; i < iters / 4; i++) /* warm-up */
        PMPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int b = 0; b < 2 * blocks; b++) {
        int direct = (b % 4 == 1 || b % 4 == 2); /* ABBA order: no position bias */
        PMPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (direct)
            for (long i = 0; i < iters; i++)
                PMPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else
            for (long i = 0; i < iters; i++)
                MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        if (rank == 0)
            printf("%s %.2f\n", direct ? "pmpi" : "mpi", t / (double)iters * 1e9);
    }
    MPI_Finalize();
    return 0;
}
