/*
 * Which ranks refuse a forced collective algorithm (issue 38, docs/online.md 2d). One call of CASE with
 * MPI_ERRORS_RETURN on MPI_COMM_WORLD, after writing the control variables of PROBE_CVARS (NAME=INT,...)
 * through MPI_T, as the online mode does (written through the environment, a forced algorithm also runs
 * inside MPI_Init's own collectives). Each rank prints "rank R rc RC ERROR-STRING". Driven by
 * mpich_refusal_probe.sh.
 *
 *   mpich_refusal_probe CASE [inplace]
 *
 * CASE: allgather, allgatherv, alltoall, allreduce (64 ints, MPI_SUM), allreduce1 (1 int), allreducenc
 * (64 ints, a non-commutative user op), reduce, reduce1, bcast, barrier, rsb, rsbnc (reduce_scatter_block),
 * rs (reduce_scatter). inplace: MPI_IN_PLACE (reduce: at the root only).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void noncommutative(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] = ((int *)in)[i] + 2 * ((int *)inout)[i];
}

static void write_cvars(void)
{
    int provided;
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    char *spec = strdup(getenv("PROBE_CVARS") ? getenv("PROBE_CVARS") : "");
    for (char *tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        int index, count, value = atoi(eq + 1);
        MPI_T_cvar_handle handle;
        if (MPI_T_cvar_get_index(tok, &index) != MPI_SUCCESS ||
            MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) != MPI_SUCCESS ||
            MPI_T_cvar_write(handle, &value) != MPI_SUCCESS) {
            printf("cannot write %s\n", tok);
            continue;
        }
        MPI_T_cvar_handle_free(&handle);
    }
    free(spec);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, n = 64, rc = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    write_cvars();
    const char *c = argc > 1 ? argv[1] : "";
    int inplace = argc > 2 && !strcmp(argv[2], "inplace");
    int *s = calloc((size_t)(n * size), sizeof(int)), *r = calloc((size_t)(n * size), sizeof(int));
    int cnt[256], dsp[256];
    for (int i = 0; i < n * size; i++)
        s[i] = r[i] = rank + i;
    for (int i = 0; i < size && i < 256; i++) {
        cnt[i] = n;
        dsp[i] = i * n;
    }
    MPI_Op nc;
    MPI_Op_create(noncommutative, 0, &nc);
    void *sb = inplace ? MPI_IN_PLACE : s;
    void *root_sb = inplace && rank == 0 ? MPI_IN_PLACE : s;
    if (!strcmp(c, "allgather"))
        rc = MPI_Allgather(sb, n, MPI_INT, r, n, MPI_INT, MPI_COMM_WORLD);
    else if (!strcmp(c, "allgatherv"))
        rc = MPI_Allgatherv(sb, n, MPI_INT, r, cnt, dsp, MPI_INT, MPI_COMM_WORLD);
    else if (!strcmp(c, "alltoall"))
        rc = MPI_Alltoall(sb, n, MPI_INT, r, n, MPI_INT, MPI_COMM_WORLD);
    else if (!strcmp(c, "allreduce"))
        rc = MPI_Allreduce(sb, r, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(c, "allreduce1"))
        rc = MPI_Allreduce(sb, r, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(c, "allreducenc"))
        rc = MPI_Allreduce(sb, r, n, MPI_INT, nc, MPI_COMM_WORLD);
    else if (!strcmp(c, "reduce"))
        rc = MPI_Reduce(root_sb, r, n, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    else if (!strcmp(c, "reduce1"))
        rc = MPI_Reduce(root_sb, r, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    else if (!strcmp(c, "bcast"))
        rc = MPI_Bcast(s, n, MPI_INT, 0, MPI_COMM_WORLD);
    else if (!strcmp(c, "barrier"))
        rc = MPI_Barrier(MPI_COMM_WORLD);
    else if (!strcmp(c, "rsb"))
        rc = MPI_Reduce_scatter_block(sb, r, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(c, "rsbnc"))
        rc = MPI_Reduce_scatter_block(sb, r, n, MPI_INT, nc, MPI_COMM_WORLD);
    else if (!strcmp(c, "rs"))
        rc = MPI_Reduce_scatter(sb, r, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (rc != MPI_SUCCESS && rc != -1)
        MPI_Error_string(rc, text, &len);
    for (char *p = text; *p; p++)
        if (*p == '\n')
            *p = '|';
    printf("rank %d rc %d %s\n", rank, rc, text);
    fflush(stdout);
    MPI_Op_free(&nc);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
