/*
 * Ranks passing the same bytes as different counts (issue 38, MPICH's DTP bcast tests): calls alternate
 * between 512 MPI_INT on every rank and 512 MPI_INT at the root received elsewhere as ONE contiguous type
 * of 512 ints. Legal MPI; Open MPI's bcasts that split by element counts (split_binary_tree,
 * scatter_allgather(_ring)) leave the receivers' values wrong and hang the root on the second kind.
 * Checks every value; rank 0 prints "ok <calls>" when every rank's values were right.
 *
 *   count_mismatch CALLS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define N 512

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 8, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Datatype block;
    MPI_Type_contiguous(N, MPI_INT, &block);
    MPI_Type_commit(&block);
    int buf[N], bad = 0;
    for (int c = 0; c < calls; c++) {
        for (int i = 0; i < N; i++)
            buf[i] = rank == 0 ? c * N + i : -1;
        if (rank == 0 || c % 2 == 0)
            MPI_Bcast(buf, N, MPI_INT, 0, MPI_COMM_WORLD);
        else
            MPI_Bcast(buf, 1, block, 0, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            bad += buf[i] != c * N + i;
    }
    int total = 0;
    /* point-to-point, never a collective under test */
    if (rank == 0) {
        int size, other;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        total = bad;
        for (int r = 1; r < size; r++) {
            MPI_Recv(&other, 1, MPI_INT, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            total += other;
        }
        if (total == 0)
            printf("ok %d\n", calls);
        else
            printf("wrong values: %d\n", total);
    } else {
        MPI_Send(&bad, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
    }
    MPI_Type_free(&block);
    MPI_Finalize();
    return total != 0;
}
