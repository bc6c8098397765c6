/* tunempi smoke probe: runs collectives at given sizes with whatever tuning file the environment
 * activates, checks every result, and reports one observable of the algorithm that ran.
 *
 * usage: smoke_probe COLL:BYTES [COLL:BYTES ...]   (COLL: allreduce bcast reduce allgather alltoall, and the
 *        non-blocking iallreduce ibcast iallgather ialltoall)
 * BYTES follow OSU: per-rank buffer (allreduce, bcast, reduce), per-destination block (allgather,
 * alltoall). Reductions use MPI_INT (BYTES rounded down to whole ints), the others MPI_BYTE.
 *
 * Rank 0 prints one line per point:
 *   ok COLL BYTES [user_op_max_len=N count=C]
 * For allreduce it also runs a user-defined commutative sum and records the longest vector the library
 * handed to it: an algorithm that reduces the whole vector at once (recursive doubling) shows N == C, one
 * that reduces it in pieces (ring, reduce-scatter based) shows N < C. That is a deterministic trace of
 * which algorithm the selection picked, with no timing involved.
 * A non-blocking collective (issue 41) is started twice on the same communicator before both are completed
 * with MPI_Waitall (several outstanding requests, separate buffers), each result checked; ialltoall also runs
 * once with MPI_IN_PLACE (the tuning file's in-place guard).
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

static void run_allreduce(long bytes, int rank, int size, MPI_Op traced, int nb)
{
    const char *name = nb ? "iallreduce" : "allreduce";
    int count = (int)(bytes / (long)sizeof(int));
    int *send = malloc(sizeof(int) * (size_t)(count + 1)), *recv = malloc(sizeof(int) * (size_t)(count + 1));
    int *other = malloc(sizeof(int) * (size_t)(count + 1));
    for (long i = 0; i < count; i++)
        send[i] = value_at(rank, i);
    long factor = (long)size * (size + 1) / 2;
    for (int repeat = 0; repeat < 2; repeat++) {
        if (nb) {
            MPI_Request requests[2];
            MPI_Iallreduce(send, recv, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &requests[0]);
            MPI_Iallreduce(send, other, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
            for (long i = 0; i < count; i++)
                if (other[i] != (int)((i % 7 + 1) * factor))
                    fail("MPI_SUM (second request)", name, bytes, i);
        } else
            MPI_Allreduce(send, recv, count, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (long i = 0; i < count; i++)
            if (recv[i] != (int)((i % 7 + 1) * factor))
                fail("MPI_SUM", name, bytes, i);
    }
    user_op_max_len = 0;
    if (nb) {
        MPI_Request request;
        MPI_Iallreduce(send, recv, count, MPI_INT, traced, MPI_COMM_WORLD, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
    } else
        MPI_Allreduce(send, recv, count, MPI_INT, traced, MPI_COMM_WORLD);
    for (long i = 0; i < count; i++)
        if (recv[i] != (int)((i % 7 + 1) * factor))
            fail("user-op", name, bytes, i);
    if (rank == 0)
        printf("ok %s %ld user_op_max_len=%d count=%d\n", name, bytes, user_op_max_len, count);
    free(send);
    free(recv);
    free(other);
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

static void run_bcast(long bytes, int rank, int nb)
{
    const char *name = nb ? "ibcast" : "bcast";
    unsigned char *buf = malloc((size_t)bytes + 1), *other = malloc((size_t)bytes + 1);
    for (int repeat = 0; repeat < 2; repeat++) {
        for (long i = 0; i < bytes; i++) {
            buf[i] = rank == 0 ? (unsigned char)(i * 13 + repeat) : 0;
            other[i] = rank == 0 ? (unsigned char)(i * 5 + repeat) : 0;
        }
        if (nb) {
            MPI_Request requests[2];
            MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &requests[0]);
            MPI_Ibcast(other, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
            for (long i = 0; i < bytes; i++)
                if (other[i] != (unsigned char)(i * 5 + repeat))
                    fail("(second request)", name, bytes, i);
        } else
            MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        for (long i = 0; i < bytes; i++)
            if (buf[i] != (unsigned char)(i * 13 + repeat))
                fail("", name, bytes, i);
    }
    if (rank == 0)
        printf("ok %s %ld\n", name, bytes);
    free(buf);
    free(other);
}

static void run_allgather(long bytes, int rank, int size, int nb)
{
    const char *name = nb ? "iallgather" : "allgather";
    unsigned char *send = malloc((size_t)bytes + 1), *recv = malloc((size_t)bytes * (size_t)size + 1);
    unsigned char *other = malloc((size_t)bytes * (size_t)size + 1);
    for (long i = 0; i < bytes; i++)
        send[i] = (unsigned char)(rank * 31 + i);
    for (int repeat = 0; repeat < 2; repeat++) {
        if (nb) {
            MPI_Request requests[2];
            MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &requests[0]);
            MPI_Iallgather(send, (int)bytes, MPI_BYTE, other, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
            if (memcmp(recv, other, (size_t)bytes * (size_t)size))
                fail("(second request)", name, bytes, 0);
        } else
            MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            for (long i = 0; i < bytes; i++)
                if (recv[(long)r * bytes + i] != (unsigned char)(r * 31 + i))
                    fail("", name, bytes, (long)r * bytes + i);
    }
    if (rank == 0)
        printf("ok %s %ld\n", name, bytes);
    free(send);
    free(recv);
    free(other);
}

static void run_alltoall(long bytes, int rank, int size, int nb)
{
    const char *name = nb ? "ialltoall" : "alltoall";
    size_t total = (size_t)bytes * (size_t)size;
    unsigned char *send = malloc(total + 1), *recv = malloc(total + 1), *other = malloc(total + 1);
    for (int d = 0; d < size; d++)
        for (long i = 0; i < bytes; i++)
            send[(long)d * bytes + i] = (unsigned char)(rank * 31 + d * 7 + i);
    for (int repeat = 0; repeat < 3; repeat++) {
        if (nb && repeat == 2) {  /* in place: the file's guard must hand it to an in-place algorithm */
            MPI_Request request;
            memcpy(recv, send, total);
            MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &request);
            MPI_Wait(&request, MPI_STATUS_IGNORE);
        } else if (nb) {
            MPI_Request requests[2];
            MPI_Ialltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &requests[0]);
            MPI_Ialltoall(send, (int)bytes, MPI_BYTE, other, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
            if (memcmp(recv, other, total))
                fail("(second request)", name, bytes, 0);
        } else if (repeat < 2)
            MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        else
            break;
        for (int s = 0; s < size; s++)
            for (long i = 0; i < bytes; i++)
                if (recv[(long)s * bytes + i] != (unsigned char)(s * 31 + rank * 7 + i))
                    fail(repeat == 2 ? "(in place)" : "", name, bytes, (long)s * bytes + i);
    }
    if (rank == 0)
        printf("ok %s %ld\n", name, bytes);
    free(send);
    free(recv);
    free(other);
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
        int nb = coll[0] == 'i';  /* iallreduce, ibcast, iallgather, ialltoall */
        const char *base = nb ? coll + 1 : coll;
        if (!strcmp(base, "allreduce"))
            run_allreduce(bytes, rank, size, traced, nb);
        else if (!strcmp(coll, "reduce"))
            run_reduce(bytes, rank, size);
        else if (!strcmp(base, "bcast"))
            run_bcast(bytes, rank, nb);
        else if (!strcmp(base, "allgather"))
            run_allgather(bytes, rank, size, nb);
        else if (!strcmp(base, "alltoall"))
            run_alltoall(bytes, rank, size, nb);
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
