/* One collective at one message size: buffers, rank/iteration-dependent contents, the call, the check.
 *
 * Byte collectives carry blocks whose contents depend on (source rank, destination rank, iteration):
 * a block that arrives at the wrong place, stale from the previous iteration, or not at all is caught.
 * Reductions sum floats holding small integers, so every sum is exact whatever the reduction order
 * (exact while ranks * (ranks + 1024) < 2^24, i.e. up to ~3600 ranks).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static const struct {
    const char *name;
    tm_collective kind;
} collective_names[] = {
    {"allreduce", TM_ALLREDUCE},
    {"bcast", TM_BCAST},
    {"allgather", TM_ALLGATHER},
    {"alltoall", TM_ALLTOALL},
    {"reduce", TM_REDUCE},
    {"reduce_scatter", TM_REDUCE_SCATTER},
    {"reduce_scatter_block", TM_REDUCE_SCATTER_BLOCK},
    {"gather", TM_GATHER},
    {"scatter", TM_SCATTER},
    {"barrier", TM_BARRIER},
    {"allgatherv", TM_ALLGATHERV},
    {"alltoallv", TM_ALLTOALLV},
    {"gatherv", TM_GATHERV},
    {"scatterv", TM_SCATTERV},
    {"alltoallw", TM_ALLTOALLW},
};

static const char *const distribution_names[] = {"uniform", "skewed", "sparse"};

/* The non-blocking collectives the engine measures: MPI_I<coll> of these blocking ones. */
static const tm_collective nonblocking_kinds[] = {TM_ALLREDUCE, TM_BCAST, TM_ALLTOALL, TM_ALLGATHER};

tm_collective tm_collective_from_name(const char *name, int *nonblocking)
{
    *nonblocking = 0;
    for (size_t i = 0; i < sizeof collective_names / sizeof collective_names[0]; i++)
        if (strcmp(name, collective_names[i].name) == 0)
            return collective_names[i].kind;
    if (name[0] == 'i') /* "iallreduce": MPI_Iallreduce */
        for (size_t i = 0; i < sizeof collective_names / sizeof collective_names[0]; i++)
            if (strcmp(name + 1, collective_names[i].name) == 0)
                for (size_t k = 0; k < sizeof nonblocking_kinds / sizeof nonblocking_kinds[0]; k++)
                    if (nonblocking_kinds[k] == collective_names[i].kind) {
                        *nonblocking = 1;
                        return collective_names[i].kind;
                    }
    return TM_UNKNOWN;
}

tm_distribution tm_distribution_from_name(const char *name)
{
    for (int i = 0; i < TM_DIST_UNKNOWN; i++)
        if (strcmp(name, distribution_names[i]) == 0)
            return (tm_distribution)i;
    return TM_DIST_UNKNOWN;
}

int tm_collective_is_vector(tm_collective kind)
{
    return kind == TM_ALLGATHERV || kind == TM_ALLTOALLV || kind == TM_GATHERV || kind == TM_SCATTERV ||
           kind == TM_ALLTOALLW;
}

size_t tm_block_bytes(tm_distribution dist, size_t bytes, int source, int dest, int ranks)
{
    const size_t n = (size_t)ranks;
    switch (dist) {
    case TM_DIST_SKEWED: /* mean over the sources: 2 / (n + 1) x n (n + 1) / 2 / n = 1 */
        return bytes * 2u * (size_t)(source + 1) / (n + 1u);
    case TM_DIST_SPARSE:
        if (dest < 0) /* allgatherv, gatherv, scatterv: the (n + 1) / 2 even ranks carry all the bytes */
            return source % 2 == 0 ? bytes * n / ((n + 1u) / 2u) : 0;
        return dest == (source + 1) % ranks ? bytes * n : 0;
    default:
        return bytes;
    }
}

int tm_collective_is_reduction(tm_collective kind)
{
    return kind == TM_ALLREDUCE || kind == TM_REDUCE || kind == TM_REDUCE_SCATTER ||
           kind == TM_REDUCE_SCATTER_BLOCK;
}

static const int ROOT = 0;

/* murmur3's finaliser: a cheap, well-mixed 32-bit hash. */
static uint32_t mix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static uint32_t block_seed(int source, int destination, uint32_t iteration)
{
    return mix32((uint32_t)source * 0x9e3779b1u ^ mix32((uint32_t)destination * 0x85ebca77u ^ mix32(iteration)));
}

