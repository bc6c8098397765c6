/*
 * Profile mode: per-rank tables filled with no communication at all; at MPI_Finalize the ranks agree
 * on which host every world rank runs on (one allgather of host hashes), turn each communicator shape
 * into (nodes, ppn), and send their tables to rank 0, which merges them into one JSON file.
 *
 * Settings (environment, echoed in the output header):
 *   TUNEMPI_PROFILE_OUT       output path (default tunempi-profile.<pid of rank 0>.json)
 *   TUNEMPI_FAKE_PPN          pretend world rank r runs on node r / N (tmpi_host_name in tmpi_core.c)
 *   TUNEMPI_PVARS=1           also read every MPI_T performance variable the library offers (numeric, bound
 *                             to nothing or to a communicator: MPI_COMM_WORLD) from MPI_Init to MPI_Finalize,
 *                             summed and maxed over the ranks into "pvars" (the `rl` search's state)
 */
#include "tmpi.h"
#include "tmpi_counts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define TMPI_EXACT_MAX 8
#define TMPI_P2P_BUCKETS 7 /* <=2 KiB, (2,4], (4,8], (8,16], (16,32], (32,64] KiB, above */

typedef struct {
    uint64_t key;
    int used;
    int op, shape, bucket;
    uint64_t calls, bytes, time, min, max; /* times in ticks */
    uint64_t completed, completion, wait; /* non-blocking: completions seen, start -> completion, waited */
    uint64_t blocked; /* non-blocking: the whole time of the waits and tests that named it (not shared) */
    uint64_t shapes[TMPI_COUNTS_SHAPES]; /* vector collectives: calls per shape of their counts (tmpi_counts.h) */
    uint64_t op_calls, noncommutative; /* reductions: calls with an MPI_Op, and with a non-commutative one */
    uint64_t typed_calls, derived; /* calls whose datatypes the interposer sees, and with a derived one among them */
    int n_exact; /* -1: more than TMPI_EXACT_MAX distinct sizes */
    uint64_t exact_size[TMPI_EXACT_MAX], exact_calls[TMPI_EXACT_MAX];
} tmpi_coll_entry;

/* What ranks send to rank 0: fixed layout, same binary on every rank. */
typedef struct {
    int32_t op, comm_size, nodes, ppn, bucket, n_exact, ranks, pad;
    uint64_t calls, bytes, time_ns, min_ns, max_ns;
    uint64_t completed, completion_ns, wait_ns, blocked_ns;
    uint64_t shapes[TMPI_COUNTS_SHAPES];
    uint64_t op_calls, noncommutative;
    uint64_t typed_calls, derived;
    uint64_t exact_size[TMPI_EXACT_MAX], exact_calls[TMPI_EXACT_MAX];
} tmpi_record;

typedef struct {
    char host[TMPI_HOST_MAX];
    uint64_t wall_ns, mpi_ns, coll_ns, p2p_ns, coll_calls, send_calls;
    uint64_t cpu_ns, span_ns; /* the process's CPU time over span_ns of wall time since recording began */
    uint64_t p2p_calls[TMPI_P2P_BUCKETS], p2p_bytes[TMPI_P2P_BUCKETS];
} tmpi_rank_summary;

/* This rank's counters; times in clock ticks until finalize converts them. */
typedef struct {
    uint64_t mpi, coll, p2p, coll_calls, send_calls;
    uint64_t p2p_calls[TMPI_P2P_BUCKETS], p2p_bytes[TMPI_P2P_BUCKETS];
} tmpi_rank_counters;

static tmpi_coll_entry *table;
static size_t table_capacity, table_used;

/* Was this rank on a CPU while it ran? MPI libraries poll while they wait, so a rank's CPU time is close
 * to its wall time unless the machine was shared (a descheduled rank makes the others wait in MPI, which
 * inflates the shares the profile reports) or the program sleeps or waits for I/O. Taken from here (start
 * or reset) to MPI_Finalize's entry, pauses included. */
static uint64_t cpu_at_start;

static void cpu_clock_start(void)
{
    cpu_at_start = tmpi_process_cpu_ns();
}
static tmpi_coll_entry *last_entry; /* loops repeat the same call: skip the hash probe */
static tmpi_rank_counters me;
static int paused;
static uint64_t paused_since, paused_total;

/* ---------------------------------------------------------------- recording (hot path) ---- */

static int tmpi_size_bucket(uint64_t bytes)
{
    if (bytes == 0)
        return -1;
    return bytes == 1 ? 0 : 64 - __builtin_clzll(bytes - 1); /* sizes in (2^(b-1), 2^b] */
}

static int tmpi_p2p_bucket(uint64_t bytes)
{
    if (bytes <= 2048)
        return 0;
    for (int b = 1; b < TMPI_P2P_BUCKETS - 1; b++)
        if (bytes <= (2048u << b))
            return b;
    return TMPI_P2P_BUCKETS - 1;
}

static size_t tmpi_slot(uint64_t key, size_t capacity)
{
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ULL;
    key ^= key >> 29;
    return (size_t)key & (capacity - 1);
}

