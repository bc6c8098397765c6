/*
 * tunempi's collective conformance suite: every collective tunempi can switch, checked against a result
 * computed locally, over the argument shapes that select or break algorithms:
 *
 *   in place and not; MPI_SUM, a commutative user op, a NON-commutative user op (2x2 matrix product,
 *   on a contiguous and on a strided derived type); contiguous ints, a strided vector type, and a
 *   strided send type received as plain ints; counts 0, 1, 7 and 1031; roots 0 and the last rank;
 *   MPI_COMM_WORLD, a reversed-order copy, the halves of a split and (where the collective has an
 *   intercommunicator form) an intercommunicator between the halves.
 *
 * Every case is checked on every rank (values and the untouched holes of strided receive buffers); world
 * rank 0 collects the verdicts by point-to-point messages (never through a collective under test) and
 * prints one line per case, flushed at once, so a driver knows where a crashed launch stopped:
 *
 *   READY                      (the communicators under test exist)
 *   R <index> <collective> <comm> <inplace|copy> <datatype/op> <count> <root> ok|FAIL|ERROR
 *   DONE <cases>
 *
 *   coll_conformance [--colls allreduce,bcast,...] [--start INDEX] [--skip I,J,...] [--list] [--cvar NAME=INT ...]
 *
 * ERROR: the call returned an error code (communicators use MPI_ERRORS_RETURN: MPICH's fallback=error
 * reports an algorithm that cannot take the arguments this way). --start skips the cases before INDEX
 * (a driver restarts after a crash there); --skip leaves cases out (a driver skips the ones that crash the
 * library on its own, already reported by its default run). --list prints the cases without running them. --cvar writes an
 * int control variable through MPI_T on every rank right after MPI_Init, before the communicators under
 * test are created (how a run-time switch is made; Open MPI honours it on communicators created after).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0x7eadbeef
#define MAXP 64

/* ---- layouts: how the signature (a sequence of 4-byte values) sits in memory ---- */
typedef struct {
    const char *name;
    MPI_Datatype type;
    int per;     /* signature values per element */
    int slot;    /* ints per element extent */
    int off[4];  /* where each value of an element sits in its slot */
} layout;

enum { L_INT, L_VEC, L_MAT, L_MATV, NLAYOUT };
static layout lay[NLAYOUT];

enum { OP_SUM, OP_USUM, OP_MATMUL };
static MPI_Op op_usum, op_matmul;

static int world_rank, world_size;
static long n_ok, n_fail, n_err;

static void matmul_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const unsigned *a = in;
    unsigned *b = inout;
    int strided = *dt == lay[L_MATV].type;
    int slot = strided ? 8 : 4, st = strided ? 2 : 1;
    for (int m = 0; m < *len; m++) {
        const unsigned *x = a + m * slot;
        unsigned *y = b + m * slot;
        unsigned r0 = x[0] * y[0] + x[1 * st] * y[2 * st], r1 = x[0] * y[1 * st] + x[1 * st] * y[3 * st];
        unsigned r2 = x[2 * st] * y[0] + x[3 * st] * y[2 * st], r3 = x[2 * st] * y[1 * st] + x[3 * st] * y[3 * st];
        y[0] = r0;
        y[1 * st] = r1;
        y[2 * st] = r2;
        y[3 * st] = r3;
    }
}

static void usum_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const int *a = in;
    int *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] += a[i];
}

static void make_layouts(void)
{
    MPI_Datatype v;
    lay[L_INT] = (layout){"int", MPI_INT, 1, 1, {0}};
    MPI_Type_vector(2, 1, 2, MPI_INT, &v);
    MPI_Type_create_resized(v, 0, 4 * sizeof(int), &lay[L_VEC].type);
    MPI_Type_free(&v);
    MPI_Type_commit(&lay[L_VEC].type);
    lay[L_VEC].name = "vec";
    lay[L_VEC].per = 2;
    lay[L_VEC].slot = 4;
    lay[L_VEC].off[0] = 0;
    lay[L_VEC].off[1] = 2;
    MPI_Type_contiguous(4, MPI_UNSIGNED, &lay[L_MAT].type);
    MPI_Type_commit(&lay[L_MAT].type);
    lay[L_MAT].name = "mat";
    lay[L_MAT].per = 4;
    lay[L_MAT].slot = 4;
    for (int k = 0; k < 4; k++)
        lay[L_MAT].off[k] = k;
    MPI_Type_vector(4, 1, 2, MPI_UNSIGNED, &v);
    MPI_Type_create_resized(v, 0, 8 * sizeof(unsigned), &lay[L_MATV].type);
    MPI_Type_free(&v);
    MPI_Type_commit(&lay[L_MATV].type);
    lay[L_MATV].name = "matv";
    lay[L_MATV].per = 4;
    lay[L_MATV].slot = 8;
    for (int k = 0; k < 4; k++)
        lay[L_MATV].off[k] = 2 * k;
    MPI_Op_create(usum_fn, 1, &op_usum);
    MPI_Op_create(matmul_fn, 0, &op_matmul);
}

