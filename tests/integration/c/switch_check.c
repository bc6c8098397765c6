/*
 * Which allreduce algorithm did the library run? A user-defined (commutative) sum counts, per rank,
 * how often the library applied it and to how many elements: the pattern identifies the algorithm
 * (at 2 ranks: recursive doubling reduces the whole buffer on both ranks, ring and Rabenseifner reduce
 * half of it on each rank, linear reduces everything on rank 0 only).
 *
 * usage: switch_check CVAR COUNT [PRE_CVAR=V]... -- V1 V2
 * Prints JSON lines {"rank", "phase", "calls", "elements", "ok"} for:
 *   world_start    MPI_COMM_WORLD, before any write
 *   world_write1   MPI_COMM_WORLD, after writing V1 to CVAR
 *   dup1_write1    a communicator duplicated after that write
 *   world_write2   MPI_COMM_WORLD, after writing V2
 *   dup1_write2    the communicator duplicated after the first write
 *   dup2_write2    a communicator duplicated after the second write
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long op_calls, op_elements;

static void counting_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const double *a = in;
    double *b = inout;
    for (int i = 0; i < *len; ++i)
        b[i] += a[i];
    op_calls += 1;
    op_elements += *len;
}

static int write_cvar(const char *name, int value)
{
    int index, count, rc;
    MPI_T_cvar_handle handle;
    rc = MPI_T_cvar_get_index(name, &index);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_T_cvar_handle_alloc(index, NULL, &handle, &count);
    if (rc != MPI_SUCCESS) return rc;
    char text[64], name_buf[256], desc[8];
    int name_len = sizeof name_buf, desc_len = 0, verbosity, bind, scope;
    MPI_Datatype datatype;
    MPI_T_enum enumtype;
    rc = MPI_T_cvar_get_info(index, name_buf, &name_len, &verbosity, &datatype, &enumtype, desc, &desc_len, &bind,
                             &scope);
    if (rc != MPI_SUCCESS) return rc;
    if (datatype == MPI_CHAR) { /* a string cvar (Intel MPI's presets): the value in decimal */
        snprintf(text, sizeof text, "%d", value);
        rc = MPI_T_cvar_write(handle, text);
    } else {
        rc = MPI_T_cvar_write(handle, &value);
    }
    MPI_T_cvar_handle_free(&handle);
    return rc;
}

static void measure(const char *phase, MPI_Comm comm, MPI_Op op, int count, double *send, double *recv)
{
    int rank, size, ok = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    op_calls = op_elements = 0;
    MPI_Allreduce(send, recv, count, MPI_DOUBLE, op, comm);
    for (int i = 0; i < count; ++i)
        if (recv[i] != (double)size * (size - 1) / 2 + (double)size * i)
            ok = 0;
    printf("{\"rank\":%d,\"phase\":\"%s\",\"calls\":%ld,\"elements\":%ld,\"ok\":%s}\n", rank, phase, op_calls,
           op_elements, ok ? "true" : "false");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int provided, rank, i = 3;
    MPI_Init(&argc, &argv);
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 6) {
        if (rank == 0) fprintf(stderr, "usage: %s CVAR COUNT [PRE_CVAR=V]... -- V1 V2\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *cvar = argv[1];
    int count = atoi(argv[2]);
    for (; i < argc && strcmp(argv[i], "--") != 0; ++i) {
        char name[256];
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq - argv[i] >= (long)sizeof name) MPI_Abort(MPI_COMM_WORLD, 2);
        memcpy(name, argv[i], (size_t)(eq - argv[i]));
        name[eq - argv[i]] = '\0';
        int rc = write_cvar(name, atoi(eq + 1));
        if (rank == 0) printf("{\"pre_write\":\"%s\",\"rc\":%d}\n", argv[i], rc);
    }
    if (i + 2 >= argc) MPI_Abort(MPI_COMM_WORLD, 2);
    int v1 = atoi(argv[i + 1]), v2 = atoi(argv[i + 2]);

    double *send = malloc(sizeof(double) * (size_t)count), *recv = malloc(sizeof(double) * (size_t)count);
    for (int k = 0; k < count; ++k)
        send[k] = rank + k;
    MPI_Op op;
    MPI_Op_create(counting_sum, 1, &op);
    MPI_Comm dup1, dup2;

    measure("world_start", MPI_COMM_WORLD, op, count, send, recv);
    int rc1 = write_cvar(cvar, v1);
    measure("world_write1", MPI_COMM_WORLD, op, count, send, recv);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup1);
    measure("dup1_write1", dup1, op, count, send, recv);
    int rc2 = write_cvar(cvar, v2);
    measure("world_write2", MPI_COMM_WORLD, op, count, send, recv);
    measure("dup1_write2", dup1, op, count, send, recv);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup2);
    measure("dup2_write2", dup2, op, count, send, recv);
    if (rank == 0) printf("{\"write_rc\":[%d,%d]}\n", rc1, rc2);

    MPI_Comm_free(&dup1);
    MPI_Comm_free(&dup2);
    MPI_Op_free(&op);
    free(send);
    free(recv);
    MPI_T_finalize();
    MPI_Finalize();
    return 0;
}
