/* MPI_Ibcast from the first and from the last rank, every value checked on every rank.
 *
 * usage: ibcast_roots COUNT
 * For root 0, then root size-1: COUNT ints broadcast with MPI_Ibcast + MPI_Wait on MPI_COMM_WORLD. A wrong value
 * aborts; world rank 0 prints "ibcast root=R size=N ok" per root. (MPICH 5.0.2's scatterv-based ibcasts crash
 * for a root other than 0 on more than four ranks: mpi/restrictions.py.)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, count = argc > 1 ? atoi(argv[1]) : 1031;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *buf = malloc(sizeof(int) * (size_t)count);
    int roots[2] = {0, size - 1};
    for (int r = 0; r < 2; r++) {
        int root = roots[r];
        for (int i = 0; i < count; i++)
            buf[i] = rank == root ? 7 * i + root : -1;
        MPI_Request request;
        MPI_Ibcast(buf, count, MPI_INT, root, MPI_COMM_WORLD, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
        for (int i = 0; i < count; i++)
            if (buf[i] != 7 * i + root) {
                fprintf(stderr, "rank %d: root %d value %d is %d, not %d\n", rank, root, i, buf[i], 7 * i + root);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            printf("ibcast root=%d size=%d ok\n", root, size);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
