/*
 * An error the library returns on one rank only (issue 38): Debian's MPICH 4.0.2 returns "Message truncated"
 * to rank 0 of an MPI_Scatter of 33 elements of a struct-based derived type from the last rank (legal MPI; the
 * library's own failure, without tunempi), while the root and the other ranks return MPI_SUCCESS. Errors are
 * returned, counted and the program goes on; every rank then takes part in an allreduce. Rank 0 prints
 * "errors <errors on rank 0> done <ranks>" when every rank got through.
 *
 *   rank_local_error CALLS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* issue 25's struct layout: an hindexed of 16 blocks of 2 struct {int at 0, double at 8}, gaps growing */
static MPI_Datatype struct_type(void)
{
    int one[2] = {1, 1}, blocks[16];
    MPI_Aint at[2] = {0, 8}, displs[16], lb, extent;
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, st, h;
    MPI_Type_create_struct(2, one, at, types, &st);
    MPI_Type_get_extent(st, &lb, &extent);
    for (int i = 0; i < 16; i++) {
        blocks[i] = 2;
        displs[i] = i * 2 * extent + (MPI_Aint)(i * (i + 1) / 2) * 4;
    }
    MPI_Type_create_hindexed(16, blocks, displs, st, &h);
    MPI_Type_commit(&h);
    MPI_Type_free(&st);
    return h;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 4, rank, size, n = 33;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Datatype t = struct_type();
    MPI_Aint lb, extent;
    MPI_Type_get_extent(t, &lb, &extent);
    char *send = calloc((size_t)(extent * n * size), 1), *recv = calloc((size_t)(extent * n), 1);
    int errors = 0;
    for (int c = 0; c < calls; c++)
        errors += MPI_Scatter(send, n, t, recv, n, t, size - 1, MPI_COMM_WORLD) != MPI_SUCCESS;
    int one = 1, ranks = 0;
    MPI_Allreduce(&one, &ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("errors %d done %d\n", errors, ranks);
    free(send);
    free(recv);
    MPI_Type_free(&t);
    MPI_Finalize();
    return 0;
}