static uint8_t block_byte(uint32_t seed, size_t i)
{
    return (uint8_t)(seed + (uint32_t)i * 7u + (uint32_t)(i >> 8));
}

static void fill_block(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = block_byte(seed, i);
}

static int block_wrong(const uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != block_byte(seed, i))
            return 1;
    return 0;
}

/* The iteration- and position-dependent part (0..1023) of every rank's contribution to element g. */
static uint32_t reduction_term(uint32_t iteration, size_t g)
{
    return (mix32(iteration) + (uint32_t)g * 7u + (uint32_t)(g >> 10) * 3u) & 1023u;
}

static void fill_contributions(float *p, size_t n, size_t first_index, int rank, uint32_t iteration)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((uint32_t)rank + 1u + reduction_term(iteration, first_index + i));
}

static int sums_wrong(const float *p, size_t n, size_t first_index, int ranks, uint32_t iteration)
{
    const uint32_t rank_sum = (uint32_t)ranks * ((uint32_t)ranks + 1u) / 2u;
    for (size_t i = 0; i < n; i++) {
        float expected = (float)(rank_sum + (uint32_t)ranks * reduction_term(iteration, first_index + i));
        if (p[i] != expected)
            return 1;
    }
    return 0;
}

/* Message buffers live for the whole launch, as an application's do: one send and one receive buffer,
 * grown when a point needs more and never freed between points. Measured (MPICH 5.0.2, 2 ranks, 256 KiB
 * allreduce, in one of this VM's states): with a fresh malloc per point, the first point of a launch ran
 * at 38 us per call and every later point at 51 us, whatever the algorithm; with this pool all at 38
 * (docs/bench.md, "Points in one launch"). */
static void *pool[2];
static size_t pool_bytes[2];

static void *pool_buffer(int which, size_t bytes)
{
    if (bytes > pool_bytes[which]) {
        free(pool[which]);
        pool[which] = malloc(bytes);
        pool_bytes[which] = pool[which] ? bytes : 0;
    }
    return pool[which];
}

/* Counts and displacements of a vector collective; the bytes this rank sends and receives. -1 when a count
 * or displacement does not fit an int or the arrays cannot be allocated. Every rank computes the same
 * arrays: allgatherv/gatherv send sendcounts[0] (this rank's block) and receive recvcounts[src] (gatherv: at
 * the root); scatterv sends sendcounts[dest] (at the root) and receives recvcounts[0] (this rank's block). */
static int vector_layout(tm_case *c, size_t *send_bytes, size_t *recv_bytes)
{
    const size_t ranks = (size_t)c->size;
    c->recvcounts = malloc(ranks * sizeof *c->recvcounts);
    c->rdispls = malloc(ranks * sizeof *c->rdispls);
    c->sendcounts = malloc(ranks * sizeof *c->sendcounts);
    c->sdispls = malloc(ranks * sizeof *c->sdispls);
    if (!c->recvcounts || !c->rdispls || !c->sendcounts || !c->sdispls)
        return -1;
    if (c->kind == TM_ALLTOALLW) { /* one type per peer, as an application's alltoallw names them */
        c->types = malloc(ranks * sizeof *c->types);
        if (!c->types)
            return -1;
        for (size_t peer = 0; peer < ranks; peer++)
            c->types[peer] = MPI_BYTE;
    }
    size_t sent = 0, received = 0;
    const int alltoallv = c->kind == TM_ALLTOALLV || c->kind == TM_ALLTOALLW, scatterv = c->kind == TM_SCATTERV;
    const size_t own = tm_block_bytes(c->dist, c->bytes, c->rank, -1, c->size);
    for (int peer = 0; peer < c->size; peer++) {
        size_t out, in;
        if (alltoallv) {
            out = tm_block_bytes(c->dist, c->bytes, c->rank, peer, c->size);
            in = tm_block_bytes(c->dist, c->bytes, peer, c->rank, c->size);
        } else if (scatterv) { /* rank `peer`'s block, as it contributes to a gatherv */
            out = tm_block_bytes(c->dist, c->bytes, peer, -1, c->size);
            in = peer == 0 ? own : 0;
        } else {
            out = peer == 0 ? own : 0;
            in = tm_block_bytes(c->dist, c->bytes, peer, -1, c->size);
        }
        if (out > (size_t)INT_MAX || in > (size_t)INT_MAX || sent > (size_t)INT_MAX || received > (size_t)INT_MAX)
            return -1;
        c->sendcounts[peer] = (int)out;
        c->sdispls[peer] = (int)sent;
        c->recvcounts[peer] = (int)in;
        c->rdispls[peer] = (int)received;
        sent += out;
        received += in;
    }
    *send_bytes = sent;
    *recv_bytes = received;
    return 0;
}