static void tmpi_table_grow(void)
{
    size_t old_capacity = table_capacity;
    tmpi_coll_entry *old = table;
    table_capacity = table_capacity ? 2 * table_capacity : 256;
    table = calloc(table_capacity, sizeof *table);
    if (table == NULL) {
        tmpi_warn("out of memory");
        abort();
    }
    for (size_t i = 0; i < old_capacity; i++) {
        if (!old[i].used)
            continue;
        size_t j = tmpi_slot(old[i].key, table_capacity);
        while (table[j].used)
            j = (j + 1) & (table_capacity - 1);
        table[j] = old[i];
    }
    free(old);
    last_entry = NULL;
}

static tmpi_coll_entry *tmpi_entry(int op, int shape, int bucket)
{
    uint64_t key = ((uint64_t)(uint32_t)shape << 24) | ((uint64_t)(bucket + 1) << 12) | (uint64_t)op;
    if (last_entry && last_entry->key == key)
        return last_entry;
    if (table_capacity) {
        size_t j = tmpi_slot(key, table_capacity);
        while (table[j].used) {
            if (table[j].key == key)
                return last_entry = &table[j];
            j = (j + 1) & (table_capacity - 1);
        }
    }
    if (2 * (table_used + 1) > table_capacity)
        tmpi_table_grow();
    size_t j = tmpi_slot(key, table_capacity);
    while (table[j].used)
        j = (j + 1) & (table_capacity - 1);
    tmpi_coll_entry *e = &table[j];
    memset(e, 0, sizeof *e);
    e->used = 1;
    e->key = key;
    e->op = op;
    e->shape = shape;
    e->bucket = bucket;
    e->min = UINT64_MAX;
    table_used++;
    return last_entry = e;
}

static void tmpi_add_exact(uint64_t *sizes, uint64_t *calls, int *n, uint64_t size, uint64_t count)
{
    if (*n < 0)
        return;
    for (int i = 0; i < *n; i++)
        if (sizes[i] == size) {
            calls[i] += count;
            return;
        }
    if (*n == TMPI_EXACT_MAX) {
        *n = -1;
        return;
    }
    sizes[*n] = size;
    calls[*n] = count;
    (*n)++;
}

/* The shape of a vector call's counts as this rank passes them (tmpi_counts.h; alltoallv: the stronger of its
 * send and receive counts' shapes), or -1 where it passes none that are significant: a rooted collective
 * (gatherv, scatterv) off its root, and intercommunicators (their arrays span the remote group, or the local
 * one for reduce_scatter: not classified). */
static int tmpi_call_shape(const tmpi_call *call, const tmpi_comm_info *info)
{
    if (info->inter || (call->rooted && call->root != info->rank))
        return -1;
    int shape = -1;
    for (int k = 0; k < 2; k++)
        if (call->counts[k] != NULL)
            shape = tmpi_counts_stronger(shape, tmpi_counts_shape(call->counts[k], info->size));
    return shape;
}

static void tmpi_record_p2p(uint64_t bytes)
{
    int b = tmpi_p2p_bucket(bytes);
    me.p2p_calls[b]++;
    me.p2p_bytes[b] += bytes;
    me.send_calls++;
}

/* ---------------------------------------------------------------- non-blocking collectives ---- */
/*
 * A started non-blocking collective (MPI_Iallreduce, ...) stays in the in-flight table (tmpi.h) until a wait
 * or test returns it completed. Then its record gets the time from the start to that return (completion) and
 * the time the application spent in the waits and tests that named it (a call naming n active requests gives
 * each 1/n of its time: wait) and their whole time (blocked: the application was not computing then, whichever
 * request it waited for; completion - start - blocked is its computation between start and wait).
 */
typedef struct {
    int op, shape, bucket;
    uint64_t t_start, waited, blocked; /* ticks; blocked: the waits' and tests' whole time, not shared */
} tmpi_nbc;

static tmpi_inflight nbc = {.payload_size = sizeof(tmpi_nbc)};

static void nbc_start(const tmpi_call *call, int shape, int bucket)
{
    tmpi_nbc *n = tmpi_inflight_add(&nbc, *call->requests);
    if (n != NULL)
        *n = (tmpi_nbc){.op = call->op, .shape = shape, .bucket = bucket, .t_start = call->t_begin};
}

static tmpi_coll_entry *tmpi_entry(int op, int shape, int bucket);

/* After a wait or test: each collective of the snapshot gets its share of the call's time; the completed
 * ones are recorded (unless recording is paused) and forgotten. */
static void nbc_after_wait(const tmpi_call *call, int record)
{
    if (nbc.seen == 0)
        return;
    uint64_t share = (call->t_end - call->t_begin) / (uint64_t)(nbc.live > 0 ? nbc.live : 1);
    for (size_t k = 0; k < nbc.seen; k++) {
        tmpi_nbc *n = tmpi_inflight_payload(&nbc, nbc.seen_list[k].slot);
        n->waited += share;
        n->blocked += call->t_end - call->t_begin;
        if (!record || !tmpi_inflight_completed(&nbc, call, k))
            continue;
        tmpi_coll_entry *e = tmpi_entry(n->op, n->shape, n->bucket);
        e->completed++;
        e->completion += call->t_end - n->t_start;
        e->wait += n->waited;
        e->blocked += n->blocked;
        me.coll += n->waited; /* time in collectives includes waiting for them */
    }
    tmpi_inflight_drop_completed(&nbc, call);
}

