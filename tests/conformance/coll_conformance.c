/*
 * tunempi's collective conformance suite: every collective tunempi can switch, checked against a result
 * computed locally, over the argument shapes that select or break algorithms:
 *
 *   in place and not; MPI_SUM, a commutative user op, a NON-commutative user op (2x2 matrix product,
 *   on a contiguous and on a strided derived type); contiguous ints, a strided vector type, and a
 *   strided send type received as plain ints; ranks passing different types of the same signature (a
 *   root's plain ints received as derived elements); counts 0, 1, 7, 1031 and (int layouts) 4500; roots 0 and
 *   the last rank;
 *   MPI_COMM_WORLD, a reversed-order copy, the halves of a split and (where the collective has an
 *   intercommunicator form) an intercommunicator between the halves.
 *
 * Every case is checked on every rank (values and the untouched holes of strided receive buffers); world
 * rank 0 collects the verdicts by point-to-point messages (never through a collective under test) and
 * prints one line per case, flushed at once, so a driver knows where a crashed launch stopped:
 *
 *   READY                      (the communicators under test exist; no case has started)
 *   R <index> <collective> <comm> <inplace|copy> <datatype/op> <count> <root> ok|FAIL|ERROR
 *   DONE <cases>
 *
 *   coll_conformance [--colls allreduce,bcast,...] [--start INDEX] [--skip I,J,...] [--list] [--cvar NAME=INT ...]
 *                    [--log PATH]
 *
 * ERROR: the call returned an error code (communicators use MPI_ERRORS_RETURN: MPICH's fallback=error
 * reports an algorithm that cannot take the arguments this way). --start skips the cases before INDEX
 * (a driver restarts after a crash there); --skip leaves cases out (a driver skips the ones that crash the
 * library on its own, already reported by its default run). --list prints the cases without running them. --cvar writes an
 * int control variable through MPI_T on every rank right after MPI_Init, before the communicators under
 * test are created (how a run-time switch is made; Open MPI honours it on communicators created after).
 * --log PATH: rank 0 writes the same lines to PATH as well. A launch that aborts a few milliseconds after a
 * line can lose it on its way through the launcher (MPICH 5.0.2's Hydra at 8 ranks dropped READY when the
 * first case crashed at once), but a line written to a file is in the kernel before the next case starts.
 */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SENTINEL 0x7eadbeef
#define MAXP 64

/* ---- layouts: how the signature (a sequence of 4-byte values) sits in memory ----
 * Element k's value i sits at int (k * slot + off[i]) from the buffer pointer; off[] is read from the
 * datatype itself (an index buffer packed through it), so nested types need no hand-written map. off[]
 * may be negative (a type whose true lower bound is below the buffer pointer): buffers keep PAD ints of
 * sentinels in front, checked like the holes. A double is two 4-byte values: every value the suite
 * writes is below 2^20, a subnormal double's high word, so no value is a NaN whose bits a copy could change. */
#define PAD 16

typedef struct {
    const char *name;
    MPI_Datatype type;
    int per;     /* signature values per element */
    int slot;    /* ints per element extent */
    int *off;    /* where each value of an element sits, in ints from the element's start */
} layout;

/* L_NEST: hindexed (16 blocks of 2, gaps growing by one int) of a 4-D subarray (2^4 of 3^4 ints, starts
 * 1,1,1,1): 512 values of a nested, non-contiguous type (issue 25's failing bcast). L_STRUCT: the same
 * hindexed of a struct {int at 0, double at 8} (a gap inside each element, values of two sizes).
 * L_NEGLB: an hindexed of ints whose first block sits below the buffer pointer, resized to lb -6 ints and
 * an extent of 12 (a negative lower bound, as MPICH's DTPools types have). */
enum { L_INT, L_VEC, L_MAT, L_MATV, L_NEST, L_STRUCT, L_NEGLB, NLAYOUT };
static layout lay[NLAYOUT];

enum { OP_SUM, OP_USUM, OP_MATMUL };
static MPI_Op op_usum, op_matmul;

static int world_rank, world_size;
static FILE *log_file; /* --log: rank 0's lines, also written here */

/* One line of rank 0's report, on stdout and in the --log file, each flushed at once. */
static void report(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    if (log_file) {
        va_list again;
        va_copy(again, args);
        vfprintf(log_file, format, again);
        va_end(again);
        fflush(log_file);
    }
    vprintf(format, args);
    va_end(args);
    fflush(stdout);
}
static long n_ok, n_fail, n_err;
/* A user op was handed a datatype the caller never passed (the standard says it gets the caller's). */
static int foreign_datatype;

static const layout *layout_of(MPI_Datatype dt)
{
    for (int i = 0; i < NLAYOUT; i++)
        if (lay[i].type == dt)
            return &lay[i];
    foreign_datatype = 1;
    return NULL;
}

/* Matrices of 4 consecutive signature values, in every layout whose element holds whole matrices. */
static void matmul_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const layout *l = layout_of(*dt);
    if (!l)
        return;
    const unsigned *a = in;
    unsigned *b = inout;
    for (long m = 0; m < *len; m++)
        for (int q = 0; q + 3 < l->per; q += 4) {
            const int *o = l->off + q;
            const unsigned *x = a + m * l->slot;
            unsigned *y = b + m * l->slot;
            unsigned r0 = x[o[0]] * y[o[0]] + x[o[1]] * y[o[2]], r1 = x[o[0]] * y[o[1]] + x[o[1]] * y[o[3]];
            unsigned r2 = x[o[2]] * y[o[0]] + x[o[3]] * y[o[2]], r3 = x[o[2]] * y[o[1]] + x[o[3]] * y[o[3]];
            y[o[0]] = r0;
            y[o[1]] = r1;
            y[o[2]] = r2;
            y[o[3]] = r3;
        }
}

static void usum_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const layout *l = layout_of(*dt);
    if (!l)
        return;
    const int *a = in;
    int *b = inout;
    for (long m = 0; m < *len; m++)
        for (int k = 0; k < l->per; k++)
            b[m * l->slot + l->off[k]] += a[m * l->slot + l->off[k]];
}

/* Fills in name, per, slot and off[] of a committed type whose signature is made of 4-byte values. */
static void describe_layout(layout *l, const char *name, MPI_Datatype type)
{
    MPI_Aint lb, extent, tlb, textent;
    int size, psize, at = 0;
    MPI_Type_get_extent(type, &lb, &extent);
    MPI_Type_get_true_extent(type, &tlb, &textent);
    MPI_Type_size(type, &size);
    long lo = tlb / 4, n = textent / 4 + 1;
    int *index = malloc(sizeof(int) * (size_t)n);
    for (long i = 0; i < n; i++)
        index[i] = (int)(lo + i);
    MPI_Pack_size(1, type, MPI_COMM_SELF, &psize);
    int *packed = malloc((size_t)psize);
    MPI_Pack(index - lo, 1, type, packed, psize, &at, MPI_COMM_SELF);
    l->name = name;
    l->type = type;
    l->per = size / 4;
    l->slot = (int)(extent / 4);
    l->off = packed;
    free(index);
}

