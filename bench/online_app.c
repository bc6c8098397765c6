/*
 * An allreduce-heavy program for bench/online_loop.py: for each size given, `calls` MPI_Allreduce of
 * floats (sum, results checked; floats as the benchmark engine and OSU use: the reduction's cost depends
 * on the datatype, and the engine is the reference), back to back, timed between barriers. Rank 0 prints
 *   phase <bytes> <seconds>      per size
 *   total <seconds>
 *
 *   online_app CALLS BYTES...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int calls = argc > 1 ? atoi(argv[1]) : 200;
    double total = 0;
    for (int s = 2; s < argc; s++) {
        int count = atoi(argv[s]) / (int)sizeof(float);
        float *in = malloc(sizeof(float) * (size_t)count), *out = malloc(sizeof(float) * (size_t)count);
        for (int i = 0; i < count; i++)
            in[i] = (float)(rank + i % 7); /* small integers: every sum is exact in a float */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int c = 0; c < calls; c++) {
            MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (out[count - 1] != (float)(size * ((count - 1) % 7) + size * (size - 1) / 2)) {
                fprintf(stderr, "wrong result\n");
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0;
        total += t;
        if (rank == 0)
            printf("phase %d %.6f\n", count * (int)sizeof(float), t);
        free(in);
        free(out);
    }
    if (rank == 0)
        printf("total %.6f\n", total);
    MPI_Finalize();
    return 0;
}
