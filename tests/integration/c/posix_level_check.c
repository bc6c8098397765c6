/* Which allreduce algorithm runs, call after call, once given cvars are written through MPI_T.
 *
 * usage: posix_level_check [NAME=INT ...]   (int cvars written on every rank after MPI_Init)
 * Rank 0 prints one number per call: the longest vector the library handed to a user-defined sum.
 * Recursive doubling reduces the whole vector (COUNT), ring reduces halves at 2 ranks (COUNT/2), and
 * MPICH's shared-memory release_gather works in its own cell-sized pieces: a trace of the algorithm
 * that ran, with no timing. A builtin-op allreduce between the traced calls counts towards MPICH's
 * shared-memory threshold (MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD) the way an application's calls would.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 6144
#define CALLS 12

static int longest = 0;

static void traced_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    if (*len > longest)
        longest = *len;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((const int *)in)[i];
}

static void write_cvar(const char *assignment)
{
    char name[256];
    const char *eq = strchr(assignment, '=');
    if (!eq || (size_t)(eq - assignment) >= sizeof name) {
        fprintf(stderr, "bad NAME=INT: %s\n", assignment);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memcpy(name, assignment, (size_t)(eq - assignment));
    name[eq - assignment] = '\0';
    int value = atoi(eq + 1), index, count;
    MPI_T_cvar_handle handle;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) != MPI_SUCCESS ||
        MPI_T_cvar_write(handle, &value) != MPI_SUCCESS) {
        fprintf(stderr, "cannot write %s\n", name);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_T_cvar_handle_free(&handle);
}

int main(int argc, char **argv)
{
    int provided, rank;
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 1; i < argc; i++)
        write_cvar(argv[i]);
    MPI_Op traced;
    MPI_Op_create(traced_sum, 1, &traced);
    int *send = malloc(COUNT * sizeof(int)), *recv = malloc(COUNT * sizeof(int));
    for (int i = 0; i < COUNT; i++)
        send[i] = rank + i;
    for (int call = 0; call < CALLS; call++) {
        longest = 0;
        MPI_Allreduce(send, recv, COUNT, MPI_INT, traced, MPI_COMM_WORLD);
        for (int i = 0; i < COUNT; i++)
            if (recv[i] != 2 * i + 1) {
                fprintf(stderr, "wrong result at %d\n", i);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        MPI_Allreduce(send, recv, COUNT, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int most;
        MPI_Reduce(&longest, &most, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%d%c", most, call + 1 < CALLS ? ' ' : '\n');
    }
    MPI_Op_free(&traced);
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