/* Whether a reduction's operation commutes (what tune --from-profile vouches for: Open MPI's ring allreduce
 * needs it). The common predefined ones without a call into the library; every predefined op commutes. */
static int tmpi_op_commutes(MPI_Op op)
{
    if (op == MPI_SUM || op == MPI_MAX || op == MPI_MIN)
        return 1;
    int commute = 0;
    PMPI_Op_commutative(op, &commute);
    return commute;
}

/* Whether a datatype is a predefined one (what tune --from-profile vouches for: predefined types on every call
 * are contiguous, start at the buffer pointer and count alike on every rank). The last answer is kept: a
 * predefined handle never names a derived type, and a freed derived one's handle only ever names another. */
static int tmpi_type_predefined(MPI_Datatype type)
{
    static MPI_Datatype last = MPI_DATATYPE_NULL;
    static int last_predefined = 1;
    if (type == MPI_DATATYPE_NULL)
        return 1;
    if (type != last) {
        int ints, addresses, types, combiner;
        PMPI_Type_get_envelope(type, &ints, &addresses, &types, &combiner);
        last = type;
        last_predefined = combiner == MPI_COMBINER_NAMED;
    }
    return last_predefined;
}

static void profile_begin(tmpi_call *call)
{
    switch (tmpi_op_table[call->op].kind) {
    case TMPI_KIND_COMM_FREE:
        tmpi_comm_forget(call->comm); /* the handle may be reused by the next communicator */
        break;
    case TMPI_KIND_REQUEST_FREE:
        tmpi_request_forget(*call->requests);
        tmpi_inflight_remove(&nbc, *call->requests);
        break;
    case TMPI_KIND_TIMED:
        tmpi_inflight_snapshot(&nbc, call);
        break;
    default:
        break;
    }
}

static void profile_end(tmpi_call *call)
{
    if (TMPI_UNLIKELY(nbc.seen > 0)) /* a wait or test on collectives in flight: even paused, forget the */
        nbc_after_wait(call, !paused && call->rc == MPI_SUCCESS); /* completed ones (their handles are reused) */
    if (paused || TMPI_UNLIKELY(call->rc != MPI_SUCCESS))
        return; /* a failed call (errors returned) may carry an invalid communicator or request */
    uint64_t dt = call->t_end - call->t_begin;
    me.mpi += dt;
    switch (tmpi_op_table[call->op].kind) {
    case TMPI_KIND_COLL: {
        tmpi_comm_info *info = tmpi_comm_lookup(call->comm);
        tmpi_coll_entry *e = tmpi_entry(call->op, info->shape, tmpi_size_bucket(call->bytes));
        e->calls++;
        e->bytes += call->bytes;
        e->time += dt;
        if (dt < e->min)
            e->min = dt;
        if (dt > e->max)
            e->max = dt;
        if (TMPI_LIKELY(e->n_exact > 0 && e->exact_size[0] == call->bytes))
            e->exact_calls[0]++;
        else
            tmpi_add_exact(e->exact_size, e->exact_calls, &e->n_exact, call->bytes, 1);
        if (TMPI_UNLIKELY(call->counts[0] != NULL || call->counts[1] != NULL)) {
            int shape = tmpi_call_shape(call, info);
            if (shape >= 0)
                e->shapes[shape]++;
        }
        if (call->mpi_op != MPI_OP_NULL) {
            e->op_calls++;
            e->noncommutative += !tmpi_op_commutes(call->mpi_op);
        }
        if (call->datatype != MPI_DATATYPE_NULL || call->send_datatype != MPI_DATATYPE_NULL) {
            int send_counts = call->send_datatype != MPI_DATATYPE_NULL && call->buffer != MPI_IN_PLACE;
            e->typed_calls++;
            e->derived += !tmpi_type_predefined(call->datatype) || (send_counts && !tmpi_type_predefined(call->send_datatype));
        }
        me.coll += dt;
        me.coll_calls++;
        if (!tmpi_op_table[call->op].blocking)
            nbc_start(call, info->shape, tmpi_size_bucket(call->bytes));
        break;
    }
    case TMPI_KIND_SEND:
        tmpi_record_p2p(call->bytes);
        me.p2p += dt;
        break;
    case TMPI_KIND_SEND_INIT:
        if (*call->requests != MPI_REQUEST_NULL)
            tmpi_request_remember(*call->requests, call->bytes);
        me.p2p += dt;
        break;
    case TMPI_KIND_START:
        for (int i = 0; i < call->nrequests; i++) {
            uint64_t bytes;
            if (tmpi_request_bytes(call->requests[i], &bytes))
                tmpi_record_p2p(bytes);
        }
        me.p2p += dt;
        break;
    default:
        break;
    }
}

static void profile_reset(void)
{
    for (size_t i = 0; i < table_capacity; i++)
        table[i].used = 0;
    table_used = 0;
    last_entry = NULL;
    nbc.count = 0; /* collectives in flight are not recorded when they complete */
    memset(&me, 0, sizeof me);
    paused_total = 0;
    cpu_clock_start();
    tmpi_globals.t_start = tmpi_ticks();
    if (paused)
        paused_since = tmpi_globals.t_start;
}