/* Position in memory of signature value j. */
static inline long pos(const layout *l, long j)
{
    return (j / l->per) * l->slot + l->off[j % l->per];
}

static int *alloc_buf(const layout *l, long elems)
{
    long n = elems * l->slot + 1;
    int *b = malloc(sizeof(int) * (size_t)n);
    for (long i = 0; i < n; i++)
        b[i] = SENTINEL;
    return b;
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

static int check(const layout *l, const int *b, long elems, want_fn want, const void *ctx)
{
    long nvals = elems * l->per, k = 0;
    for (long i = 0; i < elems * l->slot + 1; i++) {
        if (k < nvals && i == pos(l, k)) {
            if (b[i] != want(k, ctx))
                return 0;
            k++;
        } else if (b[i] != SENTINEL) {
            return 0;
        }
    }
    return 1;
}

/* ---- cases ---- */
enum { C_WORLD, C_REV, C_HALF, C_INTER, NCOMM };
static const char *comm_names[NCOMM] = {"world", "rev", "half", "inter"};
static MPI_Comm comms[NCOMM];

typedef struct {
    const char *coll;
    int comm, inplace, send_layout, recv_layout, opkind;
    int count, root, salt;
} ccase;

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
    return !strcmp(coll, "bcast") || !strcmp(coll, "reduce") || !strcmp(coll, "gather") || !strcmp(coll, "scatter");
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
    long vals = (long)n * sl->per;            /* signature values per rank-block */
    long rn = vals / rl->per;                 /* elements of the receive layout per block */
    MPI_Op op = c->opkind == OP_SUM ? MPI_SUM : c->opkind == OP_USUM ? op_usum : op_matmul;
    const char *coll = c->coll;
    int rc = MPI_SUCCESS, good = 1;
    want_ctx w = {c, all, p, 0, 0, vals};
    const void *ip = MPI_IN_PLACE;

    if (!strcmp(coll, "barrier")) {
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
        free(s);
        free(r);
    } else if (!strcmp(coll, "reduce")) {
        int *s = alloc_buf(sl, n), *r = alloc_buf(sl, n);
        fill(sl, s, n, c->opkind, me, 0, c->salt);
        int inpl = c->inplace && me == c->root;
        if (inpl)
            fill(sl, r, n, c->opkind, me, 0, c->salt);
        rc = MPI_Reduce(inpl ? ip : s, r, n, sl->type, op, c->root, comm);
        if (me == c->root)
            good = check(sl, r, n, want_reduce, &w);
        free(s);
        free(r);
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
        free(b);
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
        free(s);
        free(r);
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
            good = check(rl, r + (long)displs[i] * rl->slot, rn, want_single, &w);
        }
        free(s);
        free(r);
    } else if (!strcmp(coll, "alltoall")) {
        int *s = alloc_buf(sl, (long)n * p), *r = alloc_buf(rl, rn * p);
        /* block d of rank q carries q's values at [d*vals, (d+1)*vals) */
        fill(sl, c->inplace ? r : s, (long)n * p, c->opkind, me, 0, c->salt);
        rc = MPI_Alltoall(c->inplace ? ip : s, n, sl->type, r, (int)rn, rl->type, comm);
        w.offset = (long)me * vals;
        good = check(rl, r, rn * p, want_alltoall, &w);
        free(s);
        free(r);
    } else if (!strcmp(coll, "gather")) {
        int *s = alloc_buf(sl, n), *r = alloc_buf(rl, rn * p);
        fill(sl, s, n, c->opkind, me, 0, c->salt);
        int inpl = c->inplace && me == c->root;
        if (inpl)
            fill(rl, r + me * rn * rl->slot, rn, c->opkind, me, 0, c->salt);
        rc = MPI_Gather(inpl ? ip : s, n, sl->type, r, (int)rn, rl->type, c->root, comm);
        if (me == c->root)
            good = check(rl, r, rn * p, want_concat, &w);
        free(s);
        free(r);
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
        free(s);
        free(r);
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
            free(t);
        } else {
            good = check(sl, r, got, want_reduce, &w);
        }
        free(s);
        free(r);
    }
    if (rc != MPI_SUCCESS)
        return -1;
    return good;
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

