/*
 * pattern_check.c for the non-blocking allreduce (issue 41): did the MPI_Iallreduce algorithm the online mode
 * drew really run? Iallreduces of 1024 doubles, each completed by MPI_Wait, with a user-defined commutative sum
 * that counts, per rank and per call, the elements it was applied to (the patterns of the algorithms at 2
 * ranks are measured, tests/integration/test_online_nonblocking.py). Prints "P <rank> <call> <elements>" per
 * call and rank, and checks every sum.
 *
 *   nb_pattern_check CALLS [multiple]      (multiple: MPI_Init_thread(MPI_THREAD_MULTIPLE))
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static long op_elements;

static void counting_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const double *a = in;
    double *b = inout;
    for (int i = 0; i < *len; ++i)
        b[i] += a[i];
    op_elements += *len;
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    int calls = argc > 1 ? atoi(argv[1]) : 20, rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Op op;
    MPI_Op_create(counting_sum, 1, &op);
    double in[1024], out[1024];
    for (int c = 0; c < calls; c++) {
        for (int i = 0; i < 1024; i++)
            in[i] = rank + i + c;
        op_elements = 0;
        MPI_Request request;
        MPI_Iallreduce(in, out, 1024, MPI_DOUBLE, op, MPI_COMM_WORLD, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
        for (int i = 0; i < 1024; i++)
            if (out[i] != (double)size * (size - 1) / 2 + (double)size * (i + c)) {
                fprintf(stderr, "FAIL rank %d call %d element %d\n", rank, c, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        printf("P %d %d %ld\n", rank, c, op_elements);
    }
    MPI_Op_free(&op);
    MPI_Finalize();
    return 0;
}