/* MPI_Pcontrol(0) pauses recording, (1) resumes, (2) discards what was recorded so far. */
static void profile_pcontrol(int level)
{
    uint64_t now = tmpi_ticks();
    if (level == 0 && !paused) {
        paused = 1;
        paused_since = now;
    } else if (level == 1 && paused) {
        paused = 0;
        paused_total += now - paused_since;
    } else if (level == 2) {
        profile_reset();
    }
}

/* ---------------------------------------------------------------- MPI_T performance variables ---- */

#define TMPI_MAX_PVARS 512
#define TMPI_PVAR_NAME 96
#define TMPI_PVAR_MAX_COUNT 64

typedef struct {
    char name[TMPI_PVAR_NAME];
    MPI_T_pvar_handle handle;
    MPI_Datatype type;
    int count, var_class;
} tmpi_pvar;

static MPI_T_pvar_session pvar_session;
static tmpi_pvar *pvars;
static int n_pvars, pvars_on, pvars_offered;

/* A numeric value of one of the datatypes MPI_T uses, as a double. */
static double tmpi_pvar_number(MPI_Datatype type, const void *buf, int i)
{
    if (type == MPI_DOUBLE)
        return ((const double *)buf)[i];
    if (type == MPI_INT)
        return ((const int *)buf)[i];
    if (type == MPI_UNSIGNED)
        return ((const unsigned *)buf)[i];
    if (type == MPI_UNSIGNED_LONG)
        return (double)((const unsigned long *)buf)[i];
    if (type == MPI_COUNT)
        return (double)((const MPI_Count *)buf)[i];
    return (double)((const unsigned long long *)buf)[i]; /* MPI_UNSIGNED_LONG_LONG */
}

/* pvars whose handle allocation crashes the library: Debian's Open MPI 4.1.4 segfaults in
 * MPI_T_pvar_handle_alloc on every mtl_psm2_* pvar (psm2_mq_get_stats, no PSM2 device; measured). More
 * prefixes: TUNEMPI_PVARS_SKIP=prefix1,prefix2. */
static int tmpi_pvar_skipped(const char *name)
{
    static const char *const known[] = {"mtl_psm2_"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strncmp(name, known[i], strlen(known[i])) == 0)
            return 1;
    const char *extra = getenv("TUNEMPI_PVARS_SKIP");
    while (extra && *extra) {
        const char *comma = strchr(extra, ',');
        size_t len = comma ? (size_t)(comma - extra) : strlen(extra);
        if (len > 0 && strncmp(name, extra, len) == 0)
            return 1;
        extra = comma ? comma + 1 : NULL;
    }
    return 0;
}

static int tmpi_pvar_type_ok(MPI_Datatype type)
{
    return type == MPI_DOUBLE || type == MPI_INT || type == MPI_UNSIGNED || type == MPI_UNSIGNED_LONG ||
           type == MPI_UNSIGNED_LONG_LONG || type == MPI_COUNT;
}

/* Open a session and start a handle on every pvar that can be read as numbers over the whole run. */
static void pvars_start(void)
{
    const char *want = getenv("TUNEMPI_PVARS");
    if (want == NULL || strcmp(want, "1") != 0)
        return;
    int provided = 0, num = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
        return;
    if (MPI_T_pvar_get_num(&num) != MPI_SUCCESS || MPI_T_pvar_session_create(&pvar_session) != MPI_SUCCESS) {
        MPI_T_finalize();
        return;
    }
    pvars_offered = num;
    pvars = calloc((size_t)(num > 0 ? num : 1), sizeof *pvars);
    for (int i = 0; i < num && n_pvars < TMPI_MAX_PVARS; i++) {
        char name[TMPI_PVAR_NAME], desc[8];
        int name_len = sizeof name, desc_len = sizeof desc, verbosity, var_class, bind, readonly, continuous,
            atomic;
        MPI_Datatype type;
        MPI_T_enum enumtype;
        if (MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &var_class, &type, &enumtype, desc, &desc_len,
                                &bind, &readonly, &continuous, &atomic) != MPI_SUCCESS)
            continue;
        if (!tmpi_pvar_type_ok(type) || (bind != MPI_T_BIND_NO_OBJECT && bind != MPI_T_BIND_MPI_COMM) ||
            tmpi_pvar_skipped(name))
            continue;
        MPI_Comm world = MPI_COMM_WORLD;
        tmpi_pvar *v = &pvars[n_pvars];
        if (MPI_T_pvar_handle_alloc(pvar_session, i, bind == MPI_T_BIND_MPI_COMM ? (void *)&world : NULL,
                                    &v->handle, &v->count) != MPI_SUCCESS)
            continue;
        if (v->count < 1 || v->count > TMPI_PVAR_MAX_COUNT ||
            (!continuous && MPI_T_pvar_start(pvar_session, v->handle) != MPI_SUCCESS)) {
            MPI_T_pvar_handle_free(pvar_session, &v->handle);
            continue;
        }
        snprintf(v->name, sizeof v->name, "%s", name);
        for (int k = 0; k < n_pvars; k++) /* one name for two variables (Intel MPI: "idle", a timer and a */
            if (strcmp(pvars[k].name, name) == 0) /* counter): the later is keyed by its MPI_T index too */
                snprintf(v->name, sizeof v->name, "%.*s@%d", (int)sizeof v->name - 12, name, i);
        v->type = type;
        v->var_class = var_class;
        n_pvars++;
    }
    pvars_on = 1;
}

