/* A hung MPI job, for the tests that stop tunempi while it runs one (tests/integration/test_stop_mpi.py):
 * after a barrier (every rank is in MPI), rank 0 creates the file named by argv[1] ("ready") and sleeps
 * forever; every other rank waits in MPI_Allreduce for it (MPICH and Open MPI poll there: 20-30 % CPU each). */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank = 0, in = 1, out = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        FILE *ready = fopen(argc > 1 ? argv[1] : "ready", "w");
        if (ready) fclose(ready);
        for (;;) sleep(1);
    }
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