/* A committed hindexed of 16 blocks of 2 `base` elements, the gap after each block one int longer than the
 * last (issue 25's nested types). */
static MPI_Datatype growing_hindexed(MPI_Datatype base)
{
    int blocks[16];
    MPI_Aint displs[16], lb, extent;
    MPI_Datatype h;
    MPI_Type_get_extent(base, &lb, &extent);
    for (int i = 0; i < 16; i++) {
        blocks[i] = 2;
        displs[i] = i * 2 * extent + (MPI_Aint)(i * (i + 1) / 2) * 4;
    }
    MPI_Type_create_hindexed(16, blocks, displs, base, &h);
    MPI_Type_commit(&h);
    return h;
}

static void make_layouts(void)
{
    MPI_Datatype v, sub, st, h;
    static int off_int[1] = {0}, off_vec[2] = {0, 2}, off_mat[4] = {0, 1, 2, 3}, off_matv[4] = {0, 2, 4, 6};
    lay[L_INT] = (layout){"int", MPI_INT, 1, 1, off_int};
    MPI_Type_vector(2, 1, 2, MPI_INT, &v);
    MPI_Type_create_resized(v, 0, 4 * sizeof(int), &lay[L_VEC].type);
    MPI_Type_free(&v);
    MPI_Type_commit(&lay[L_VEC].type);
    lay[L_VEC] = (layout){"vec", lay[L_VEC].type, 2, 4, off_vec};
    MPI_Type_contiguous(4, MPI_UNSIGNED, &lay[L_MAT].type);
    MPI_Type_commit(&lay[L_MAT].type);
    lay[L_MAT] = (layout){"mat", lay[L_MAT].type, 4, 4, off_mat};
    MPI_Type_vector(4, 1, 2, MPI_UNSIGNED, &v);
    MPI_Type_create_resized(v, 0, 8 * sizeof(unsigned), &lay[L_MATV].type);
    MPI_Type_free(&v);
    MPI_Type_commit(&lay[L_MATV].type);
    lay[L_MATV] = (layout){"matv", lay[L_MATV].type, 4, 8, off_matv};

    int sizes[4] = {3, 3, 3, 3}, subsizes[4] = {2, 2, 2, 2}, starts[4] = {1, 1, 1, 1};
    MPI_Type_create_subarray(4, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &sub);
    describe_layout(&lay[L_NEST], "nest", growing_hindexed(sub));
    MPI_Type_free(&sub);

    int one[2] = {1, 1};
    MPI_Aint at[2] = {0, 8};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, one, at, types, &st);
    describe_layout(&lay[L_STRUCT], "struct", growing_hindexed(st));
    MPI_Type_free(&st);

    int nb[2] = {2, 1};
    MPI_Aint nd[2] = {-4 * 4, 3 * 4};
    MPI_Type_create_hindexed(2, nb, nd, MPI_INT, &v);
    MPI_Type_create_resized(v, -6 * 4, 12 * 4, &h);
    MPI_Type_free(&v);
    MPI_Type_commit(&h);
    describe_layout(&lay[L_NEGLB], "neglb", h);

    MPI_Op_create(usum_fn, 1, &op_usum);
    MPI_Op_create(matmul_fn, 0, &op_matmul);
}

/* Position in memory of signature value j. */
static inline long pos(const layout *l, long j)
{
    return (j / l->per) * l->slot + l->off[j % l->per];
}

/* A buffer for `elems` elements with PAD sentinel ints in front (returned pointer: after them). */
static int *alloc_buf(const layout *l, long elems)
{
    long n = elems * l->slot + 1 + 2 * PAD;
    int *b = malloc(sizeof(int) * (size_t)n);
    for (long i = 0; i < n; i++)
        b[i] = SENTINEL;
    return b + PAD;
}

static void free_buf(int *b)
{
    free(b - PAD);
}

/* What rank r contributes at signature value j (matrices: small entries, products do not commute). */
static int value(int kind, int r, long j, int salt)
{
    if (kind == OP_MATMUL)
        return (int)((r * 3 + j * 5 + salt + (j % 4 == 1 ? r : 0)) % 5);
    return (int)(((r + 1) * 131 + j * 17 + salt * 7) % 997);
}

static void fill(const layout *l, int *b, long elems, int kind, int r, long j0, int salt)
{
    for (long j = 0; j < elems * l->per; j++)
        b[pos(l, j)] = value(kind, r, j0 + j, salt);
}

/* The reduction of ranks[0..n) in that order at signature value j. */
static int reduced(int kind, const int *ranks, int n, long j, int salt)
{
    if (kind != OP_MATMUL) {
        int s = 0;
        for (int i = 0; i < n; i++)
            s += value(kind, ranks[i], j, salt);
        return s;
    }
    long m0 = j - j % 4;
    unsigned acc[4] = {1, 0, 0, 1};
    for (int i = 0; i < n; i++) {
        unsigned x[4], r[4];
        for (int k = 0; k < 4; k++)
            x[k] = (unsigned)value(kind, ranks[i], m0 + k, salt);
        r[0] = acc[0] * x[0] + acc[1] * x[2];
        r[1] = acc[0] * x[1] + acc[1] * x[3];
        r[2] = acc[2] * x[0] + acc[3] * x[2];
        r[3] = acc[2] * x[1] + acc[3] * x[3];
        memcpy(acc, r, sizeof acc);
    }
    return (int)acc[j % 4];
}

/* Checks a buffer: values at signature positions [0, nvals) equal want(j), holes kept their sentinel. */
typedef int (*want_fn)(long j, const void *ctx);

/* Values at signature positions [0, nvals) equal want(j); every other int in [lo, hi) (relative to b) kept
 * its sentinel. */
static int check_range(const layout *l, const int *b, long elems, want_fn want, const void *ctx, long lo, long hi)
{
    long nvals = elems * l->per;
    char *seen = calloc((size_t)(hi - lo), 1);
    int good = 1;
    for (long k = 0; k < nvals && good; k++) {
        long i = pos(l, k);
        if (i >= lo && i < hi)
            seen[i - lo] = 1;
        good = b[i] == want(k, ctx);
    }
    for (long i = lo; i < hi && good; i++)
        good = seen[i - lo] || b[i] == SENTINEL;
    free(seen);
    return good;
}

/* A whole buffer from alloc_buf: its padding in front and behind included. */
static int check(const layout *l, const int *b, long elems, want_fn want, const void *ctx)
{
    return check_range(l, b, elems, want, ctx, -PAD, elems * l->slot + 1 + PAD);
}

