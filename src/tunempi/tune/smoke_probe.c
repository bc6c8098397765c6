/* tunempi smoke probe: runs collectives at given sizes with whatever tuning file the environment
 * activates, checks every result, and reports one observable of the algorithm that ran.
 *
 * usage: smoke_probe COLL:BYTES [COLL:BYTES ...]   (COLL: allreduce bcast reduce allgather alltoall)
 * BYTES follow OSU: per-rank buffer (allreduce, bcast, reduce), per-destination block (allgather,
 * alltoall). Reductions use MPI_INT (BYTES rounded down to whole ints), the others MPI_BYTE.
 *
 * Rank 0 prints one line per point:
 *   ok COLL BYTES [user_op_max_len=N count=C]
 * For allreduce it also runs a user-defined commutative sum and records the longest vector the library
 * handed to it: an algorithm that reduces the whole vector at once (recursive doubling) shows N == C, one
 * that reduces it in pieces (ring, reduce-scatter based) shows N < C. That is a deterministic trace of
 * which algorithm the selection picked, with no timing involved.
 * A wrong result aborts the job (MPI_Abort) with a message on stderr.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int user_op_max_len = 0;

static void traced_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    if (*len > user_op_max_len)
        user_op_max_len = *len;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((const int *)in)[i];
}

static void fail(const char *what, const char *coll, long bytes, long index)
{
    fprintf(stderr, "smoke_probe: wrong %s result for %s at %ld bytes (element %ld)\n", what, coll, bytes, index);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static int value_at(int rank, long i) { return (rank + 1) * (int)(i % 7 + 1); }

static void run_allreduce(long bytes, int rank, int size, MPI_Op traced)
{
    int count = (int)(bytes / (long)sizeof(int));
    int *send = malloc(sizeof(int) * (size_t)(count + 1)), *recv = malloc(sizeof(int) * (size_t)(count + 1));
    for (long i = 0; i < count; i++)
        send[i] = value_at(rank, i);
    long factor = (long)size * (size + 1) / 2;
    for (int repeat = 0; repeat < 2; repeat++) {
        MPI_Allreduce(send, recv, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (long i = 0; i < count; i++)
            if (recv[i] != (int)((i % 7 + 1) * factor))
                fail("MPI_SUM", "allreduce", bytes, i);
    }
    user_op_max_len = 0;
    MPI_Allreduce(send, recv, count, MPI_INT, traced, MPI_COMM_WORLD);
    for (long i = 0; i < count; i++)
        if (recv[i] != (int)((i % 7 + 1) * factor))
            fail("user-op", "allreduce", bytes, i);
    if (rank == 0)
        printf("ok allreduce %ld user_op_max_len=%d count=%d\n", bytes, user_op_max_len, count);
    free(send);
    free(recv);
}

static void run_reduce(long bytes, int rank, int size)
{
    int count = (int)(bytes / (long)sizeof(int));
    int *send = malloc(sizeof(int) * (size_t)(count + 1)), *recv = malloc(sizeof(int) * (size_t)(count + 1));
    for (long i = 0; i < count; i++)
        send[i] = value_at(rank, i);
    long factor = (long)size * (size + 1) / 2;
    for (int repeat = 0; repeat < 2; repeat++) {
        MPI_Reduce(send, recv, count, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            for (long i = 0; i < count; i++)
                if (recv[i] != (int)((i % 7 + 1) * factor))
                    fail("MPI_SUM", "reduce", bytes, i);
    }
    if (rank == 0)
        printf("ok reduce %ld\n", bytes);
    free(send);
    free(recv);
}

static void run_bcast(long bytes, int rank)
{
    unsigned char *buf = malloc((size_t)bytes + 1);
    for (int repeat = 0; repeat < 2; repeat++) {
        for (long i = 0; i < bytes; i++)
            buf[i] = rank == 0 ? (unsigned char)(i * 13 + repeat) : 0;
        MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        for (long i = 0; i < bytes; i++)
            if (buf[i] != (unsigned char)(i * 13 + repeat))
                fail("", "bcast", bytes, i);
    }
    if (rank == 0)
        printf("ok bcast %ld\n", bytes);
    free(buf);
}

static void run_allgather(long bytes, int rank, int size)
{
    unsigned char *send = malloc((size_t)bytes + 1), *recv = malloc((size_t)bytes * (size_t)size + 1);
    for (long i = 0; i < bytes; i++)
        send[i] = (unsigned char)(rank * 31 + i);
    for (int repeat = 0; repeat < 2; repeat++) {
        MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            for (long i = 0; i < bytes; i++)
                if (recv[(long)r * bytes + i] != (unsigned char)(r * 31 + i))
                    fail("", "allgather", bytes, (long)r * bytes + i);
    }
    if (rank == 0)
        printf("ok allgather %ld\n", bytes);
    free(send);
    free(recv);
}

static void run_alltoall(long bytes, int rank, int size)
{
    unsigned char *send = malloc((size_t)bytes * (size_t)size + 1), *recv = malloc((size_t)bytes * (size_t)size + 1);
    for (int d = 0; d < size; d++)
        for (long i = 0; i < bytes; i++)
            send[(long)d * bytes + i] = (unsigned char)(rank * 31 + d * 7 + i);
    for (int repeat = 0; repeat < 2; repeat++) {
        MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        for (int s = 0; s < size; s++)
            for (long i = 0; i < bytes; i++)
                if (recv[(long)s * bytes + i] != (unsigned char)(s * 31 + rank * 7 + i))
                    fail("", "alltoall", bytes, (long)s * bytes + i);
    }
    if (rank == 0)
        printf("ok alltoall %ld\n", bytes);
    free(send);
    free(recv);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Op traced;
    MPI_Op_create(traced_sum, 1, &traced);
    for (int a = 1; a < argc; a++) {
        char coll[64];
        long bytes;
        if (sscanf(argv[a], "%63[a-z_]:%ld", coll, &bytes) != 2 || bytes < 0) {
            if (rank == 0)
                fprintf(stderr, "smoke_probe: bad point %s (want COLL:BYTES)\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (!strcmp(coll, "allreduce"))
            run_allreduce(bytes, rank, size, traced);
        else if (!strcmp(coll, "reduce"))
            run_reduce(bytes, rank, size);
        else if (!strcmp(coll, "bcast"))
            run_bcast(bytes, rank);
        else if (!strcmp(coll, "allgather"))
            run_allgather(bytes, rank, size);
        else if (!strcmp(coll, "alltoall"))
            run_alltoall(bytes, rank, size);
        else {
            if (rank == 0)
                fprintf(stderr, "smoke_probe: unsupported collective %s\n", coll);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        fflush(stdout);
    }
    MPI_Op_free(&traced);
    MPI_Finalize();
    return 0;
}
