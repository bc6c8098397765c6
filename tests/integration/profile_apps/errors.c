/* Calls that fail with MPI_ERRORS_RETURN are not recorded: a bad send and a bad bcast, then a barrier. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size, value = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int send_rc = MPI_Send(&value, 1, MPI_INT, size + 5, 0, MPI_COMM_WORLD);
    int bcast_rc = MPI_Bcast(&value, 1, MPI_INT, size + 5, MPI_COMM_WORLD);
    if (send_rc == MPI_SUCCESS || bcast_rc == MPI_SUCCESS) {
        fprintf(stderr, "expected errors\n");
        MPI_Abort(MPI_COMM_WORLD, 5);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