/* ---- cases ---- */
enum { C_WORLD, C_REV, C_HALF, C_INTER, NCOMM };
static const char *comm_names[NCOMM] = {"world", "rev", "half", "inter"};
static MPI_Comm comms[NCOMM];

typedef struct {
    const char *coll;
    int comm, inplace, send_layout, recv_layout, opkind;
    int count, root, salt;
    /* Ranks pass different but compatible types (issue 38, MPICH's DTP tests): even ranks send and receive
     * in send_layout (count elements), odd ranks in recv_layout (as many elements as carry the same values). */
    int mixed;
    /* Non-blocking collectives (issue 41): how the requests complete (NB_WAIT: one request, MPI_Wait; the
     * others: NB_REQS requests of the same case with different values outstanding on one communicator). */
    int completion;
} ccase;

enum { NB_NONE, NB_WAIT, NB_WAITALL, NB_REVERSE, NB_TEST, NCOMPLETION };
static const char *completion_names[NCOMPLETION] = {"", "wait", "waitall3", "reverse3", "test3"};
#define NB_REQS 3

typedef struct {
    const ccase *c;
    int *ranks, nranks; /* contributors, in reduction order */
    long offset;        /* signature offset of this rank's block within the reduction */
    int src;            /* for gathers: the rank whose block this is */
    long block;         /* values per block */
} want_ctx;

static int want_reduce(long j, const void *p)
{
    const want_ctx *w = p;
    return reduced(w->c->opkind, w->ranks, w->nranks, w->offset + j, w->c->salt);
}

/* Concatenation of blocks of w->block values, block b from rank ranks[b] (its own values 0..block). */
static int want_concat(long j, const void *p)
{
    const want_ctx *w = p;
    long b = j / w->block;
    return value(w->c->opkind, w->ranks[b], (w->offset + j % w->block), w->c->salt);
}

/* Blocks of w->block values, block b from ranks[b] at offset (my rank) * block in its send buffer. */
static int want_alltoall(long j, const void *p)
{
    const want_ctx *w = p;
    long b = j / w->block;
    return value(w->c->opkind, w->ranks[b], w->offset + j % w->block, w->c->salt);
}

static int want_single(long j, const void *p)
{
    const want_ctx *w = p;
    return value(w->c->opkind, w->src, w->offset + j, w->c->salt);
}

static int is_rooted(const char *coll)
{
    return !strcmp(coll, "bcast") || !strcmp(coll, "ibcast") || !strcmp(coll, "reduce") || !strcmp(coll, "gather") || !strcmp(coll, "scatter") ||
           !strcmp(coll, "gatherv") || !strcmp(coll, "scatterv");
}

static int is_nonblocking(const char *coll)
{
    return coll[0] == 'i';
}

/* One request of a non-blocking case: its own copy of the case (another salt: other values), buffers,
 * counts as run_case computes them. */
typedef struct {
    ccase c;
    int *s, *r;
    MPI_Request req;
} nbcall;

/* Starts a non-blocking case's call with this request's buffers (filled here); returns the call's code. */
static int nb_start(nbcall *k, MPI_Comm comm, int me, int p, const layout *sl, const layout *rl, int n, long rn,
                    MPI_Op op)
{
    const ccase *c = &k->c;
    const char *coll = c->coll;
    const void *ip = MPI_IN_PLACE;
    k->s = k->r = NULL;
    if (!strcmp(coll, "iallreduce")) {
        k->s = alloc_buf(sl, n);
        k->r = alloc_buf(sl, n);
        fill(sl, k->s, n, c->opkind, me, 0, c->salt);
        if (c->inplace)
            fill(sl, k->r, n, c->opkind, me, 0, c->salt);
        return MPI_Iallreduce(c->inplace ? ip : k->s, k->r, n, sl->type, op, comm, &k->req);
    }
    if (!strcmp(coll, "ibcast")) {
        k->s = alloc_buf(sl, n);
        if (me == c->root)
            fill(sl, k->s, n, c->opkind, c->root, 0, c->salt);
        return MPI_Ibcast(k->s, n, sl->type, c->root, comm, &k->req);
    }
    if (!strcmp(coll, "iallgather")) {
        k->s = alloc_buf(sl, n);
        k->r = alloc_buf(rl, rn * p);
        fill(sl, k->s, n, c->opkind, me, 0, c->salt);
        if (c->inplace)
            fill(rl, k->r + me * rn * rl->slot, rn, c->opkind, me, 0, c->salt);
        return MPI_Iallgather(c->inplace ? ip : k->s, n, sl->type, k->r, (int)rn, rl->type, comm, &k->req);
    }
    /* ialltoall: block d of rank q carries q's values at [d*vals, (d+1)*vals) */
    k->s = alloc_buf(sl, (long)n * p);
    k->r = alloc_buf(rl, rn * p);
    fill(sl, c->inplace ? k->r : k->s, (long)n * p, c->opkind, me, 0, c->salt);
    return MPI_Ialltoall(c->inplace ? ip : k->s, n, sl->type, k->r, (int)rn, rl->type, comm, &k->req);
}

/* Checks a completed request's result against the values computed locally, and frees its buffers. */
static int nb_check(nbcall *k, int me, int p, const layout *sl, const layout *rl, int n, long rn, long vals)
{
    static int all[MAXP];
    for (int i = 0; i < MAXP; i++)
        all[i] = i;
    const ccase *c = &k->c;
    want_ctx w = {c, all, p, 0, 0, vals};
    int good;
    if (!strcmp(c->coll, "iallreduce")) {
        good = check(sl, k->r, n, want_reduce, &w);
    } else if (!strcmp(c->coll, "ibcast")) {
        w.src = c->root;
        good = check(sl, k->s, n, want_single, &w);
    } else if (!strcmp(c->coll, "iallgather")) {
        good = check(rl, k->r, rn * p, want_concat, &w);
    } else {
        w.offset = (long)me * vals;
        good = check(rl, k->r, rn * p, want_alltoall, &w);
    }
    free_buf(k->s);
    if (k->r)
        free_buf(k->r);
    return good;
}

/* A non-blocking case: one request completed by MPI_Wait, or NB_REQS requests of the same case (other
 * values each) started one after another on one communicator, then completed together (MPI_Waitall), one
 * by one in reverse order (MPI_Wait), or by polling each with MPI_Test until all are done. 1 pass, 0 wrong
 * result, -1 error code. */
