/*
 * A refusal on some ranks only (issue 38): MPI_Allreduce of ONE int with MPI_SUM. With MPICH 5.0.2 on more
 * than one node, the library runs an allreduce as a composition (a reduce on each node, an allreduce among the
 * nodes' first ranks, a bcast on each node): a forced algorithm is checked on the node roots' communicator
 * only, so with reduce_scatter_allgather forced and MPIR_CVAR_COLLECTIVE_FALLBACK=error the node roots refuse
 * (count 1 < 2 node roots) while the other ranks wait in the node bcast. Checks every sum; rank 0 prints
 * "ok <calls>" when every rank's sums were right.
 *
 *   node_refusal CALLS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int calls = argc > 1 ? atoi(argv[1]) : 4, rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int c = 0; c < calls; c++) {
        int mine = rank + c, sum = -1;
        MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        bad += sum != size * (size - 1) / 2 + size * c;
    }
    int total = 0;
    MPI_Reduce(&bad, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0)
            printf("ok %d\n", calls);
        else
            printf("wrong sums: %d\n", total);
    }
    MPI_Finalize();
    return total != 0;
}
