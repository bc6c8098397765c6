/*
 * Did the algorithm the online mode drew really run? Allreduces of 1024 doubles with a user-defined
 * commutative sum that counts, per rank and per call, the elements it was applied to: at 2 ranks
 * recursive doubling reduces the whole buffer on both ranks (1024/1024), ring half of it on each
 * (512/512), a linear algorithm (Open MPI basic_linear) or MPICH's tree everything on rank 0 only
 * (1024/0). Prints one line per call and rank: "P <rank> <call> <elements>", and checks every sum.
 * `nonblocking`: MPI_Iallreduce, each call completed by MPI_Wait (issue 41; its algorithms' patterns at 2 ranks
 * are measured in tests/integration/test_online_nonblocking.py).
 *
 *   pattern_check CALLS [multiple|nonblocking]      (multiple: MPI_Init_thread(MPI_THREAD_MULTIPLE))
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int nonblocking = argc > 2 && strcmp(argv[2], "nonblocking") == 0;
    if (argc > 2 && strcmp(argv[2], "multiple") == 0) {
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
        if (nonblocking) {
            MPI_Request request;
            MPI_Iallreduce(in, out, 1024, MPI_DOUBLE, op, MPI_COMM_WORLD, &request);
            MPI_Wait(&request, MPI_STATUS_IGNORE);
        } else {
            MPI_Allreduce(in, out, 1024, MPI_DOUBLE, op, MPI_COMM_WORLD);
        }
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
