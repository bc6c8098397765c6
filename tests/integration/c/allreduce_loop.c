/* 200 checked MPI_Allreduce calls of 4096 ints on MPI_COMM_WORLD; exit status 1 on a wrong result. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, n = 4096, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *in = malloc(n * sizeof(int)), *out = malloc(n * sizeof(int));
    for (int it = 0; it < 200; it++) {
        for (int i = 0; i < n; i++) in[i] = rank + i;
        MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; i++) if (out[i] != size * (size - 1) / 2 + size * i) bad++;
    }
    if (rank == 0) printf("bad=%d\n", bad);
    MPI_Finalize();
    return bad != 0;
}