/* This rank's values (each the sum of the handle's elements), then the session closed. */
static void pvars_read(double *values)
{
    unsigned long long buf[TMPI_PVAR_MAX_COUNT];
    for (int k = 0; k < n_pvars; k++) {
        values[k] = 0.0;
        memset(buf, 0, sizeof buf);
        if (MPI_T_pvar_read(pvar_session, pvars[k].handle, buf) != MPI_SUCCESS) {
            values[k] = -1.0; /* unreadable here: the JSON says null */
            continue;
        }
        for (int e = 0; e < pvars[k].count; e++)
            values[k] += tmpi_pvar_number(pvars[k].type, buf, e);
    }
    for (int k = 0; k < n_pvars; k++)
        MPI_T_pvar_handle_free(pvar_session, &pvars[k].handle);
    MPI_T_pvar_session_free(&pvar_session);
    MPI_T_finalize();
}

static void profile_start(void)
{
    memset(&me, 0, sizeof me);
    cpu_clock_start();
    pvars_start();
}

/* ---------------------------------------------------------------- finalize: merge ---- */

static int tmpi_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int tmpi_cmp_record(const void *a, const void *b)
{
    const tmpi_record *x = a, *y = b;
    const int32_t kx[5] = {x->op, x->comm_size, x->nodes, x->ppn, x->bucket};
    const int32_t ky[5] = {y->op, y->comm_size, y->nodes, y->ppn, y->bucket};
    for (int i = 0; i < 5; i++)
        if (kx[i] != ky[i])
            return (kx[i] > ky[i]) - (kx[i] < ky[i]);
    return 0;
}

/* Merge b into a (same key). */
static void tmpi_merge_record(tmpi_record *a, const tmpi_record *b)
{
    a->calls += b->calls;
    a->bytes += b->bytes;
    a->time_ns += b->time_ns;
    a->completed += b->completed;
    a->completion_ns += b->completion_ns;
    a->wait_ns += b->wait_ns;
    a->blocked_ns += b->blocked_ns;
    for (int s = 0; s < TMPI_COUNTS_SHAPES; s++)
        a->shapes[s] += b->shapes[s];
    a->op_calls += b->op_calls;
    a->noncommutative += b->noncommutative;
    a->typed_calls += b->typed_calls;
    a->derived += b->derived;
    if (b->min_ns < a->min_ns)
        a->min_ns = b->min_ns;
    if (b->max_ns > a->max_ns)
        a->max_ns = b->max_ns;
    a->ranks += b->ranks;
    if (b->n_exact < 0)
        a->n_exact = -1;
    for (int i = 0; i < b->n_exact && a->n_exact >= 0; i++)
        tmpi_add_exact(a->exact_size, a->exact_calls, &a->n_exact, b->exact_size[i], b->exact_calls[i]);
}

/* Sort and merge records with equal keys in place; returns the new count. */
static int tmpi_merge_sorted(tmpi_record *records, int n)
{
    if (n == 0)
        return 0;
    qsort(records, (size_t)n, sizeof *records, tmpi_cmp_record);
    int out = 0;
    for (int i = 1; i < n; i++) {
        if (tmpi_cmp_record(&records[out], &records[i]) == 0)
            tmpi_merge_record(&records[out], &records[i]);
        else
            records[++out] = records[i];
    }
    return out + 1;
}

/* This rank's table as records keyed by (op, comm size, nodes, ppn, bucket), merged locally. */
static tmpi_record *tmpi_local_records(const int *node_of, int n_nodes, int *count)
{
    int n_shapes = tmpi_shape_count();
    int *shape_nodes = calloc((size_t)n_shapes + 1, sizeof *shape_nodes);
    int *shape_ppn = calloc((size_t)n_shapes + 1, sizeof *shape_ppn);
    for (int s = 0; s < n_shapes; s++) {
        int size;
        const int *members = tmpi_shape_members(s, &size);
        if (tmpi_members_layout(members, size, node_of, n_nodes, &shape_nodes[s], &shape_ppn[s]) != 0)
            shape_nodes[s] = shape_ppn[s] = -1; /* a member outside MPI_COMM_WORLD */
    }
    tmpi_record *records = calloc(table_used + 1, sizeof *records);
    int n = 0;
    for (size_t i = 0; i < table_capacity; i++) {
        const tmpi_coll_entry *e = &table[i];
        if (!e->used)
            continue;
        int size;
        tmpi_shape_members(e->shape, &size);
        tmpi_record *r = &records[n++];
        *r = (tmpi_record){.op = e->op, .comm_size = size, .nodes = shape_nodes[e->shape],
                           .ppn = shape_ppn[e->shape], .bucket = e->bucket, .n_exact = e->n_exact,
                           .ranks = 1, .calls = e->calls, .bytes = e->bytes,
                           .time_ns = tmpi_ticks_to_ns(e->time), .min_ns = tmpi_ticks_to_ns(e->min),
                           .max_ns = tmpi_ticks_to_ns(e->max), .completed = e->completed,
                           .completion_ns = tmpi_ticks_to_ns(e->completion), .wait_ns = tmpi_ticks_to_ns(e->wait),
                           .blocked_ns = tmpi_ticks_to_ns(e->blocked), .op_calls = e->op_calls,
                           .noncommutative = e->noncommutative, .typed_calls = e->typed_calls,
                           .derived = e->derived};
        memcpy(r->shapes, e->shapes, sizeof r->shapes);
        memcpy(r->exact_size, e->exact_size, sizeof r->exact_size);
        memcpy(r->exact_calls, e->exact_calls, sizeof r->exact_calls);
    }
    free(shape_nodes);
    free(shape_ppn);
    *count = tmpi_merge_sorted(records, n);
    return records;
}