static int run_nb_case(const ccase *c, MPI_Comm comm, int me, int p, const layout *sl, const layout *rl, int n,
                       long rn, long vals, MPI_Op op)
{
    nbcall k[NB_REQS];
    int nreq = c->completion == NB_WAIT ? 1 : NB_REQS, rc = MPI_SUCCESS, good = 1;
    for (int i = 0; i < nreq; i++) {
        k[i].c = *c;
        k[i].c.salt = (c->salt + 4 * i) % 11;
        k[i].req = MPI_REQUEST_NULL;
        int started = nb_start(&k[i], comm, me, p, sl, rl, n, rn, op);
        if (started != MPI_SUCCESS)
            rc = started;
    }
    MPI_Request reqs[NB_REQS];
    for (int i = 0; i < nreq; i++)
        reqs[i] = k[i].req;
    if (c->completion == NB_WAIT || c->completion == NB_WAITALL) {
        if (MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            rc = -1;
    } else if (c->completion == NB_REVERSE) {
        for (int i = nreq - 1; i >= 0; i--)
            if (MPI_Wait(&reqs[i], MPI_STATUS_IGNORE) != MPI_SUCCESS)
                rc = -1;
    } else {
        int left = nreq;
        while (left > 0 && rc == MPI_SUCCESS) {
            left = 0;
            for (int i = 0; i < nreq; i++) {
                int flag = 1;
                if (reqs[i] != MPI_REQUEST_NULL && MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                    rc = -1;
                left += !flag;
            }
        }
    }
    for (int i = 0; i < nreq; i++)
        good = nb_check(&k[i], me, p, sl, rl, n, rn, vals) && good;
    return rc != MPI_SUCCESS ? -1 : good;
}

/* Runs one case on this rank: 1 pass, 0 wrong result, -1 error code. */
static int run_case(const ccase *c)
{
    MPI_Comm comm = comms[c->comm];
    int inter = c->comm == C_INTER;
    int me, p, rp = 0;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &p);
    if (inter)
        MPI_Comm_remote_size(comm, &rp);
    int all[MAXP], remote[MAXP];
    for (int i = 0; i < MAXP; i++)
        all[i] = remote[i] = i;
    /* Remote ranks' values are told apart from local ones by a +100 offset (inter only). */
    int left = world_rank % 2 == 0;
    if (inter) {
        for (int i = 0; i < rp; i++)
            remote[i] = i + (left ? 100 : 0);
    }
    int myid = inter ? me + (left ? 0 : 100) : me;
    const layout *sl = &lay[c->send_layout], *rl = &lay[c->recv_layout];
    int n = c->count;                         /* elements of the send layout */
    if (c->mixed && me % 2) {                 /* this rank's own type: the same values, another count */
        n = (int)((long)n * sl->per / rl->per);
        sl = rl;
    } else if (c->mixed) {
        rl = sl;
    }
    long vals = (long)n * sl->per;            /* signature values per rank-block */
    long rn = vals / rl->per;                 /* elements of the receive layout per block */
    MPI_Op op = c->opkind == OP_SUM ? MPI_SUM : c->opkind == OP_USUM ? op_usum : op_matmul;
    const char *coll = c->coll;
    int rc = MPI_SUCCESS, good = 1;
    want_ctx w = {c, all, p, 0, 0, vals};
    const void *ip = MPI_IN_PLACE;
    foreign_datatype = 0;

    if (is_nonblocking(coll)) {
        int verdict = run_nb_case(c, comm, me, p, sl, rl, n, rn, vals, op);
        if (foreign_datatype)
            fprintf(stderr, "rank %d: %s: the user op was handed a datatype the caller did not pass\n", world_rank,
                    coll);
        return verdict < 0 ? -1 : verdict && !foreign_datatype;
    } else if (!strcmp(coll, "barrier")) {
        rc = MPI_Barrier(comm);
    } else if (!strcmp(coll, "allreduce")) {
        int *s = alloc_buf(sl, n), *r = alloc_buf(sl, n);
        fill(sl, s, n, c->opkind, myid, 0, c->salt);
        if (c->inplace)
            fill(sl, r, n, c->opkind, myid, 0, c->salt);
        rc = MPI_Allreduce(c->inplace ? ip : s, r, n, sl->type, op, comm);
        if (inter) {
            w.ranks = remote;
            w.nranks = rp;
        }
        good = check(sl, r, n, want_reduce, &w);
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "reduce")) {
        int *s = alloc_buf(sl, n), *r = alloc_buf(sl, n);
        fill(sl, s, n, c->opkind, me, 0, c->salt);
        int inpl = c->inplace && me == c->root;
        if (inpl)
            fill(sl, r, n, c->opkind, me, 0, c->salt);
        rc = MPI_Reduce(inpl ? ip : s, r, n, sl->type, op, c->root, comm);
        if (me == c->root)
            good = check(sl, r, n, want_reduce, &w);
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "bcast")) {
        int *b = alloc_buf(sl, n);
        int root = c->root;
        if (inter) {
            /* the left group's rank 0 sends to the right group */
            root = left ? (me == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
            if (left && me == 0)
                fill(sl, b, n, c->opkind, 0, 0, c->salt);
        } else if (me == root) {
            fill(sl, b, n, c->opkind, root, 0, c->salt);
        }
        rc = MPI_Bcast(b, n, sl->type, root, comm);
        w.src = inter ? 0 : c->root;
        if (!inter || (left && me == 0) || !left)
            good = check(sl, b, n, want_single, &w);
        free_buf(b);
    } else if (!strcmp(coll, "allgather")) {
        int np = inter ? rp : p;
        int *s = alloc_buf(sl, n), *r = alloc_buf(rl, rn * np);
        fill(sl, s, n, c->opkind, myid, 0, c->salt);
        if (c->inplace)
            fill(rl, r + me * rn * rl->slot, rn, c->opkind, me, 0, c->salt);
        rc = MPI_Allgather(c->inplace ? ip : s, n, sl->type, r, (int)rn, rl->type, comm);
        if (inter)
            w.ranks = remote;
        good = check(rl, r, rn * np, want_concat, &w);
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "allgatherv")) {
        int counts[MAXP], displs[MAXP];
        long total = 0;
        for (int i = 0; i < p; i++) {
            counts[i] = (int)rn; /* the same signature per rank; irregular displacements (a gap each) */
            displs[i] = (int)total + i;
            total += rn + i;
        }
        int *s = alloc_buf(sl, n), *r = alloc_buf(rl, total);
        fill(sl, s, n, c->opkind, me, 0, c->salt);
        if (c->inplace)
            fill(rl, r + (long)displs[me] * rl->slot, rn, c->opkind, me, 0, c->salt);
        rc = MPI_Allgatherv(c->inplace ? ip : s, n, sl->type, r, counts, displs, rl->type, comm);
        for (int i = 0; i < p && good; i++) {
            w.src = i;
            good = check_range(rl, r + (long)displs[i] * rl->slot, rn, want_single, &w, 0, rn * rl->slot + 1);
        }
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "alltoallv")) {
        /* Counts differ between pairs (the block between q and d is (q + d) % 2 + 1 times the case's count:
         * symmetric, so in place works too) and displacements leave a gap of one element after each block.
         * The block from q to d carries q's values from d * 4 * vals on. */
        int scounts[MAXP], sdispls[MAXP], rcounts[MAXP], rdispls[MAXP];
        long stotal = 0, rtotal = 0;
        for (int i = 0; i < p; i++) {
            int f = (me + i) % 2 + 1;
            scounts[i] = n * f;
            sdispls[i] = (int)stotal;
            stotal += scounts[i] + 1;
            rcounts[i] = (int)rn * f;
            rdispls[i] = (int)rtotal;
            rtotal += rcounts[i] + 1;
        }
        int *s = alloc_buf(sl, stotal), *r = alloc_buf(rl, rtotal);
        for (int d = 0; d < p; d++) {
            if (c->inplace)
                fill(rl, r + (long)rdispls[d] * rl->slot, rcounts[d], c->opkind, me, (long)d * 4 * vals, c->salt);
            else
                fill(sl, s + (long)sdispls[d] * sl->slot, scounts[d], c->opkind, me, (long)d * 4 * vals, c->salt);
        }
        rc = MPI_Alltoallv(c->inplace ? ip : s, scounts, sdispls, sl->type, r, rcounts, rdispls, rl->type, comm);
        w.offset = (long)me * 4 * vals;
        for (int q = 0; q < p && good; q++) {
            w.src = q;
            good = check_range(rl, r + (long)rdispls[q] * rl->slot, rcounts[q], want_single, &w, 0,
                               (long)rcounts[q] * rl->slot + 1);
        }
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "alltoallw")) {
        /* alltoallv's case (its counts, gaps and values) through MPI_Alltoallw: an array of datatypes (the
         * case's send and receive types for every peer) and displacements in bytes (elements x extent). */
        int scounts[MAXP], sdispls[MAXP], rcounts[MAXP], rdispls[MAXP];
        MPI_Datatype stypes[MAXP], rtypes[MAXP];
        long stotal = 0, rtotal = 0, selem[MAXP], relem[MAXP];
        for (int i = 0; i < p; i++) {
            int f = (me + i) % 2 + 1;
            scounts[i] = n * f;
            selem[i] = stotal;
            sdispls[i] = (int)(stotal * sl->slot * 4);
            stotal += scounts[i] + 1;
            stypes[i] = sl->type;
            rcounts[i] = (int)rn * f;
            relem[i] = rtotal;
            rdispls[i] = (int)(rtotal * rl->slot * 4);
            rtotal += rcounts[i] + 1;
            rtypes[i] = rl->type;
        }
        int *s = alloc_buf(sl, stotal), *r = alloc_buf(rl, rtotal);
        for (int d = 0; d < p; d++) {
            if (c->inplace)
                fill(rl, r + relem[d] * rl->slot, rcounts[d], c->opkind, me, (long)d * 4 * vals, c->salt);
            else
                fill(sl, s + selem[d] * sl->slot, scounts[d], c->opkind, me, (long)d * 4 * vals, c->salt);
        }
        rc = MPI_Alltoallw(c->inplace ? ip : s, scounts, sdispls, stypes, r, rcounts, rdispls, rtypes, comm);
        w.offset = (long)me * 4 * vals;
        for (int q = 0; q < p && good; q++) {
            w.src = q;
            good = check_range(rl, r + relem[q] * rl->slot, rcounts[q], want_single, &w, 0,
                               (long)rcounts[q] * rl->slot + 1);
        }
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "alltoall")) {
        int *s = alloc_buf(sl, (long)n * p), *r = alloc_buf(rl, rn * p);
        /* block d of rank q carries q's values at [d*vals, (d+1)*vals) */
        fill(sl, c->inplace ? r : s, (long)n * p, c->opkind, me, 0, c->salt);
        rc = MPI_Alltoall(c->inplace ? ip : s, n, sl->type, r, (int)rn, rl->type, comm);
        w.offset = (long)me * vals;
        good = check(rl, r, rn * p, want_alltoall, &w);
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "gather")) {
        int *s = alloc_buf(sl, n), *r = alloc_buf(rl, rn * p);
        fill(sl, s, n, c->opkind, me, 0, c->salt);
        int inpl = c->inplace && me == c->root;
        if (inpl)
            fill(rl, r + me * rn * rl->slot, rn, c->opkind, me, 0, c->salt);
        rc = MPI_Gather(inpl ? ip : s, n, sl->type, r, (int)rn, rl->type, c->root, comm);
        if (me == c->root)
            good = check(rl, r, rn * p, want_concat, &w);
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "scatter")) {
        /* root sends p blocks of its send layout; everyone receives its block in the receive layout */
        int *s = alloc_buf(sl, (long)n * p), *r = alloc_buf(rl, rn);
        if (me == c->root)
            fill(sl, s, (long)n * p, c->opkind, me, 0, c->salt);
        int inpl = c->inplace && me == c->root;
        rc = MPI_Scatter(s, n, sl->type, inpl ? (void *)ip : r, (int)rn, rl->type, c->root, comm);
        w.src = c->root;
        w.offset = (long)me * vals;
        if (inpl) { /* the root's own block stays where it is in the send buffer */
            good = check(sl, s, (long)n * p, want_single, &(want_ctx){c, all, p, 0, c->root, vals});
        } else {
            good = check(rl, r, rn, want_single, &w);
        }
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "gatherv")) {
        /* Rank q's block is (q % 2 + 1) times the case's count, at a displacement that leaves a gap of one
         * element after each block; the root's counts and displacements are the only ones it reads. */
        int counts[MAXP], displs[MAXP];
        long total = 0;
        for (int i = 0; i < p; i++) {
            counts[i] = (int)rn * (i % 2 + 1);
            displs[i] = (int)total;
            total += counts[i] + 1;
        }
        int mine = n * (me % 2 + 1);
        int *s = alloc_buf(sl, mine), *r = alloc_buf(rl, total);
        fill(sl, s, mine, c->opkind, me, 0, c->salt);
        int inpl = c->inplace && me == c->root;
        if (inpl)
            fill(rl, r + (long)displs[me] * rl->slot, counts[me], c->opkind, me, 0, c->salt);
        rc = MPI_Gatherv(inpl ? ip : s, mine, sl->type, r, counts, displs, rl->type, c->root, comm);
        for (int q = 0; q < p && good && me == c->root; q++) {
            w.src = q;
            good = check_range(rl, r + (long)displs[q] * rl->slot, counts[q], want_single, &w, 0,
                               (long)counts[q] * rl->slot + 1);
        }
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "scatterv")) {
        /* The root's block for rank d is (d % 2 + 1) times the case's count, with a gap of one element after
         * each, carrying the root's values from d * 4 * vals on. */
        int counts[MAXP], displs[MAXP];
        long total = 0;
        for (int i = 0; i < p; i++) {
            counts[i] = n * (i % 2 + 1);
            displs[i] = (int)total;
            total += counts[i] + 1;
        }
        int mine = (int)rn * (me % 2 + 1);
        int *s = alloc_buf(sl, total), *r = alloc_buf(rl, mine);
        if (me == c->root)
            for (int d = 0; d < p; d++)
                fill(sl, s + (long)displs[d] * sl->slot, counts[d], c->opkind, me, (long)d * 4 * vals, c->salt);
        int inpl = c->inplace && me == c->root;
        rc = MPI_Scatterv(s, counts, displs, sl->type, inpl ? (void *)ip : r, mine, rl->type, c->root, comm);
        w.src = c->root;
        w.offset = (long)me * 4 * vals;
        if (inpl) /* the root's own block stays where it is in the send buffer */
            good = check_range(sl, s + (long)displs[me] * sl->slot, counts[me], want_single, &w, 0,
                               (long)counts[me] * sl->slot + 1);
        else
            good = check(rl, r, mine, want_single, &w);
        free_buf(s);
        free_buf(r);
    } else if (!strcmp(coll, "reduce_scatter") || !strcmp(coll, "reduce_scatter_block")) {
        int block = !strcmp(coll, "reduce_scatter_block");
        int counts[MAXP];
        long total = 0, mine = 0;
        for (int i = 0; i < p; i++) {
            counts[i] = block || n == 0 ? n : n + i % 2; /* irregular for reduce_scatter */
            if (i == me)
                mine = total;
            total += counts[i];
        }
        int *s = alloc_buf(sl, total), *r = alloc_buf(sl, c->inplace ? total : counts[me]);
        fill(sl, c->inplace ? r : s, total, c->opkind, me, 0, c->salt);
        if (block)
            rc = MPI_Reduce_scatter_block(c->inplace ? ip : s, r, n, sl->type, op, comm);
        else
            rc = MPI_Reduce_scatter(c->inplace ? ip : s, r, counts, sl->type, op, comm);
        w.offset = mine * sl->per;
        /* in place: the result is at the start of the buffer; the rest is undefined, not checked */
        long got = counts[me];
        if (c->inplace) {
            int *t = alloc_buf(sl, got);
            for (long j = 0; j < got * sl->per; j++)
                t[pos(sl, j)] = r[pos(sl, j)];
            good = check(sl, t, got, want_reduce, &w);
            free_buf(t);
        } else {
            good = check(sl, r, got, want_reduce, &w);
        }
        free_buf(s);
        free_buf(r);
    }
    if (rc != MPI_SUCCESS)
        return -1;
    if (foreign_datatype)
        fprintf(stderr, "rank %d: %s: the user op was handed a datatype the caller did not pass\n", world_rank, coll);
    return good && !foreign_datatype;
}

