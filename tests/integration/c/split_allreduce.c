/* Which allreduce algorithm the library picks on MPI_COMM_WORLD and on sub-communicators of it.
 *
 * usage: split_allreduce BYTES SUBSIZE
 * World ranks below SUBSIZE form one sub-communicator (MPI_Comm_split, color 0), the others a second one
 * (color 1). On each communicator, allreduce runs CALLS times with a user-defined commutative sum on
 * BYTES / 4 ints (builtin-op calls in between count towards MPICH's shared-memory threshold as an
 * application's would); the longest vector the library handed to the sum in the LAST call is the trace of
 * the algorithm that ran (recursive doubling: the whole vector, ring: 1/size of it, MPICH's shared-memory
 * release_gather: its cells), with no timing. Every result is checked; a wrong one aborts.
 * Built with -DNONBLOCKING, the traced calls are MPI_Iallreduce + MPI_Wait (Open MPI: coll/libnbc's algorithm).
 * World rank 0 prints, per communicator, the largest trace over its ranks:
 *   world size=N count=C max_len=L
 *   sub color=K size=N count=C max_len=L
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CALLS 8

static int longest = 0;

static void traced_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    if (*len > longest)
        longest = *len;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((const int *)in)[i];
}

/* The trace of the last of CALLS traced allreduce calls on `comm`. */
static int trace(MPI_Comm comm, int count, MPI_Op traced)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int *send = malloc(sizeof(int) * (size_t)count), *recv = malloc(sizeof(int) * (size_t)count);
    for (int i = 0; i < count; i++)
        send[i] = (rank + 1) * (i % 7 + 1);
    long factor = (long)size * (size + 1) / 2;
    for (int call = 0; call < CALLS; call++) {
        longest = 0;
#ifdef NONBLOCKING
        MPI_Request request;
        MPI_Iallreduce(send, recv, count, MPI_INT, traced, comm, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
#else
        MPI_Allreduce(send, recv, count, MPI_INT, traced, comm);
#endif
        for (int i = 0; i < count; i++)
            if (recv[i] != (int)((i % 7 + 1) * factor)) {
                fprintf(stderr, "split_allreduce: wrong result at element %d (size %d)\n", i, size);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        MPI_Allreduce(MPI_IN_PLACE, recv, count, MPI_INT, MPI_SUM, comm);
    }
    free(send);
    free(recv);
    return longest;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3 || atol(argv[1]) < 4 || atoi(argv[2]) < 1) {
        if (rank == 0)
            fprintf(stderr, "usage: split_allreduce BYTES SUBSIZE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int count = (int)(atol(argv[1]) / 4), subsize = atoi(argv[2]);
    MPI_Op traced;
    MPI_Op_create(traced_sum, 1, &traced);

    int world_len = trace(MPI_COMM_WORLD, count, traced), world_max;
    MPI_Reduce(&world_len, &world_max, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);

    int color = rank < subsize ? 0 : 1, sub_size;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &sub);
    MPI_Comm_size(sub, &sub_size);
    int mine[3] = {color, sub_size, trace(sub, count, traced)};
    int *all = rank == 0 ? malloc(sizeof(int) * 3 * (size_t)size) : NULL;
    MPI_Gather(mine, 3, MPI_INT, all, 3, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("world size=%d count=%d max_len=%d\n", size, count, world_max);
        for (int k = 0; k < 2; k++) {
            int members = 0, most = 0;
            for (int r = 0; r < size; r++)
                if (all[3 * r] == k) {
                    members = all[3 * r + 1];
                    most = all[3 * r + 2] > most ? all[3 * r + 2] : most;
                }
            if (members)
                printf("sub color=%d size=%d count=%d max_len=%d\n", k, members, count, most);
        }
        free(all);
    }
    MPI_Comm_free(&sub);
    MPI_Op_free(&traced);
    MPI_Finalize();
    return 0;
}