int tm_case_init(tm_case *c, tm_collective kind, size_t bytes, tm_distribution dist, MPI_Comm comm)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->comm = comm;
    c->bytes = bytes;
    c->dist = dist;
    if (dist == TM_DIST_UNKNOWN || (dist != TM_DIST_UNIFORM && !tm_collective_is_vector(kind)))
        return -1;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    const size_t ranks = (size_t)c->size;
    size_t send_bytes = 0, recv_bytes = 0;
    if (tm_collective_is_reduction(kind)) {
        if (bytes % TM_REDUCTION_ELEMENT_BYTES)
            return -1;
        c->count = bytes / TM_REDUCTION_ELEMENT_BYTES;
    } else {
        c->count = bytes;
    }
    switch (kind) {
    case TM_ALLREDUCE:
    case TM_REDUCE:
        send_bytes = recv_bytes = bytes;
        break;
    case TM_BCAST:
        recv_bytes = bytes;
        break;
    case TM_ALLGATHER:
    case TM_GATHER:
        send_bytes = bytes;
        recv_bytes = bytes * ranks;
        break;
    case TM_ALLTOALL:
        send_bytes = recv_bytes = bytes * ranks;
        break;
    case TM_SCATTER:
        send_bytes = bytes * ranks;
        recv_bytes = bytes;
        break;
    case TM_REDUCE_SCATTER:
    case TM_REDUCE_SCATTER_BLOCK:
        send_bytes = bytes * ranks;
        recv_bytes = bytes;
        break;
    case TM_BARRIER:
        break;
    case TM_ALLGATHERV:
    case TM_ALLTOALLV:
    case TM_GATHERV:
    case TM_SCATTERV:
    case TM_ALLTOALLW:
        if (vector_layout(c, &send_bytes, &recv_bytes) != 0) {
            tm_case_free(c);
            return -1;
        }
        break;
    default:
        return -1;
    }
    if (c->count > (size_t)INT_MAX || c->count * ranks > (size_t)INT_MAX)
        return -1; /* counts are ints in the MPI calls used here */
    c->sendbuf = pool_buffer(0, send_bytes ? send_bytes : 1);
    c->recvbuf = pool_buffer(1, recv_bytes ? recv_bytes : 1);
    if (kind == TM_REDUCE_SCATTER) {
        c->recvcounts = malloc(ranks * sizeof *c->recvcounts);
        if (c->recvcounts)
            for (size_t r = 0; r < ranks; r++)
                c->recvcounts[r] = (int)c->count;
    }
    if (!c->sendbuf || !c->recvbuf || (kind == TM_REDUCE_SCATTER && !c->recvcounts)) {
        tm_case_free(c);
        return -1;
    }
    memset(c->sendbuf, 0, send_bytes ? send_bytes : 1);
    memset(c->recvbuf, 0, recv_bytes ? recv_bytes : 1);
    return 0;
}

void tm_case_free(tm_case *c)
{
    free(c->recvcounts); /* the message buffers stay in the pool */
    free(c->rdispls);
    free(c->sendcounts);
    free(c->sdispls);
    free(c->types);
    c->sendbuf = c->recvbuf = NULL;
    c->recvcounts = c->rdispls = c->sendcounts = c->sdispls = NULL;
    c->types = NULL;
}

void tm_case_fill(tm_case *c, uint32_t iteration)
{
    uint8_t *send = c->sendbuf;
    const size_t n = c->count;
    switch (c->kind) {
    case TM_ALLREDUCE:
    case TM_REDUCE:
        fill_contributions(c->sendbuf, n, 0, c->rank, iteration);
        break;
    case TM_REDUCE_SCATTER:
    case TM_REDUCE_SCATTER_BLOCK:
        fill_contributions(c->sendbuf, n * (size_t)c->size, 0, c->rank, iteration);
        break;
    case TM_BCAST:
        if (c->rank == ROOT)
            fill_block(c->recvbuf, n, block_seed(ROOT, 0, iteration));
        break;
    case TM_ALLGATHER:
    case TM_GATHER:
        fill_block(send, n, block_seed(c->rank, 0, iteration));
        break;
    case TM_ALLTOALL:
        for (int dest = 0; dest < c->size; dest++)
            fill_block(send + (size_t)dest * n, n, block_seed(c->rank, dest, iteration));
        break;
    case TM_SCATTER:
        if (c->rank == ROOT)
            for (int dest = 0; dest < c->size; dest++)
                fill_block(send + (size_t)dest * n, n, block_seed(ROOT, dest, iteration));
        break;
    case TM_ALLGATHERV:
    case TM_GATHERV:
        fill_block(send, (size_t)c->sendcounts[0], block_seed(c->rank, 0, iteration));
        break;
    case TM_SCATTERV:
        if (c->rank == ROOT)
            for (int dest = 0; dest < c->size; dest++)
                fill_block(send + c->sdispls[dest], (size_t)c->sendcounts[dest], block_seed(ROOT, dest, iteration));
        break;
    case TM_ALLTOALLV:
    case TM_ALLTOALLW:
        for (int dest = 0; dest < c->size; dest++)
            fill_block(send + c->sdispls[dest], (size_t)c->sendcounts[dest], block_seed(c->rank, dest, iteration));
        break;
    default:
        break;
    }
}