/* ---- the case list (identical on every rank) ---- */
static ccase *cases;
static int ncases, capacity;

static void add(ccase c)
{
    if (ncases == capacity) {
        capacity = capacity ? 2 * capacity : 256;
        cases = realloc(cases, sizeof *cases * (size_t)capacity);
    }
    c.salt = ncases % 11;
    cases[ncases++] = c;
}

static int wanted(const char *coll, const char *list)
{
    if (!list)
        return 1;
    size_t n = strlen(coll);
    for (const char *p = list; (p = strstr(p, coll)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The element counts of every case grid: MEDIUM ints (18000 bytes) is above the 16 KiB where libraries switch
 * protocols and segment sizes (Intel MPI's allreduce presets 3 and 4 summed wrong from 16388 bytes at 5 ranks). */
#define MEDIUM 4500
static const int counts[] = {0, 1, 7, 1031, MEDIUM};
#define NCOUNTS (sizeof counts / sizeof *counts)

/* The layouts whose elements are one int (contiguous or strided); the others' elements hold 4 to 512 values. */
static int int_layout(int layout_index)
{
    return layout_index == L_INT || layout_index == L_VEC;
}

/* Element counts for a layout: the int layouts' 1031 is 33 for the others. */
static int count_for(int layout_index, int count)
{
    return int_layout(layout_index) || count < 100 ? count : 33;
}

/* Whether a grid count is run for a layout: MEDIUM only for the int layouts (the others' counts are already 33
 * elements of up to 2 KiB each). */
static int count_applies(int layout_index, int count)
{
    return count != MEDIUM || int_layout(layout_index);
}

/* The derived types of issue 25 (nested, struct with gaps, negative lower bound) skip the halves of a
 * split below 4 ranks: at 2 ranks those are size-1 communicators, where no algorithm runs. From 4 ranks on they
 * run there (Intel MPI's intercommunicator allreduce broke the nested type inside its 2- and 3-rank groups at 5). */
static int derived_skips_halves(int layout_index)
{
    return layout_index >= L_NEST && world_size < 4;
}

/* The non-blocking collectives (issue 41), only when --colls names them (the blocking suite's runs stay as
 * they were): the blocking cases' grid (communicators but the intercommunicator, in place and not, the same
 * types and ops, counts 0, 1, 7, 1031 and 4500 (int layouts), roots 0 and last, ranks with different types of
 * one signature), each call completed by MPI_Wait; and NB_REQS requests of one case outstanding on one
 * communicator, completed by MPI_Waitall, by MPI_Wait in reverse order and by MPI_Test loops, on MPI_COMM_WORLD
 * and the reversed copy, in place and not, counts 7, 1031 and 4500, ints and the nested type (the matrix product
 * on the reductions). */
static int nb_wanted(const char *coll, const char *only)
{
    return only != NULL && wanted(coll, only);
}

static void build_nonblocking_cases(const char *only, const int (*red_types)[2], size_t n_red,
                                    const int (*move_types)[2], size_t n_move, const int (*mixed_types)[2],
                                    const int (*mixed_counts)[3])
{
    static const char *colls[] = {"iallreduce", "ibcast", "iallgather", "ialltoall"};
    for (size_t k = 0; k < sizeof colls / sizeof *colls; k++) {
        const char *coll = colls[k];
        if (!nb_wanted(coll, only))
            continue;
        int reduction = !strcmp(coll, "iallreduce"), bcast = !strcmp(coll, "ibcast");
        size_t ntypes = reduction ? n_red : n_move;
        for (int completion = NB_WAIT; completion < NCOMPLETION; completion++)
            for (int cm = C_WORLD; cm <= C_HALF; cm++) {
                int several = completion != NB_WAIT;
                if (several && cm == C_HALF)
                    continue;
                for (int inpl = 0; inpl < (bcast ? 1 : 2); inpl++)
                    for (size_t t = 0; t < ntypes; t++) {
                        int sl = reduction ? red_types[t][0] : move_types[t][0];
                        int rl = reduction ? red_types[t][0] : move_types[t][1];
                        int opk = reduction ? red_types[t][1] : OP_SUM;
                        if ((inpl || bcast) && sl != rl)
                            continue;
                        if (derived_skips_halves(sl) && cm == C_HALF)
                            continue;
                        /* several requests: ints, the nested type, and the matrix product (reductions) */
                        if (several && !(sl == L_INT || sl == L_NEST) && !(reduction && sl == L_MAT))
                            continue;
                        if (several && reduction && sl == L_NEST && opk != OP_USUM)
                            continue;
                        for (size_t q = several ? 2 : 0; q < NCOUNTS; q++) {
                            if (!count_applies(sl, counts[q]))
                                continue;
                            for (int rt = 0; rt < (bcast ? 2 : 1); rt++)
                                add((ccase){coll, cm, inpl, sl, rl, opk, count_for(sl, counts[q]), rt ? -1 : 0, 0, 0,
                                            completion});
                        }
                    }
            }
        if (reduction)
            continue;
        for (size_t t = 0; t < 3; t++)
            for (size_t q = 0; q < 3 && mixed_counts[t][q] > 0; q++)
                for (int rt = 0; rt < (bcast ? 2 : 1); rt++)
                    add((ccase){coll, C_WORLD, 0, mixed_types[t][0], mixed_types[t][1], OP_SUM, mixed_counts[t][q],
                                rt ? -1 : 0, 0, 1, NB_WAIT});
    }
}

static void build_cases(const char *only)
{
    static const char *reductions[] = {"allreduce", "reduce", "reduce_scatter", "reduce_scatter_block"};
    static const char *moves[] = {"bcast",   "allgather", "allgatherv", "alltoall", "gather",
                                  "scatter", "alltoallv", "gatherv",    "scatterv", "alltoallw"};
    static const int red_types[][2] = {{L_INT, OP_SUM},    {L_INT, OP_USUM},     {L_MAT, OP_MATMUL},
                                       {L_MATV, OP_MATMUL}, {L_NEST, OP_USUM},    {L_NEST, OP_MATMUL},
                                       {L_STRUCT, OP_USUM}, {L_NEGLB, OP_USUM}};
    static const int move_types[][2] = {{L_INT, L_INT},       {L_VEC, L_VEC},     {L_VEC, L_INT},
                                        {L_NEST, L_NEST},     {L_STRUCT, L_STRUCT}, {L_NEGLB, L_NEGLB},
                                        {L_NEST, L_INT}};
    const size_t n_red = sizeof red_types / sizeof *red_types, n_move = sizeof move_types / sizeof *move_types;
    int has_inter[] = {0, 0, 0, 1};
    for (int cm = 0; cm < NCOMM; cm++) {
        if (wanted("barrier", only))
            add((ccase){"barrier", cm, 0, L_INT, L_INT, OP_SUM, 0, 0, 0, 0, NB_NONE});
    }
    for (size_t k = 0; k < sizeof reductions / sizeof *reductions; k++) {
        const char *coll = reductions[k];
        if (!wanted(coll, only))
            continue;
        int inter_ok = !strcmp(coll, "allreduce");
        for (int cm = 0; cm < NCOMM; cm++) {
            if (has_inter[cm] && !inter_ok)
                continue;
            for (int inpl = 0; inpl < (has_inter[cm] ? 1 : 2); inpl++)
                for (size_t t = 0; t < n_red; t++) {
                    if (derived_skips_halves(red_types[t][0]) && cm == C_HALF)
                        continue;
                    for (size_t q = 0; q < NCOUNTS; q++) {
                        if (!count_applies(red_types[t][0], counts[q]))
                            continue;
                        int count = count_for(red_types[t][0], counts[q]);
                        int nroots = is_rooted(coll) ? 2 : 1;
                        for (int rt = 0; rt < nroots; rt++)
                            add((ccase){coll, cm, inpl, red_types[t][0], red_types[t][0], red_types[t][1], count,
                                        rt ? -1 : 0, 0, 0, NB_NONE});
                    }
                }
        }
    }
    for (size_t k = 0; k < sizeof moves / sizeof *moves; k++) {
        const char *coll = moves[k];
        if (!wanted(coll, only))
            continue;
        int inter_ok = !strcmp(coll, "bcast") || !strcmp(coll, "allgather");
        int inplace_ok = strcmp(coll, "bcast") != 0;
        for (int cm = 0; cm < NCOMM; cm++) {
            if (has_inter[cm] && !inter_ok)
                continue;
            for (int inpl = 0; inpl < (inplace_ok && !has_inter[cm] ? 2 : 1); inpl++)
                for (size_t t = 0; t < n_move; t++) {
                    /* in place has one buffer and one type; a broadcast has one type */
                    if ((inpl || !strcmp(coll, "bcast")) && move_types[t][0] != move_types[t][1])
                        continue;
                    if (derived_skips_halves(move_types[t][0]) && cm == C_HALF)
                        continue;
                    for (size_t q = 0; q < NCOUNTS; q++) {
                        if (!count_applies(move_types[t][0], counts[q]))
                            continue;
                        int nroots = is_rooted(coll) && !has_inter[cm] ? 2 : 1;
                        for (int rt = 0; rt < nroots; rt++)
                            add((ccase){coll, cm, inpl, move_types[t][0], move_types[t][1], OP_SUM,
                                        count_for(move_types[t][0], counts[q]), rt ? -1 : 0, 0, 0, NB_NONE});
                    }
                }
        }
    }
    /* Issue 38: ranks with different types of the same signature (a root's plain ints received as derived
     * elements, and the reverse): the element counts differ between ranks, the bytes do not. */
    static const int mixed_types[][2] = {{L_VEC, L_INT}, {L_NEST, L_INT}, {L_NEGLB, L_INT}};
    static const int mixed_counts[][3] = {{1, 7, 1031}, {1, 2, 0}, {1, 7, 33}};
    for (size_t k = 0; k < sizeof moves / sizeof *moves; k++) {
        const char *coll = moves[k];
        if (!wanted(coll, only))
            continue;
        for (size_t t = 0; t < sizeof mixed_types / sizeof *mixed_types; t++)
            for (size_t q = 0; q < 3 && mixed_counts[t][q] > 0; q++)
                for (int rt = 0; rt < (is_rooted(coll) ? 2 : 1); rt++)
                    add((ccase){coll, C_WORLD, 0, mixed_types[t][0], mixed_types[t][1], OP_SUM, mixed_counts[t][q],
                                rt ? -1 : 0, 0, 1, NB_NONE});
    }
    /* Issue 25's report as it was: 512 elements of the nested types, broadcast (1 MiB and 6 KiB of data). */
    if (wanted("bcast", only))
        for (int t = L_NEST; t <= L_STRUCT; t++)
            for (int rt = 0; rt < 2; rt++)
                add((ccase){"bcast", C_WORLD, 0, t, t, OP_SUM, 512, rt ? -1 : 0, 0, 0, NB_NONE});
    build_nonblocking_cases(only, red_types, n_red, move_types, n_move, mixed_types, mixed_counts);
}

static void describe(const ccase *c, int root, char *out, size_t len)
{
    const char *ops[] = {"sum", "usersum", "matmul"};
    char types[32];
    if (c->send_layout == c->recv_layout)
        snprintf(types, sizeof types, "%s", lay[c->send_layout].name);
    else if (c->mixed)
        snprintf(types, sizeof types, "%s|%s", lay[c->send_layout].name, lay[c->recv_layout].name);
    else
        snprintf(types, sizeof types, "%s>%s", lay[c->send_layout].name, lay[c->recv_layout].name);
    int reduction = strstr(c->coll, "reduce") != NULL;
    snprintf(out, len, "%s %s %s %s%s%s %d %d%s%s", c->coll, comm_names[c->comm], c->inplace ? "inplace" : "copy",
             types, reduction ? "/" : "", reduction ? ops[c->opkind] : "", c->count, root,
             c->completion ? " " : "", completion_names[c->completion]);
}

static void write_cvars(const char **specs, int n)
{
    int provided;
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    for (int i = 0; i < n; i++) {
        char name[256];
        const char *eq = strchr(specs[i], '=');
        int index, count, value = eq ? atoi(eq + 1) : 0;
        MPI_T_cvar_handle handle;
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - specs[i]) : 0, specs[i]);
        if (!eq || MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS ||
            MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) != MPI_SUCCESS ||
            MPI_T_cvar_write(handle, &value) != MPI_SUCCESS) {
            fprintf(stderr, "cannot write control variable %s\n", specs[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        MPI_T_cvar_handle_free(&handle);
    }
}

int main(int argc, char **argv)
{
    const char *only = NULL, *cvars[16], *skip = NULL, *log_path = NULL;
    int start = 0, list = 0, ncvars = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--colls") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--start") && i + 1 < argc)
            start = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else if (!strcmp(argv[i], "--skip") && i + 1 < argc)
            skip = argv[++i];
        else if (!strcmp(argv[i], "--cvar") && i + 1 < argc && ncvars < 16)
            cvars[ncvars++] = argv[++i];
        else if (!strcmp(argv[i], "--log") && i + 1 < argc)
            log_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--colls a,b] [--start INDEX] [--skip I,J] [--list] [--cvar NAME=INT] "
                            "[--log PATH]\n", argv[0]);
            return 2;
        }
    }
