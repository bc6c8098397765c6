/*
 * Does a forced algorithm that cannot take the arguments fail loudly? With MPI_ERRORS_RETURN on
 * MPI_COMM_WORLD, write STRICT_CVAR=STRICT_VALUE and ALGORITHM_CVAR=ALGORITHM_VALUE through MPI_T after
 * MPI_Init, then allreduce (MPI_SUM on doubles) COUNT... elements; print one JSON line per call and rank:
 * {"rank", "count", "rc", "ok"} (ok: the result is right when rc is MPI_SUCCESS).
 *
 * usage: fallback_check STRICT_CVAR STRICT_VALUE ALGORITHM_CVAR ALGORITHM_VALUE COUNT...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int write_cvar(const char *name, int value)
{
    int index, count, rc;
    MPI_T_cvar_handle handle;
    if ((rc = MPI_T_cvar_get_index(name, &index)) != MPI_SUCCESS) return rc;
    if ((rc = MPI_T_cvar_handle_alloc(index, NULL, &handle, &count)) != MPI_SUCCESS) return rc;
    rc = MPI_T_cvar_write(handle, &value);
    MPI_T_cvar_handle_free(&handle);
    return rc;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init(&argc, &argv);
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 6) {
        if (rank == 0) fprintf(stderr, "usage: %s STRICT_CVAR V ALGORITHM_CVAR V COUNT...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (write_cvar(argv[1], atoi(argv[2])) != MPI_SUCCESS || write_cvar(argv[3], atoi(argv[4])) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 3);
    for (int a = 5; a < argc; ++a) {
        int count = atoi(argv[a]), ok = 1;
        double *send = malloc(sizeof(double) * (size_t)count), *recv = malloc(sizeof(double) * (size_t)count);
        for (int i = 0; i < count; ++i) {
            send[i] = rank + i;
            recv[i] = -1;
        }
        int rc = MPI_Allreduce(send, recv, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; rc == MPI_SUCCESS && i < count; ++i)
            if (recv[i] != (double)size * (size - 1) / 2 + (double)size * i) ok = 0;
        printf("{\"rank\":%d,\"count\":%d,\"rc\":%d,\"ok\":%s}\n", rank, count, rc, ok ? "true" : "false");
        fflush(stdout);
        free(send);
        free(recv);
    }
    MPI_Finalize();
    return 0;
}