int tm_case_start(tm_case *c)
{
    const int n = (int)c->count;
    c->request = MPI_REQUEST_NULL;
    switch (c->kind) {
    case TM_ALLREDUCE:
        return MPI_Iallreduce(c->sendbuf, c->recvbuf, n, MPI_FLOAT, MPI_SUM, c->comm, &c->request);
    case TM_BCAST:
        return MPI_Ibcast(c->recvbuf, n, MPI_BYTE, ROOT, c->comm, &c->request);
    case TM_ALLGATHER:
        return MPI_Iallgather(c->sendbuf, n, MPI_BYTE, c->recvbuf, n, MPI_BYTE, c->comm, &c->request);
    case TM_ALLTOALL:
        return MPI_Ialltoall(c->sendbuf, n, MPI_BYTE, c->recvbuf, n, MPI_BYTE, c->comm, &c->request);
    default:
        return MPI_ERR_OTHER;
    }
}

int tm_case_wait(tm_case *c)
{
    return MPI_Wait(&c->request, MPI_STATUS_IGNORE);
}

int tm_case_run(tm_case *c)
{
    const int n = (int)c->count;
    if (c->nonblocking) {
        int rc = tm_case_start(c);
        return rc == MPI_SUCCESS ? tm_case_wait(c) : rc;
    }
    switch (c->kind) {
    case TM_ALLREDUCE:
        return MPI_Allreduce(c->sendbuf, c->recvbuf, n, MPI_FLOAT, MPI_SUM, c->comm);
    case TM_REDUCE:
        return MPI_Reduce(c->sendbuf, c->recvbuf, n, MPI_FLOAT, MPI_SUM, ROOT, c->comm);
    case TM_REDUCE_SCATTER:
        return MPI_Reduce_scatter(c->sendbuf, c->recvbuf, c->recvcounts, MPI_FLOAT, MPI_SUM, c->comm);
    case TM_REDUCE_SCATTER_BLOCK:
        return MPI_Reduce_scatter_block(c->sendbuf, c->recvbuf, n, MPI_FLOAT, MPI_SUM, c->comm);
    case TM_BCAST:
        return MPI_Bcast(c->recvbuf, n, MPI_BYTE, ROOT, c->comm);
    case TM_ALLGATHER:
        return MPI_Allgather(c->sendbuf, n, MPI_BYTE, c->recvbuf, n, MPI_BYTE, c->comm);
    case TM_ALLTOALL:
        return MPI_Alltoall(c->sendbuf, n, MPI_BYTE, c->recvbuf, n, MPI_BYTE, c->comm);
    case TM_GATHER:
        return MPI_Gather(c->sendbuf, n, MPI_BYTE, c->recvbuf, n, MPI_BYTE, ROOT, c->comm);
    case TM_SCATTER:
        return MPI_Scatter(c->sendbuf, n, MPI_BYTE, c->recvbuf, n, MPI_BYTE, ROOT, c->comm);
    case TM_BARRIER:
        return MPI_Barrier(c->comm);
    case TM_ALLGATHERV:
        return MPI_Allgatherv(c->sendbuf, c->sendcounts[0], MPI_BYTE, c->recvbuf, c->recvcounts, c->rdispls, MPI_BYTE,
                              c->comm);
    case TM_ALLTOALLV:
        return MPI_Alltoallv(c->sendbuf, c->sendcounts, c->sdispls, MPI_BYTE, c->recvbuf, c->recvcounts, c->rdispls,
                             MPI_BYTE, c->comm);
    case TM_GATHERV:
        return MPI_Gatherv(c->sendbuf, c->sendcounts[0], MPI_BYTE, c->recvbuf, c->recvcounts, c->rdispls, MPI_BYTE,
                           ROOT, c->comm);
    case TM_SCATTERV:
        return MPI_Scatterv(c->sendbuf, c->sendcounts, c->sdispls, MPI_BYTE, c->recvbuf, c->recvcounts[0], MPI_BYTE,
                            ROOT, c->comm);
    case TM_ALLTOALLW: /* MPI_BYTE types: the byte displacements are alltoallv's */
        return MPI_Alltoallw(c->sendbuf, c->sendcounts, c->sdispls, c->types, c->recvbuf, c->recvcounts, c->rdispls,
                             c->types, c->comm);
    default:
        return MPI_ERR_OTHER;
    }
}