static void build_cases(const char *only)
{
    static const char *reductions[] = {"allreduce", "reduce", "reduce_scatter", "reduce_scatter_block"};
    static const char *moves[] = {"bcast", "allgather", "allgatherv", "alltoall", "gather", "scatter"};
    static const int counts[] = {0, 1, 7, 1031};
    static const int red_types[][2] = {{L_INT, OP_SUM}, {L_INT, OP_USUM}, {L_MAT, OP_MATMUL}, {L_MATV, OP_MATMUL}};
    static const int move_types[][2] = {{L_INT, L_INT}, {L_VEC, L_VEC}, {L_VEC, L_INT}};
    int has_inter[] = {0, 0, 0, 1};
    for (int cm = 0; cm < NCOMM; cm++) {
        if (wanted("barrier", only))
            add((ccase){"barrier", cm, 0, L_INT, L_INT, OP_SUM, 0, 0, 0});
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
                for (size_t t = 0; t < 4; t++)
                    for (size_t q = 0; q < 4; q++) {
                        int count = red_types[t][0] == L_INT ? counts[q] : (counts[q] > 100 ? 33 : counts[q]);
                        int nroots = is_rooted(coll) ? 2 : 1;
                        for (int rt = 0; rt < nroots; rt++)
                            add((ccase){coll, cm, inpl, red_types[t][0], red_types[t][0], red_types[t][1], count,
                                        rt ? -1 : 0, 0});
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
                for (size_t t = 0; t < 3; t++) {
                    /* in place has one buffer and one type; a broadcast has one type */
                    if ((inpl || !strcmp(coll, "bcast")) && move_types[t][0] != move_types[t][1])
                        continue;
                    for (size_t q = 0; q < 4; q++) {
                        int nroots = is_rooted(coll) && !has_inter[cm] ? 2 : 1;
                        for (int rt = 0; rt < nroots; rt++)
                            add((ccase){coll, cm, inpl, move_types[t][0], move_types[t][1], OP_SUM, counts[q],
                                        rt ? -1 : 0, 0});
                    }
                }
        }
    }
}

static void describe(const ccase *c, int root, char *out, size_t len)
{
    const char *ops[] = {"sum", "usersum", "matmul"};
    char types[32];
    if (c->send_layout == c->recv_layout)
        snprintf(types, sizeof types, "%s", lay[c->send_layout].name);
    else
        snprintf(types, sizeof types, "%s>%s", lay[c->send_layout].name, lay[c->recv_layout].name);
    int reduction = strstr(c->coll, "reduce") != NULL;
    snprintf(out, len, "%s %s %s %s%s%s %d %d", c->coll, comm_names[c->comm], c->inplace ? "inplace" : "copy",
             types, reduction ? "/" : "", reduction ? ops[c->opkind] : "", c->count, root);
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
    const char *only = NULL, *cvars[16], *skip = NULL;
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
        else {
            fprintf(stderr, "usage: %s [--colls a,b] [--start INDEX] [--list]\n", argv[0]);
            return 2;
        }
    }
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
        printf("READY\n");
        fflush(stdout);
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
            printf("R %d %s %s\n", i, what, worst == 1 ? "ok" : worst == 0 ? "FAIL" : "ERROR");
            fflush(stdout);
        } else {
            MPI_Send(&verdict, 1, MPI_INT, 0, 5000, MPI_COMM_WORLD);
        }
        n_ok += worst == 1;
        n_fail += worst == 0;
        n_err += worst < 0;
    }
    if (world_rank == 0) {
        printf("DONE %d\n", ncases);
        fflush(stdout);
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