#ifdef TUNEMPI_HEAP_CHECK
    /* glibc's malloc checking (libc_malloc_debug, linked in, reads MALLOC_CHECK_ when the process starts):
     * a library writing past or before a buffer it allocated aborts when that buffer is freed, usually in
     * the call that did it. Set here, before MPI starts, by running this program again: launchers do not
     * all pass a variable on to the ranks. */
    if (getenv("MALLOC_CHECK_") == NULL) {
        setenv("MALLOC_CHECK_", "3", 1);
        execv("/proc/self/exe", argv);
    }
#endif
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size > MAXP || world_size < 2) {
        if (world_rank == 0)
            fprintf(stderr, "run with 2..%d ranks\n", MAXP);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (ncvars > 0)
        write_cvars(cvars, ncvars);
    make_layouts();
    build_cases(only);
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[C_WORLD]);
    MPI_Comm_split(MPI_COMM_WORLD, 0, world_size - world_rank, &comms[C_REV]);
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &comms[C_HALF]);
    /* the halves' leaders are world ranks 0 and 1 */
    MPI_Intercomm_create(comms[C_HALF], 0, MPI_COMM_WORLD, world_rank % 2 ? 0 : 1, 77, &comms[C_INTER]);
    for (int i = 0; i < NCOMM; i++)
        MPI_Comm_set_errhandler(comms[i], MPI_ERRORS_RETURN);
    if (world_rank == 0 && !list) {
        if (log_path && !(log_file = fopen(log_path, "w"))) {
            perror(log_path);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        report("READY\n");
    }
    /* No rank starts a case before READY is out: a case that crashes at once on another rank would
     * otherwise take the launch down before rank 0 says it got through the set-up (MPICH 5.0.2 at 8 ranks,
     * a crash in the first case after a restart), and the driver would count every case left as SETUP.
     * Point-to-point, like the verdicts: never through a collective under test. */
    if (!list) {
        int go = 1;
        if (world_rank == 0)
            for (int r = 1; r < world_size; r++)
                MPI_Send(&go, 1, MPI_INT, r, 4999, MPI_COMM_WORLD);
        else
            MPI_Recv(&go, 1, MPI_INT, 0, 4999, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    char *skipped = calloc((size_t)ncases + 1, 1);
    for (const char *p = skip; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
        int k = atoi(p);
        if (k >= 0 && k < ncases)
            skipped[k] = 1;
    }
    for (int i = start; i < ncases; i++) {
        if (skipped[i])
            continue;
        ccase c = cases[i];
        int csize;
        MPI_Comm_size(comms[c.comm], &csize);
        int root = c.root < 0 ? csize - 1 : c.root;
        c.root = root;
        char what[160];
        describe(&c, root, what, sizeof what);
        if (list) {
            if (world_rank == 0)
                printf("L %d %s\n", i, what);
            continue;
        }
        int verdict = run_case(&c), worst = verdict;
        if (world_rank == 0) {
            for (int r = 1; r < world_size; r++) {
                int v;
                MPI_Recv(&v, 1, MPI_INT, r, 5000, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (v < worst || (v == 0 && worst == 1))
                    worst = v;
            }
            report("R %d %s %s\n", i, what, worst == 1 ? "ok" : worst == 0 ? "FAIL" : "ERROR");
        } else {
            MPI_Send(&verdict, 1, MPI_INT, 0, 5000, MPI_COMM_WORLD);
        }
        n_ok += worst == 1;
        n_fail += worst == 0;
        n_err += worst < 0;
    }
    if (world_rank == 0) {
        report("DONE %d\n", ncases);
        if (log_file)
            fclose(log_file);
    }
    MPI_Comm_free(&comms[C_WORLD]);
    MPI_Comm_free(&comms[C_INTER]);
    MPI_Comm_free(&comms[C_HALF]);
    MPI_Comm_free(&comms[C_REV]);
    if (ncvars > 0)
        MPI_T_finalize();
    MPI_Finalize();
    return 0;
}