int tm_case_check(const tm_case *c, uint32_t iteration)
{
    const uint8_t *recv = c->recvbuf;
    const size_t n = c->count;
    switch (c->kind) {
    case TM_ALLREDUCE:
        return sums_wrong(c->recvbuf, n, 0, c->size, iteration);
    case TM_REDUCE:
        return c->rank == ROOT ? sums_wrong(c->recvbuf, n, 0, c->size, iteration) : 0;
    case TM_REDUCE_SCATTER:
    case TM_REDUCE_SCATTER_BLOCK:
        return sums_wrong(c->recvbuf, n, (size_t)c->rank * n, c->size, iteration);
    case TM_BCAST:
        return c->rank == ROOT ? 0 : block_wrong(recv, n, block_seed(ROOT, 0, iteration));
    case TM_ALLGATHER:
        for (int src = 0; src < c->size; src++)
            if (block_wrong(recv + (size_t)src * n, n, block_seed(src, 0, iteration)))
                return 1;
        return 0;
    case TM_GATHER:
        if (c->rank != ROOT)
            return 0;
        for (int src = 0; src < c->size; src++)
            if (block_wrong(recv + (size_t)src * n, n, block_seed(src, 0, iteration)))
                return 1;
        return 0;
    case TM_ALLTOALL:
        for (int src = 0; src < c->size; src++)
            if (block_wrong(recv + (size_t)src * n, n, block_seed(src, c->rank, iteration)))
                return 1;
        return 0;
    case TM_SCATTER:
        return block_wrong(recv, n, block_seed(ROOT, c->rank, iteration));
    case TM_ALLGATHERV:
        for (int src = 0; src < c->size; src++)
            if (block_wrong(recv + c->rdispls[src], (size_t)c->recvcounts[src], block_seed(src, 0, iteration)))
                return 1;
        return 0;
    case TM_ALLTOALLV:
    case TM_ALLTOALLW:
        for (int src = 0; src < c->size; src++)
            if (block_wrong(recv + c->rdispls[src], (size_t)c->recvcounts[src], block_seed(src, c->rank, iteration)))
                return 1;
        return 0;
    case TM_GATHERV:
        if (c->rank != ROOT)
            return 0;
        for (int src = 0; src < c->size; src++)
            if (block_wrong(recv + c->rdispls[src], (size_t)c->recvcounts[src], block_seed(src, 0, iteration)))
                return 1;
        return 0;
    case TM_SCATTERV:
        return block_wrong(recv, (size_t)c->recvcounts[0], block_seed(ROOT, c->rank, iteration));
    default:
        return 0;
    }
}

void tm_case_spoil(tm_case *c)
{
    const int rooted = c->kind == TM_REDUCE || c->kind == TM_GATHER || c->kind == TM_GATHERV; /* only the root checks */
    int checker = rooted ? ROOT : c->size - 1; /* bcast's root does not check */
    if (c->kind == TM_SCATTERV) /* the last rank that receives a block (a skewed or sparse one may be empty) */
        while (checker > 0 && tm_block_bytes(c->dist, c->bytes, checker, -1, c->size) == 0)
            checker--;
    if (c->kind == TM_BARRIER || c->count == 0 || c->rank != checker)
        return;
    if (tm_collective_is_vector(c->kind)) { /* a byte of a block this rank receives (some may be empty) */
        for (int src = 0; src < c->size; src++)
            if (c->recvcounts[src] > 0) {
                ((uint8_t *)c->recvbuf)[c->rdispls[src]] ^= 0x5a;
                return;
            }
        return;
    }
    ((uint8_t *)c->recvbuf)[0] ^= 0x5a;
}
