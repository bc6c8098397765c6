/*
 * An MPI program with exactly known communication, for the profile tests (tests/integration/
 * test_profile_interposer.py computes the expected profile from the same numbers). Needs an even
 * number of ranks. argv[1] selects how MPI is initialised:
 *   init         MPI_Init
 *   init_thread  MPI_Init_thread(MPI_THREAD_FUNNELED)
 *   pmpi         PMPI_Init: MPI is initialised behind the tool's back (the tool starts lazily)
 * Every collective result is checked; a wrong result exits with status 3.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "rank %d: wrong result: %s\n", rank, what);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "init";
    int provided;
    if (strcmp(how, "init_thread") == 0)
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    else if (strcmp(how, "pmpi") == 0)
        PMPI_Init(&argc, &argv);
    else
        MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int half = size / 2;

    /* discarded by MPI_Pcontrol(2): nothing before it is in the profile */
    for (int i = 0; i < 3; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    int before = half;
    MPI_Sendrecv(&before, 1, MPI_INT, 0, 9, &half, 1, MPI_INT, 0, 9, MPI_COMM_SELF, MPI_STATUS_IGNORE);
    MPI_Pcontrol(2);

    /* allreduce: 10 x 8 B, 3 x 4000 B */
    for (int i = 0; i < 10; i++) {
        double x = rank + i, sum;
        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        check(sum == (double)size * (size - 1) / 2 + (double)size * i, "allreduce 8 B");
    }
    int *ints = calloc(1000, sizeof *ints), *ints_out = calloc(1000, sizeof *ints);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 1000; k++)
            ints[k] = rank + k;
        MPI_Allreduce(ints, ints_out, 1000, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        check(ints_out[999] == size * 999 + size * (size - 1) / 2, "allreduce 4000 B");
    }
    /* bcast: 5 x 100 B */
    char bytes[100];
    for (int i = 0; i < 5; i++) {
        memset(bytes, rank == 0 ? 'a' + i : 0, sizeof bytes);
        MPI_Bcast(bytes, 100, MPI_CHAR, 0, MPI_COMM_WORLD);
        check(bytes[99] == 'a' + i, "bcast");
    }
    /* on a duplicate of world: 4 x allgather 16 B, 2 x alltoall 8 B, 1 x alltoallv (i+1 ints to rank i) */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int four[4] = {rank, rank, rank, rank}, *gathered = calloc((size_t)size * 4, sizeof(int));
    for (int i = 0; i < 4; i++) {
        MPI_Allgather(four, 4, MPI_INT, gathered, 4, MPI_INT, dup);
        check(gathered[4 * (size - 1)] == size - 1, "allgather");
    }
    double *blocks = calloc((size_t)size, sizeof(double)), *blocks_out = calloc((size_t)size, sizeof(double));
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < size; k++)
            blocks[k] = rank * 100 + k;
        MPI_Alltoall(blocks, 1, MPI_DOUBLE, blocks_out, 1, MPI_DOUBLE, dup);
        check(blocks_out[size - 1] == (size - 1) * 100 + rank, "alltoall");
    }
    int *scounts = calloc((size_t)size, sizeof(int)), *sdispls = calloc((size_t)size, sizeof(int));
    int *rcounts = calloc((size_t)size, sizeof(int)), *rdispls = calloc((size_t)size, sizeof(int));
    int stotal = 0, rtotal = 0;
    for (int k = 0; k < size; k++) {
        scounts[k] = k + 1;
        sdispls[k] = stotal;
        stotal += k + 1;
        rcounts[k] = rank + 1;
        rdispls[k] = rtotal;
        rtotal += rank + 1;
    }
    int *vsend = calloc((size_t)stotal, sizeof(int)), *vrecv = calloc((size_t)rtotal, sizeof(int));
    for (int k = 0; k < stotal; k++)
        vsend[k] = rank;
    MPI_Alltoallv(vsend, scounts, sdispls, MPI_INT, vrecv, rcounts, rdispls, MPI_INT, dup);
    check(vrecv[rtotal - 1] == size - 1, "alltoallv");
    MPI_Comm_free(&dup);

    /* gather/scatter 12 B (3 ints), root 0 */
    int three[3] = {rank, rank, rank}, *all3 = calloc((size_t)size * 3, sizeof(int));
    MPI_Gather(three, 3, MPI_INT, all3, 3, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        check(all3[3 * size - 1] == size - 1, "gather");
    MPI_Scatter(all3, 3, MPI_INT, three, 3, MPI_INT, 0, MPI_COMM_WORLD);
    check(three[0] == rank, "scatter");
    /* gatherv: rank r sends r+1 chars; allgatherv: rank r contributes r+1 ints */
    char chars[64], *vchars = calloc(64 * (size_t)size, 1);
    memset(chars, 'A' + rank, sizeof chars);
    MPI_Gatherv(chars, rank + 1, MPI_CHAR, vchars, scounts, sdispls, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0)
        check(vchars[stotal - 1] == 'A' + size - 1, "gatherv");
    int *mine = calloc((size_t)rank + 1, sizeof(int)), *everyone = calloc((size_t)stotal, sizeof(int));
    for (int k = 0; k <= rank; k++)
        mine[k] = rank;
    MPI_Allgatherv(mine, rank + 1, MPI_INT, everyone, scounts, sdispls, MPI_INT, MPI_COMM_WORLD);
    check(everyone[stotal - 1] == size - 1, "allgatherv");
    /* reduce_scatter_block: 2 ints per rank; reduce_scatter: 1 int per rank */
    int *rsb = calloc(2 * (size_t)size, sizeof(int)), rsb_out[2], *ones = calloc((size_t)size, sizeof(int)), rs_out;
    for (int k = 0; k < 2 * size; k++)
        rsb[k] = 1;
    MPI_Reduce_scatter_block(rsb, rsb_out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(rsb_out[1] == size, "reduce_scatter_block");
    for (int k = 0; k < size; k++)
        ones[k] = 1;
    MPI_Reduce_scatter(rsb, &rs_out, ones, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(rs_out == size, "reduce_scatter");
    /* 6 barriers; 2 non-blocking allreduce of 8 B */
    for (int i = 0; i < 6; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) {
        double x = 1, sum = 0;
        MPI_Request req;
        MPI_Iallreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        check(sum == size, "iallreduce");
    }

    /* split even/odd: 7 x reduce 64 B; split in halves: 3 x bcast 4 B */
    MPI_Comm parity, halves, again;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &parity);
    MPI_Comm_split(MPI_COMM_WORLD, rank / half, rank, &halves);
    int sixteen[16], sixteen_out[16];
    for (int i = 0; i < 7; i++) {
        for (int k = 0; k < 16; k++)
            sixteen[k] = 1;
        MPI_Reduce(sixteen, sixteen_out, 16, MPI_INT, MPI_SUM, 0, parity);
        int prank;
        MPI_Comm_rank(parity, &prank);
        if (prank == 0)
            check(sixteen_out[15] == half, "reduce on split");
    }
    for (int i = 0; i < 3; i++) {
        int value = rank;
        MPI_Bcast(&value, 1, MPI_INT, 0, halves);
        check(value == (rank / half) * half, "bcast on split");
    }
    MPI_Comm_free(&halves);
    MPI_Comm_free(&parity);
    /* a new communicator may reuse a freed handle: it must be seen as world-sized */
    MPI_Comm_dup(MPI_COMM_WORLD, &again);
    MPI_Barrier(again);
    MPI_Comm_free(&again);

    /* paused: not recorded */
    MPI_Pcontrol(0);
    for (int i = 0; i < 5; i++) {
        double x = 1, sum;
        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Pcontrol(1);

    /* point-to-point, even rank -> odd partner: Send 3 x 100 B, Isend 2 x 3000 B, Ssend 70000 B,
     * Send_init 5000 B started 4 times; everyone: Sendrecv 16 B */
    int partner = rank ^ 1;
    char *buf = calloc(70000, 1);
    if (rank % 2 == 0) {
        MPI_Request reqs[2], persistent;
        for (int i = 0; i < 3; i++)
            MPI_Send(buf, 100, MPI_CHAR, partner, 1, MPI_COMM_WORLD);
        MPI_Isend(buf, 3000, MPI_CHAR, partner, 2, MPI_COMM_WORLD, &reqs[0]);
        MPI_Isend(buf + 3000, 3000, MPI_CHAR, partner, 2, MPI_COMM_WORLD, &reqs[1]);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        MPI_Ssend(buf, 70000, MPI_CHAR, partner, 3, MPI_COMM_WORLD);
        MPI_Send_init(buf, 5000, MPI_CHAR, partner, 4, MPI_COMM_WORLD, &persistent);
        for (int i = 0; i < 4; i++) {
            MPI_Start(&persistent);
            MPI_Wait(&persistent, MPI_STATUS_IGNORE);
        }
        MPI_Request_free(&persistent);
    } else {
        for (int i = 0; i < 3; i++)
            MPI_Recv(buf, 100, MPI_CHAR, partner, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < 2; i++)
            MPI_Recv(buf, 3000, MPI_CHAR, partner, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(buf, 70000, MPI_CHAR, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < 4; i++)
            MPI_Recv(buf, 5000, MPI_CHAR, partner, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    char out16[16] = {0}, in16[16];
    MPI_Sendrecv(out16, 16, MPI_CHAR, partner, 5, in16, 16, MPI_CHAR, partner, 5, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);

    free(ints); free(ints_out); free(gathered); free(blocks); free(blocks_out); free(scounts);
    free(sdispls); free(rcounts); free(rdispls); free(vsend); free(vrecv); free(all3); free(vchars);
    free(mine); free(everyone); free(rsb); free(ones); free(buf);
    MPI_Finalize();
    return 0;
}