/* ---------------------------------------------------------------- finalize: JSON ---- */

static void tmpi_json_string(FILE *out, const char *s, size_t len)
{
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void tmpi_json_cstr(FILE *out, const char *s) { tmpi_json_string(out, s, strlen(s)); }

static void tmpi_json_command(FILE *out)
{
    fputc('[', out);
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (f) {
        char buf[8192];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (size_t i = 0; i < n;) {
            size_t len = strlen(buf + i);
            fputs(i ? ", " : "", out);
            tmpi_json_string(out, buf + i, len);
            i += len + 1;
        }
    }
    fputc(']', out);
}

static void tmpi_json_settings(FILE *out)
{
    fputc('{', out);
    int first = 1;
    for (char **env = environ; env && *env; env++) {
        if (strncmp(*env, "TUNEMPI_", 8) != 0)
            continue;
        const char *eq = strchr(*env, '=');
        if (!eq)
            continue;
        fputs(first ? "" : ", ", out);
        first = 0;
        tmpi_json_string(out, *env, (size_t)(eq - *env));
        fputs(": ", out);
        tmpi_json_cstr(out, eq + 1);
    }
    fputc('}', out);
}

static const char *tmpi_thread_level_name(int level)
{
    if (level == MPI_THREAD_SINGLE)
        return "single";
    if (level == MPI_THREAD_FUNNELED)
        return "funneled";
    if (level == MPI_THREAD_SERIALIZED)
        return "serialized";
    if (level == MPI_THREAD_MULTIPLE)
        return "multiple";
    return "unknown";
}

static void tmpi_json_u64_array(FILE *out, const uint64_t *v, int n)
{
    fputc('[', out);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%llu", i ? ", " : "", (unsigned long long)v[i]);
    fputc(']', out);
}

/* The pvar sums and maxima over ranks: {"name": {"sum": S, "max": M, "class": C}}, null where a rank
 * could not read it. */
static void tmpi_json_pvars(FILE *out, const double *sums, const double *maxima, const double *minima)
{
    fprintf(out, "  \"pvars_offered\": %d,\n  \"pvars\": {", pvars_on ? pvars_offered : -1);
    for (int k = 0; k < n_pvars; k++) {
        fputs(k ? ",\n    " : "\n    ", out);
        tmpi_json_cstr(out, pvars[k].name);
        if (minima[k] < 0.0)
            fprintf(out, ": null");
        else
            fprintf(out, ": {\"sum\": %.17g, \"max\": %.17g, \"class\": %d}", sums[k], maxima[k],
                    pvars[k].var_class);
    }
    fputs(n_pvars ? "\n  },\n" : "},\n", out);
}

static void tmpi_write_json(FILE *out, const tmpi_record *records, int n_records,
                            const tmpi_rank_summary *ranks, int n_ranks, int n_nodes,
                            const double *pvar_sums, const double *pvar_max, const double *pvar_min)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    PMPI_Get_library_version(version, &len);
    while (len > 0 && (version[len - 1] == '\n' || version[len - 1] == ' ' || version[len - 1] == '\0'))
        len--;

    fputs("{\n  \"schema\": \"tunempi-profile\",\n  \"schema_version\": 2,\n  \"header\": {\n", out);
    fputs("    \"library\": ", out);
    tmpi_json_string(out, version, (size_t)len);
    fputs(",\n    \"command\": ", out);
    tmpi_json_command(out);
    fprintf(out, ",\n    \"ranks\": %d,\n    \"nodes\": %d,\n    \"hosts\": {", n_ranks, n_nodes);
    /* host -> number of ranks, by host name (sorting keeps this O(P log P) for large jobs) */
    const char **hosts = calloc((size_t)n_ranks + 1, sizeof *hosts);
    for (int r = 0; r < n_ranks; r++)
        hosts[r] = ranks[r].host;
    qsort(hosts, (size_t)n_ranks, sizeof *hosts, tmpi_cmp_str);
    for (int r = 0, first = 1; r < n_ranks;) {
        int q = r;
        while (q < n_ranks && strcmp(hosts[q], hosts[r]) == 0)
            q++;
        fputs(first ? "" : ", ", out);
        first = 0;
        tmpi_json_cstr(out, hosts[r]);
        fprintf(out, ": %d", q - r);
        r = q;
    }
    free(hosts);
    fputs("},\n    \"settings\": ", out);
    tmpi_json_settings(out);
    fprintf(out, ",\n    \"thread_level\": \"%s\",\n    \"started\": \"%s\"\n  },\n",
            tmpi_thread_level_name(tmpi_globals.thread_level), tmpi_globals.started_lazily ? "lazily" : "init");

    uint64_t hist_calls[TMPI_P2P_BUCKETS] = {0}, hist_bytes[TMPI_P2P_BUCKETS] = {0};
    uint64_t wall = 0, mpi = 0, coll = 0, p2p = 0;
    fputs("  \"ranks\": [\n", out);
    for (int r = 0; r < n_ranks; r++) {
        const tmpi_rank_summary *s = &ranks[r];
        fprintf(out, "    {\"rank\": %d, \"host\": ", r);
        tmpi_json_cstr(out, s->host);
        fprintf(out,
                ", \"wall_ns\": %llu, \"mpi_ns\": %llu, \"collective_ns\": %llu, \"p2p_ns\": %llu, "
                "\"collective_calls\": %llu, \"send_calls\": %llu, \"cpu_ns\": %llu, \"span_ns\": %llu}%s\n",
                (unsigned long long)s->wall_ns, (unsigned long long)s->mpi_ns,
                (unsigned long long)s->coll_ns, (unsigned long long)s->p2p_ns,
                (unsigned long long)s->coll_calls, (unsigned long long)s->send_calls,
                (unsigned long long)s->cpu_ns, (unsigned long long)s->span_ns, r + 1 < n_ranks ? "," : "");
        wall += s->wall_ns;
        mpi += s->mpi_ns;
        coll += s->coll_ns;
        p2p += s->p2p_ns;
        for (int b = 0; b < TMPI_P2P_BUCKETS; b++) {
            hist_calls[b] += s->p2p_calls[b];
            hist_bytes[b] += s->p2p_bytes[b];
        }
    }
    fprintf(out,
            "  ],\n  \"totals\": {\"wall_ns\": %llu, \"mpi_ns\": %llu, \"collective_ns\": %llu, "
            "\"p2p_ns\": %llu},\n",
            (unsigned long long)wall, (unsigned long long)mpi, (unsigned long long)coll,
            (unsigned long long)p2p);
    tmpi_json_pvars(out, pvar_sums, pvar_max, pvar_min);

    fputs("  \"collectives\": [\n", out);
    for (int i = 0; i < n_records; i++) {
        const tmpi_record *r = &records[i];
        uint64_t lo = r->bucket < 0 ? 0 : (r->bucket == 0 ? 1 : (1ULL << (r->bucket - 1)) + 1);
        uint64_t hi = r->bucket < 0 ? 0 : 1ULL << r->bucket;
        fputs("    {\"collective\": ", out);
        tmpi_json_cstr(out, tmpi_op_table[r->op].label);
        fprintf(out,
                ", \"blocking\": %s, \"comm_size\": %d, \"nodes\": %d, \"ppn\": %d, \"size_lo\": %llu, "
                "\"size_hi\": %llu, \"ranks\": %d, \"calls\": %llu, \"bytes\": %llu, \"time_ns\": %llu, "
                "\"time_min_ns\": %llu, \"time_max_ns\": %llu, ",
                tmpi_op_table[r->op].blocking ? "true" : "false", r->comm_size, r->nodes, r->ppn,
                (unsigned long long)lo, (unsigned long long)hi, r->ranks, (unsigned long long)r->calls,
                (unsigned long long)r->bytes, (unsigned long long)r->time_ns, (unsigned long long)r->min_ns,
                (unsigned long long)r->max_ns);
        if (!tmpi_op_table[r->op].blocking)
            fprintf(out, "\"completed\": %llu, \"completion_ns\": %llu, \"wait_ns\": %llu, \"blocked_ns\": %llu, ",
                    (unsigned long long)r->completed, (unsigned long long)r->completion_ns,
                    (unsigned long long)r->wait_ns, (unsigned long long)r->blocked_ns);
        if (r->shapes[TMPI_COUNTS_UNIFORM] + r->shapes[TMPI_COUNTS_SKEWED] + r->shapes[TMPI_COUNTS_SPARSE] > 0)
            fprintf(out, "\"count_shapes\": {\"uniform\": %llu, \"skewed\": %llu, \"sparse\": %llu}, ",
                    (unsigned long long)r->shapes[TMPI_COUNTS_UNIFORM],
                    (unsigned long long)r->shapes[TMPI_COUNTS_SKEWED],
                    (unsigned long long)r->shapes[TMPI_COUNTS_SPARSE]);
        if (r->typed_calls > 0)
            fprintf(out, "\"typed_calls\": %llu, \"derived_type_calls\": %llu, ", (unsigned long long)r->typed_calls,
                    (unsigned long long)r->derived);
        if (r->op_calls > 0)
            fprintf(out, "\"op_calls\": %llu, \"noncommutative_calls\": %llu, ", (unsigned long long)r->op_calls,
                    (unsigned long long)r->noncommutative);
        fputs("\"exact_sizes\": ", out);
        if (r->n_exact < 0) {
            fputs("null", out);
        } else {
            fputc('{', out);
            for (int k = 0; k < r->n_exact; k++)
                fprintf(out, "%s\"%llu\": %llu", k ? ", " : "", (unsigned long long)r->exact_size[k],
                        (unsigned long long)r->exact_calls[k]);
            fputc('}', out);
        }
        fprintf(out, "}%s\n", i + 1 < n_records ? "," : "");
    }
    fputs("  ],\n  \"p2p_histogram\": {\"upper_bounds\": [2048, 4096, 8192, 16384, 32768, 65536, null], ", out);
    fputs("\"calls\": ", out);
    tmpi_json_u64_array(out, hist_calls, TMPI_P2P_BUCKETS);
    fputs(", \"bytes\": ", out);
    tmpi_json_u64_array(out, hist_bytes, TMPI_P2P_BUCKETS);
    fputs("}\n}\n", out);
}

