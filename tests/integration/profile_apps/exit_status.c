/* Reaches MPI_Finalize after a few allreduces, then exits with the status given as argv[1]. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int value = 1, sum = 0;
    for (int i = 0; i < 4; i++)
        MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return argc > 1 ? atoi(argv[1]) : 0;
}
