/* 3 barriers and one 8-byte sendrecv of its own (see fake_internal.c for the library's inner calls). */
#include <mpi.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 0; i < 3; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double out = rank, in = 0;
    MPI_Sendrecv(&out, 1, MPI_DOUBLE, (rank + 1) % size, 1, &in, 1, MPI_DOUBLE, (rank + size - 1) % size, 1,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