static void tmpi_write_file(const tmpi_record *records, int n_records, const tmpi_rank_summary *ranks,
                            int n_ranks, int n_nodes, const double *pvar_sums, const double *pvar_max,
                            const double *pvar_min)
{
    char path[4096];
    const char *env = getenv("TUNEMPI_PROFILE_OUT");
    if (env && env[0])
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "tunempi-profile.%ld.json", (long)getpid());
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *out = fopen(tmp, "w");
    if (out == NULL) {
        tmpi_warn("cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    tmpi_write_json(out, records, n_records, ranks, n_ranks, n_nodes, pvar_sums, pvar_max, pvar_min);
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
        tmpi_warn("cannot write %s: %s", path, strerror(errno));
        remove(tmp);
    }
}

static void profile_finish(void)
{
    uint64_t end = tmpi_globals.t_finalize;
    /* the application's pvars, before the tool's own communication below adds to them */
    double *values = calloc((size_t)n_pvars + 1, sizeof *values);
    if (pvars_on)
        pvars_read(values);
    if (paused)
        paused_total += end - paused_since;
    tmpi_rank_summary summary;
    memset(&summary, 0, sizeof summary);
    summary.wall_ns = tmpi_ticks_to_ns(end - tmpi_globals.t_start - paused_total);
    summary.cpu_ns = tmpi_globals.cpu_finalize_ns - cpu_at_start;
    summary.span_ns = tmpi_ticks_to_ns(end - tmpi_globals.t_start);
    summary.mpi_ns = tmpi_ticks_to_ns(me.mpi);
    summary.coll_ns = tmpi_ticks_to_ns(me.coll);
    summary.p2p_ns = tmpi_ticks_to_ns(me.p2p);
    summary.coll_calls = me.coll_calls;
    summary.send_calls = me.send_calls;
    memcpy(summary.p2p_calls, me.p2p_calls, sizeof summary.p2p_calls);
    memcpy(summary.p2p_bytes, me.p2p_bytes, sizeof summary.p2p_bytes);
    tmpi_host_name(summary.host);

    int size = tmpi_globals.world_size, rank = tmpi_globals.world_rank;
    int *node_of = calloc((size_t)size, sizeof *node_of);
    int n_nodes = tmpi_node_map(summary.host, node_of);
    int n_local = 0;
    tmpi_record *local = tmpi_local_records(node_of, n_nodes, &n_local);
    free(node_of);

    int local_bytes = n_local * (int)sizeof(tmpi_record);
    int *counts = NULL, *displs = NULL;
    tmpi_record *all = NULL;
    tmpi_rank_summary *summaries = NULL;
    int total = 0;
    if (rank == 0) {
        counts = calloc((size_t)size, sizeof *counts);
        displs = calloc((size_t)size, sizeof *displs);
        summaries = calloc((size_t)size, sizeof *summaries);
    }
    PMPI_Gather(&local_bytes, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < size; r++) {
            displs[r] = total;
            total += counts[r];
        }
        all = malloc((size_t)total + sizeof *all);
    }
    PMPI_Gatherv(local, local_bytes, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    PMPI_Gather(&summary, (int)sizeof summary, MPI_BYTE, summaries, (int)sizeof summary, MPI_BYTE, 0,
                MPI_COMM_WORLD);
    /* pvars: every rank runs the same library, so the same list; a rank that found another count (a
     * handle refused on one rank only) makes the whole list unusable: dropped rather than misaligned. */
    int counts_agree[2] = {n_pvars, -n_pvars};
    PMPI_Allreduce(MPI_IN_PLACE, counts_agree, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (pvars_on && counts_agree[0] != -counts_agree[1])
        n_pvars = 0;
    double *sums = calloc((size_t)n_pvars + 1, sizeof *sums), *maxima = calloc((size_t)n_pvars + 1, sizeof *maxima),
           *minima = calloc((size_t)n_pvars + 1, sizeof *minima);
    if (n_pvars > 0) {
        PMPI_Reduce(values, sums, n_pvars, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        PMPI_Reduce(values, maxima, n_pvars, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        PMPI_Reduce(values, minima, n_pvars, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    }
    if (rank == 0) {
        int n = tmpi_merge_sorted(all, total / (int)sizeof(tmpi_record));
        tmpi_write_file(all, n, summaries, size, n_nodes, sums, maxima, minima);
    }
    free(values);
    free(sums);
    free(maxima);
    free(minima);
    free(pvars);
    pvars = NULL;
    free(local);
    free(all);
    free(counts);
    free(displs);
    free(summaries);
}

const tmpi_mode tmpi_profile_mode = {
    .name = "profile",
    .start = profile_start,
    .begin = profile_begin,
    .end = profile_end,
    .pcontrol = profile_pcontrol,
    .finish = profile_finish,
};
