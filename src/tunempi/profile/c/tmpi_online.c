/*
 * Online mode (docs/online.md): every switchable collective call is served by an algorithm drawn from its
 * tuning cell's probabilities, and its start/end are recorded on a subset of ranks.
 *
 *   cell      = (collective, communicator size, nodes, ppn, message-size range)
 *   draw      = tmpi_online_uniform(seed, run, communicator stream id, communicator call counter):
 *               identical on every member of the communicator, with no communication
 *   switch    = MPI_T writes of the algorithm's cvars before the call (MPICH: honoured on the next
 *               call), or, where the library only honours a write on communicators created after it
 *               (Open MPI), the call runs on a per-algorithm SHADOW communicator created right after
 *               the write, the first time that algorithm is drawn on that communicator
 *   records   = kept in memory, gathered to rank 0 in MPI_Finalize and written as CSV; a non-blocking
 *               collective's (MPI_Iallreduce, ...) runs from its start to the return of the wait or test that
 *               completes it (its request kept until then; one never seen completed is not written)
 *
 * Everything the mode needs comes from the table file written by `tunempi online run`
 * (TUNEMPI_ONLINE_TABLE; format in docs/online.md): the cvars, the algorithms of each collective with
 * the writes that select them (algorithm 0 is the library's default: the cvars' values at start), the
 * size bounds, the cells' probabilities (cells not listed draw uniformly), seed, run number, record
 * settings and the library fingerprint the records are tagged with.
 *
 * The mode disables itself (every call runs untouched, with one warning per rank 0) when the
 * application runs MPI_THREAD_MULTIPLE (a global cvar write would race with other threads' calls),
 * when MPI was initialised behind the tool's back (the start-up allgather of host names would not be
 * collective), when the table is missing or unreadable, or when a cvar is not in the library.
 */
#include "tmpi.h"
#include "tmpi_online_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ONLINE_NAME_MAX 96
#define ONLINE_WRITES_MAX 4
#define ONLINE_REFUSALS_MAX 4

typedef struct {
    char name[ONLINE_NAME_MAX];
    MPI_T_cvar_handle handle;
    int orig;    /* value at start: what "the library's default" means */
    int current; /* last value written (or read): writes are skipped when unchanged */
} online_cvar;

/* What an algorithm needs from a call (tunempi.mpi.restrictions.ONLINE_BITS): a call that does not meet
 * every requirement of an algorithm never runs it; the draw is made among the algorithms it meets. */
enum {
    NEED_COMMUTATIVE = 1,
    NEED_BUILTIN_OP = 2,
    NEED_NOT_INPLACE = 4,
    NEED_INPLACE = 8,
    NEED_COUNT_GE_POW2 = 16,
    NEED_POWER_OF_TWO = 32,
    NEED_TWO_RANKS = 64,
    NEED_CONTIGUOUS = 128,   /* datatype requirements: decided only for a draw that needs them, */
    NEED_TRUE_LB_ZERO = 256, /* by an agreement of every rank (online_datatypes_unmet) */
    NEED_SAME_COUNTS = 512,  /* the same count of same-size datatypes on every rank (agreed too) */
    NEED_AT_MOST_FOUR_RANKS = 1024,
    NEED_DATATYPES = NEED_CONTIGUOUS | NEED_TRUE_LB_ZERO | NEED_SAME_COUNTS,
    NEED_NEVER = 1 << 30 /* a requirement no rank can decide alone: never drawn */
};

typedef struct {
    char name[ONLINE_NAME_MAX];
    int ranks_only; /* > 0: the algorithm only works on communicators of this size (Open MPI two_proc) */
    int requires;   /* NEED_* bits */
    int nwrites;
    int cvar[ONLINE_WRITES_MAX];
    int value[ONLINE_WRITES_MAX];
    int use_orig[ONLINE_WRITES_MAX];
} online_alg;

typedef struct {
    char label[32];
    int needs_new_comm;
    int any_requires; /* some algorithm has requirements: calls are checked */
    int nalg;
    online_alg *algs;
    double *uniform; /* cumulative uniform probabilities: cells without an entry */
} online_coll;

typedef struct {
    int coll, ranks, nodes, ppn, size_index;
    double *cum;
} online_cell;

/* Per user communicator (tmpi_comm_info.mode_data). */
typedef struct {
    int enabled; /* intracommunicator whose members are all in MPI_COMM_WORLD */
    int size, nodes, ppn;
    uint64_t stream, key; /* stream id (member list) and its key in this run */
    uint64_t calls;
    const double **cum;   /* [coll * nsizes + size_index] */
    int owned;            /* some cum vectors are this communicator's own copies (see ranks_only) */
    MPI_Comm *shadows;    /* [coll * maxalg + alg], MPI_COMM_NULL until drawn (needs_new_comm only) */
} online_comm;

/* One recorded call: fixed layout, the same binary on every rank (gathered as bytes). */
typedef struct {
    int32_t rank, coll, alg, ranks, nodes, ppn;
    uint64_t bytes, seq, stream, start, end; /* start/end: ticks since start, ns after finalize */
    uint64_t call, blocked; /* ticks, ns after finalize: the (start) call's own time; non-blocking: the whole
                             * time of the waits and tests that named its request (its computation between
                             * start and wait: end - start - call - blocked) */
} online_record;

static struct {
    int enabled;
    char fingerprint[ONLINE_NAME_MAX];
    uint64_t seed, run;
    int batch;
    long max_records;
    int all_ranks_record;
    int *record_ranks;
    int nrecord_ranks;
    uint64_t *bounds;
    int nbounds; /* size ranges: nbounds + 1 (the last one is open-ended) */
    online_cvar *cvars;
    int ncvars;
    online_coll *colls;
    int ncolls, maxalg;
    online_cell *cells;
    int ncells;
    int *op_coll; /* tmpi_op_table index -> collective index or -1 */
    int *node_of; /* world rank -> node index */
    int nnodes;
    int recording;
    long cap; /* records this rank keeps */
    online_record *records;
    long nrecords;
    /* What the library's error string says when a drawn algorithm cannot take the call's arguments
     * (`refusal` lines; MPICH under fallback=error): only such an error is rerun as the library's choice. */
    char refusals[ONLINE_REFUSALS_MAX][ONLINE_NAME_MAX];
    int nrefusals;
    /* The write of the library's strict selection (`strict` line; MPICH: fallback=error), left out on
     * communicators that span several nodes: there the library runs the drawn algorithm on its node
     * sub-communicators too, where a check may fail on some nodes' ranks only (docs/online.md 2d). */
    int has_strict, strict_cvar, strict_value;
    uint64_t switchable_calls, switches, shadows_created, restricted_calls, refused_calls;
    uint64_t failed_draws;        /* a drawn algorithm's error that is no refusal: the user's handler decides */
    uint64_t datatype_agreements; /* allreduces run to agree on what every rank's datatypes are */
} on;

/* The call in flight (single recorded thread, no nesting: the re-entry guard sees to that). */
static struct {
    int active, coll, alg, restore;
    int retrying;          /* the drawn algorithm refused the call: it runs again as the library's choice */
    int errhandler_set;    /* the user communicator's handler is saved in `errhandler` for the call */
    MPI_Errhandler errhandler;
    MPI_Comm user_comm;
    online_comm *comm;
    uint64_t seq;
} pending;

/* Non-blocking collectives in flight on a recording rank (tmpi.h): the payload is the index of the record
 * whose end the wait or test that completes the request sets. */
static tmpi_inflight inflight = {.payload_size = sizeof(long)};

/* ------------------------------------------------------------------------------ table file ---- */

static void *online_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        tmpi_warn("out of memory");
        abort();
    }
    return p;
}

static int online_coll_index(const char *label)
{
    for (int c = 0; c < on.ncolls; c++)
        if (strcmp(on.colls[c].label, label) == 0)
            return c;
    return -1;
}

static int online_cumulate(double *p, int n)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        if (!(p[i] >= 0))
            return 0; /* negative or NaN */
        total += p[i];
    }
    if (!(total > 0))
        return 0;
    double run = 0;
    for (int i = 0; i < n; i++) {
        run += p[i] / total;
        p[i] = run;
    }
    p[n - 1] = 1.0;
    return 1;
}

/* Parses the table; returns NULL on success, else what is wrong (for the warning). */
static const char *online_read_table(const char *path)
{
    static char why[200];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return "cannot open the table file";
    char line[8192], word[64];
    int version = 0, coll = -1, alg_left = 0, ended = 0;
    size_t cell_capacity = 0;
    const char *err = NULL;
    if (!fgets(line, sizeof line, f) || sscanf(line, "tunempi-online-table %d", &version) != 1 || version != 2)
        err = "not a tunempi-online-table version 2 file";
    while (!err && fgets(line, sizeof line, f)) {
        int used = 0;
        if (sscanf(line, "%63s%n", word, &used) != 1)
            continue;
        char *rest = line + used;
        if (alg_left > 0) {
            online_coll *c = &on.colls[coll];
            online_alg *a = &c->algs[c->nalg - alg_left];
            int n = 0;
            if (strcmp(word, "alg") != 0 ||
                sscanf(rest, "%95s %d %d %d%n", a->name, &a->ranks_only, &a->requires, &a->nwrites, &n) != 4 ||
                a->nwrites < 0 || a->nwrites > ONLINE_WRITES_MAX || (c->nalg - alg_left == 0 && a->requires != 0)) {
                err = "bad alg line";
                break;
            }
            if (a->requires != 0)
                c->any_requires = 1;
            rest += n;
            for (int w = 0; w < a->nwrites && !err; w++) {
                char value[32];
                if (sscanf(rest, "%d %31s%n", &a->cvar[w], value, &n) != 2 || a->cvar[w] < 0 ||
                    a->cvar[w] >= on.ncvars)
                    err = "bad write in alg line";
                else if (strcmp(value, "orig") == 0)
                    a->use_orig[w] = 1;
                else
                    a->value[w] = atoi(value);
                rest += n;
            }
            alg_left--;
            continue;
        }
        if (strcmp(word, "fingerprint") == 0) {
            sscanf(rest, "%95s", on.fingerprint);
        } else if (strcmp(word, "seed") == 0) {
            on.seed = strtoull(rest, NULL, 10);
        } else if (strcmp(word, "run") == 0) {
            on.run = strtoull(rest, NULL, 10);
        } else if (strcmp(word, "batch") == 0) {
            on.batch = atoi(rest);
        } else if (strcmp(word, "max_records") == 0) {
            on.max_records = atol(rest);
        } else if (strcmp(word, "record_ranks") == 0) {
            char list[4096] = "";
            sscanf(rest, "%4095s", list);
            if (strcmp(list, "all") == 0) {
                on.all_ranks_record = 1;
            } else {
                on.record_ranks = online_calloc(strlen(list) / 2 + 2, sizeof(int));
                for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","))
                    on.record_ranks[on.nrecord_ranks++] = atoi(tok);
            }
        } else if (strcmp(word, "bounds") == 0) {
            int n = 0, used2 = 0;
            if (sscanf(rest, "%d%n", &on.nbounds, &used2) != 1 || on.nbounds < 0 || on.nbounds > 64) {
                err = "bad bounds line";
                break;
            }
            rest += used2;
            on.bounds = online_calloc((size_t)on.nbounds, sizeof *on.bounds);
            for (int i = 0; i < on.nbounds; i++) {
                if (sscanf(rest, "%lu%n", (unsigned long *)&on.bounds[i], &n) != 1 ||
                    (i > 0 && on.bounds[i] <= on.bounds[i - 1])) {
                    err = "bad bounds line";
                    break;
                }
                rest += n;
            }
        } else if (strcmp(word, "strict") == 0) {
            if (sscanf(rest, "%d %d", &on.strict_cvar, &on.strict_value) != 2 || on.strict_cvar < 0 ||
                on.strict_cvar >= on.ncvars) {
                err = "bad strict line";
                break;
            }
            on.has_strict = 1;
        } else if (strcmp(word, "refusal") == 0) {
            while (*rest == ' ' || *rest == '\t')
                rest++;
            size_t len = strcspn(rest, "\r\n");
            if (on.nrefusals == ONLINE_REFUSALS_MAX || len == 0 || len >= ONLINE_NAME_MAX) {
                err = "bad refusal line";
                break;
            }
            memcpy(on.refusals[on.nrefusals], rest, len);
            on.refusals[on.nrefusals++][len] = '\0';
        } else if (strcmp(word, "cvar") == 0) {
            on.cvars = realloc(on.cvars, (size_t)(on.ncvars + 1) * sizeof *on.cvars);
            memset(&on.cvars[on.ncvars], 0, sizeof *on.cvars);
            if (sscanf(rest, "%95s", on.cvars[on.ncvars].name) != 1) {
                err = "bad cvar line";
                break;
            }
            on.ncvars++;
        } else if (strcmp(word, "coll") == 0) {
            on.colls = realloc(on.colls, (size_t)(on.ncolls + 1) * sizeof *on.colls);
            online_coll *c = &on.colls[on.ncolls];
            memset(c, 0, sizeof *c);
            if (sscanf(rest, "%31s %d %d", c->label, &c->needs_new_comm, &c->nalg) != 3 || c->nalg < 1 ||
                c->nalg > 64) {
                err = "bad coll line";
                break;
            }
            c->algs = online_calloc((size_t)c->nalg, sizeof *c->algs);
            c->uniform = online_calloc((size_t)c->nalg, sizeof *c->uniform);
            for (int i = 0; i < c->nalg; i++)
                c->uniform[i] = 1.0;
            online_cumulate(c->uniform, c->nalg);
            if (c->nalg > on.maxalg)
                on.maxalg = c->nalg;
            coll = on.ncolls++;
            alg_left = c->nalg;
        } else if (strcmp(word, "cell") == 0) {
            char label[32];
            online_cell cell;
            int n = 0;
            if (sscanf(rest, "%31s %d %d %d %d%n", label, &cell.ranks, &cell.nodes, &cell.ppn, &cell.size_index,
                       &n) != 5 ||
                (cell.coll = online_coll_index(label)) < 0) {
                err = "bad cell line";
                break;
            }
            rest += n;
            int nalg = on.colls[cell.coll].nalg;
            cell.cum = online_calloc((size_t)nalg, sizeof *cell.cum);
            for (int i = 0; i < nalg && !err; i++) {
                if (sscanf(rest, "%lf%n", &cell.cum[i], &n) != 1)
                    err = "short cell line";
                rest += n;
            }
            if (!err && !online_cumulate(cell.cum, nalg))
                err = "cell probabilities are not a distribution";
            if (err)
                break;
            tmpi_grow((void **)&on.cells, &cell_capacity, (size_t)on.ncells + 1, sizeof *on.cells);
            on.cells[on.ncells++] = cell;
        } else if (strcmp(word, "end") == 0) {
            ended = 1;
            break;
        } else {
            snprintf(why, sizeof why, "unknown line starting with %.40s", word);
            err = why;
        }
    }
    fclose(f);
    if (!err && alg_left > 0)
        err = "missing alg lines";
    if (!err && !ended)
        err = "truncated (no end line)";
    if (!err && on.ncolls == 0)
        err = "no collectives";
    return err;
}

/* ------------------------------------------------------------------------------ MPI_T ---- */

static int online_cvar_write(online_cvar *v, int value)
{
    if (v->current == value)
        return 1;
    if (PMPI_T_cvar_write(v->handle, &value) != MPI_SUCCESS)
        return 0;
    v->current = value;
    on.switches++;
    return 1;
}

static void online_apply(const online_alg *a)
{
    for (int w = 0; w < a->nwrites; w++) {
        online_cvar *v = &on.cvars[a->cvar[w]];
        online_cvar_write(v, a->use_orig[w] ? v->orig : a->value[w]);
    }
}

/* The writes of a drawn algorithm for a call on a communicator of `nodes` nodes: all of them on one node;
 * across nodes, all but the strict selection (the library falls back without a word, on every member of
 * whichever sub-communicator its check fails on, instead of failing there and leaving the others waiting). */
static void online_apply_drawn(const online_alg *a, int nodes)
{
    for (int w = 0; w < a->nwrites; w++) {
        online_cvar *v = &on.cvars[a->cvar[w]];
        if (nodes > 1 && on.has_strict && a->cvar[w] == on.strict_cvar && !a->use_orig[w] &&
            a->value[w] == on.strict_value)
            continue;
        online_cvar_write(v, a->use_orig[w] ? v->orig : a->value[w]);
    }
}

static const char *online_open_cvars(void)
{
    static char why[200];
    int provided;
    if (PMPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
        return "MPI_T_init_thread failed";
    for (int i = 0; i < on.ncvars; i++) {
        online_cvar *v = &on.cvars[i];
        int index, count;
        if (PMPI_T_cvar_get_index(v->name, &index) != MPI_SUCCESS) {
            snprintf(why, sizeof why, "the library has no control variable %.90s", v->name);
            return why;
        }
        if (PMPI_T_cvar_handle_alloc(index, NULL, &v->handle, &count) != MPI_SUCCESS || count != 1 ||
            PMPI_T_cvar_read(v->handle, &v->orig) != MPI_SUCCESS) {
            snprintf(why, sizeof why, "cannot use control variable %.90s", v->name);
            return why;
        }
        v->current = v->orig;
    }
    return NULL;
}

/* -------------------------------------------------------------------------- start / finish ---- */

/* node_of[world rank]: one allgather of host-name hashes on MPI_COMM_WORLD, inside MPI_Init. */
static void online_node_map(void)
{
    char host[TMPI_HOST_MAX];
    tmpi_host_name(host);
    on.node_of = online_calloc((size_t)tmpi_globals.world_size, sizeof *on.node_of);
    on.nnodes = tmpi_node_map(host, on.node_of);
}

static void online_disable(const char *why)
{
    on.enabled = 0;
    if (tmpi_globals.world_rank == 0)
        tmpi_warn("online mode off, the application runs untouched: %s", why);
}

static void online_start(void)
{
    on.enabled = 0;
    if (tmpi_globals.thread_level == MPI_THREAD_MULTIPLE) {
        online_disable("MPI_THREAD_MULTIPLE (a global algorithm switch would race with other threads)");
        return;
    }
    if (tmpi_globals.started_lazily) {
        online_disable("MPI was initialised before the interposer was active (MPI_Init not intercepted)");
        return;
    }
    online_node_map(); /* collective: done before any rank can decide differently */
    const char *path = getenv("TUNEMPI_ONLINE_TABLE");
    const char *err = path && path[0] ? online_read_table(path) : "TUNEMPI_ONLINE_TABLE is not set";
    if (!err)
        err = online_open_cvars();
    if (err) {
        char why[400];
        snprintf(why, sizeof why, "%s (%.200s)", err, path ? path : "");
        online_disable(why);
        return;
    }
    on.op_coll = online_calloc((size_t)tmpi_op_count, sizeof *on.op_coll);
    for (int op = 0; op < tmpi_op_count; op++)
        on.op_coll[op] = tmpi_op_table[op].kind == TMPI_KIND_COLL ? online_coll_index(tmpi_op_table[op].label)
                                                                   : -1;
    int me = tmpi_globals.world_rank, nrec = tmpi_globals.world_size;
    if (on.all_ranks_record) {
        on.recording = 1;
    } else {
        nrec = 0;
        for (int i = 0; i < on.nrecord_ranks; i++) {
            if (on.record_ranks[i] >= 0 && on.record_ranks[i] < tmpi_globals.world_size)
                nrec++;
            if (on.record_ranks[i] == me)
                on.recording = 1;
        }
    }
    if (on.recording && nrec > 0 && on.max_records > 0) {
        on.cap = (on.max_records + nrec - 1) / nrec;
        on.records = online_calloc((size_t)on.cap, sizeof *on.records);
    }
    on.enabled = 1;
}

/* A user communicator's state, on its first switchable call. */
static online_comm *online_comm_state(MPI_Comm comm, tmpi_comm_info *info)
{
    online_comm *cs = online_calloc(1, sizeof *cs);
    info->mode_data = cs;
    int inter = 0, size;
    PMPI_Comm_test_inter(comm, &inter);
    const int *members = tmpi_shape_members(info->shape, &size);
    cs->size = size;
    cs->stream = tmpi_online_stream_id(members, size);
    cs->key = tmpi_online_key(on.seed, on.run, cs->stream);
    /* off for inter-communicators and communicators with members outside MPI_COMM_WORLD */
    cs->enabled = !inter && size > 0 &&
                  tmpi_members_layout(members, size, on.node_of, on.nnodes, &cs->nodes, &cs->ppn) == 0;
    if (!cs->enabled)
        return cs;
    int nsizes = on.nbounds + 1;
    cs->cum = online_calloc((size_t)(on.ncolls * nsizes), sizeof *cs->cum);
    for (int c = 0; c < on.ncolls; c++)
        for (int s = 0; s < nsizes; s++)
            cs->cum[c * nsizes + s] = on.colls[c].uniform;
    for (int i = 0; i < on.ncells; i++) {
        const online_cell *cell = &on.cells[i];
        if (cell->ranks == size && cell->nodes == cs->nodes && cell->ppn == cs->ppn && cell->size_index >= 0 &&
            cell->size_index < nsizes)
            cs->cum[cell->coll * nsizes + cell->size_index] = cell->cum;
    }
    /* Algorithms restricted to another communicator size get probability 0 here (own copies). */
    for (int c = 0; c < on.ncolls; c++) {
        const online_coll *coll = &on.colls[c];
        int restricted = 0;
        for (int a = 1; a < coll->nalg; a++)
            restricted |= coll->algs[a].ranks_only > 0 && coll->algs[a].ranks_only != size;
        for (int s = 0; restricted && s < nsizes; s++) {
            const double *from = cs->cum[c * nsizes + s];
            double *p = online_calloc((size_t)coll->nalg, sizeof *p);
            for (int a = 0; a < coll->nalg; a++) {
                int allowed = a == 0 || coll->algs[a].ranks_only <= 0 || coll->algs[a].ranks_only == size;
                p[a] = allowed ? from[a] - (a ? from[a - 1] : 0.0) : 0.0;
            }
            if (!online_cumulate(p, coll->nalg)) { /* only excluded algorithms had weight */
                memset(p, 0, (size_t)coll->nalg * sizeof *p);
                p[0] = 1.0;
                online_cumulate(p, coll->nalg);
            }
            cs->cum[c * nsizes + s] = p;
            cs->owned = 1;
        }
    }
    cs->shadows = online_calloc((size_t)(on.ncolls * on.maxalg), sizeof *cs->shadows);
    for (int i = 0; i < on.ncolls * on.maxalg; i++)
        cs->shadows[i] = MPI_COMM_NULL;
    return cs;
}

static void online_free_owned(online_comm *cs)
{
    int nsizes = on.nbounds + 1;
    for (int c = 0; c < on.ncolls; c++)
        for (int s = 0; s < nsizes; s++) {
            const double *p = cs->cum[c * nsizes + s];
            int shared = p == on.colls[c].uniform;
            for (int i = 0; i < on.ncells && !shared; i++)
                shared = p == on.cells[i].cum;
            if (!shared)
                free((void *)p);
        }
}

/* Frees a user communicator's shadows (collective: called from its MPI_Comm_free on every member, and
 * every member created the same shadows, in the same order) and forgets it. */
static void online_comm_release(MPI_Comm comm)
{
    tmpi_comm_info *info = tmpi_comm_find(comm);
    online_comm *cs = info ? info->mode_data : NULL;
    if (cs != NULL) {
        for (int i = 0; cs->shadows && i < on.ncolls * on.maxalg; i++)
            if (cs->shadows[i] != MPI_COMM_NULL)
                PMPI_Comm_free(&cs->shadows[i]);
        free(cs->shadows);
        if (cs->owned)
            online_free_owned(cs);
        free(cs->cum);
        free(cs);
        info->mode_data = NULL;
    }
    tmpi_comm_forget(comm);
}

/* The shadow communicator of (collective c, algorithm a), created now if this is its first draw: every
 * member draws the same algorithm at the same call, so every member gets here together. The shadow is
 * an MPI_Comm_create over the whole group rather than an MPI_Comm_dup, so the application's attribute
 * copy callbacks never run for it. */
static MPI_Comm online_shadow(online_comm *cs, int c, int a, MPI_Comm user)
{
    MPI_Comm *slot = &cs->shadows[c * on.maxalg + a];
    if (*slot != MPI_COMM_NULL)
        return *slot;
    MPI_Group group;
    online_apply(&on.colls[c].algs[a]);
    PMPI_Comm_group(user, &group);
    int rc = PMPI_Comm_create(user, group, slot);
    PMPI_Group_free(&group);
    online_apply(&on.colls[c].algs[0]); /* communicators the application creates later get the default */
    if (rc != MPI_SUCCESS || *slot == MPI_COMM_NULL) {
        *slot = MPI_COMM_NULL;
        return user;
    }
    /* Errors come back to the mode, which reruns the call as the library's choice on the user's
     * communicator (whose handler then decides): an algorithm that refuses the arguments is never fatal. */
    PMPI_Comm_set_errhandler(*slot, MPI_ERRORS_RETURN);
    on.shadows_created++;
    return *slot;
}

static int online_size_index(uint64_t bytes)
{
    int s = 0;
    while (s < on.nbounds && bytes > on.bounds[s])
        s++;
    return s;
}

static int online_is_predefined(MPI_Op op)
{
    const MPI_Op predefined[] = {MPI_MAX,  MPI_MIN,  MPI_SUM,  MPI_PROD,   MPI_LAND,   MPI_BAND, MPI_LOR,
                                 MPI_BOR,  MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE};
    for (size_t i = 0; i < sizeof predefined / sizeof *predefined; i++)
        if (op == predefined[i])
            return 1;
    return 0;
}

/* The NEED_* bits this call does NOT meet. Every input is the same on every rank of the call (the op,
 * count, communicator size; MPI_IN_PLACE of the collectives where every rank passes it): every member
 * excludes the same algorithms, so the draws still agree. */
static int online_unmet(const tmpi_call *call, int size)
{
    int unmet = NEED_NEVER;
    if (call->mpi_op != MPI_OP_NULL) {
        int commute = 0;
        PMPI_Op_commutative(call->mpi_op, &commute);
        if (!commute)
            unmet |= NEED_COMMUTATIVE;
        if (!online_is_predefined(call->mpi_op))
            unmet |= NEED_BUILTIN_OP;
    }
    unmet |= call->buffer == MPI_IN_PLACE ? NEED_NOT_INPLACE : NEED_INPLACE;
    int pow2 = 1;
    while (pow2 * 2 <= size)
        pow2 *= 2;
    if (call->count < pow2)
        unmet |= NEED_COUNT_GE_POW2;
    if (pow2 != size)
        unmet |= NEED_POWER_OF_TWO;
    if (size != 2)
        unmet |= NEED_TWO_RANKS;
    if (size > 4)
        unmet |= NEED_AT_MOST_FOUR_RANKS;
    return unmet;
}

/* The draw among the algorithms the call meets: u scaled to their share of the cell's probability.
 * Nothing but the default left: the default (the library's own choice). */
static int online_pick_allowed(const online_coll *coll, const double *cum, double u, int unmet)
{
    double allowed = 0;
    for (int a = 0; a < coll->nalg; a++)
        if (!(coll->algs[a].requires & unmet))
            allowed += cum[a] - (a ? cum[a - 1] : 0.0);
    if (!(allowed > 0))
        return 0;
    double target = u * allowed, run = 0;
    int last = 0;
    for (int a = 0; a < coll->nalg; a++) {
        if (coll->algs[a].requires & unmet)
            continue;
        run += cum[a] - (a ? cum[a - 1] : 0.0);
        last = a;
        if (target < run)
            return a;
    }
    return last;
}

/* The datatype requirements (NEED_CONTIGUOUS, NEED_TRUE_LB_ZERO) one datatype does not meet. Contiguous:
 * a predefined type, or a derived one with no gaps and both lower bounds 0. */
static int online_datatype_unmet(MPI_Datatype type)
{
    if (type == MPI_DATATYPE_NULL)
        return 0;
    int ints, addresses, types, combiner;
    PMPI_Type_get_envelope(type, &ints, &addresses, &types, &combiner);
    if (combiner == MPI_COMBINER_NAMED)
        return 0;
    MPI_Count size, lb, extent, true_lb, true_extent;
    PMPI_Type_size_x(type, &size);
    PMPI_Type_get_extent_x(type, &lb, &extent);
    PMPI_Type_get_true_extent_x(type, &true_lb, &true_extent);
    int unmet = true_lb != 0 ? NEED_TRUE_LB_ZERO : 0;
    if (lb != 0 || true_lb != 0 || size != extent || size != true_extent)
        unmet |= NEED_CONTIGUOUS;
    return unmet;
}

static long long online_type_size(MPI_Datatype type)
{
    MPI_Count size = -1;
    if (type != MPI_DATATYPE_NULL)
        PMPI_Type_size_x(type, &size);
    return (long long)size;
}

/* The datatype requirements some rank of the call does not meet. Datatypes may differ between ranks (only
 * their signatures must match: a root's 512 ints may arrive as one derived element of 512 ints), so no rank
 * can decide alone: the ranks agree with one allreduce (MPI_MAX over what each misses and over its count
 * and datatype size, and their negations for the minimum), run only when the draw, identical on every
 * rank, fell on an algorithm with a datatype requirement. Intercommunicators are not agreed (the allreduce
 * would return the other group's answer): every datatype requirement counts as unmet there. */
static int online_datatypes_unmet(const tmpi_call *call)
{
    int inter = 0;
    PMPI_Comm_test_inter(call->comm, &inter);
    if (inter)
        return NEED_DATATYPES;
    int mine = online_datatype_unmet(call->datatype);
    if (call->buffer != MPI_IN_PLACE)
        mine |= online_datatype_unmet(call->send_datatype);
    /* The bytes are the same on every rank: equal datatype sizes mean equal counts, on both sides. */
    long long count = (long long)call->count, size = online_type_size(call->datatype),
              send_size = call->buffer != MPI_IN_PLACE ? online_type_size(call->send_datatype) : -1;
    long long in[8] = {(mine & NEED_CONTIGUOUS) != 0, (mine & NEED_TRUE_LB_ZERO) != 0, count, -count,
                       size, -size, send_size, -send_size};
    long long out[8];
    on.datatype_agreements++;
    if (PMPI_Allreduce(in, out, 8, MPI_LONG_LONG, MPI_MAX, call->comm) != MPI_SUCCESS)
        return NEED_DATATYPES;
    int all = (out[0] ? NEED_CONTIGUOUS : 0) | (out[1] ? NEED_TRUE_LB_ZERO : 0);
    for (int i = 2; i < 8; i += 2)
        if (out[i] != -out[i + 1]) /* max != min: some rank passes another count or datatype size */
            all |= NEED_SAME_COUNTS;
    return all;
}

/* After a wait or test: every recorded collective of its snapshot counts the call's time as waited for it;
 * the completed ones end their records here. */
static void online_inflight_complete(const tmpi_call *call)
{
    for (size_t k = 0; k < inflight.seen; k++) {
        long record = *(long *)tmpi_inflight_payload(&inflight, inflight.seen_list[k].slot);
        on.records[record].blocked += call->t_end - call->t_begin;
        if (tmpi_inflight_completed(&inflight, call, k))
            on.records[record].end = call->t_end - tmpi_globals.t_start;
    }
    tmpi_inflight_drop_completed(&inflight, call);
}

static void online_begin(tmpi_call *call)
{
    pending.active = 0;
    pending.restore = 0;
    pending.retrying = 0;
    pending.errhandler_set = 0;
    pending.user_comm = call->comm;
    /* Times are only needed for a record: not on ranks that do not record, nor after the cap. */
    call->untimed = on.nrecords >= on.cap;
    int c = on.enabled ? on.op_coll[call->op] : -1;
    if (c < 0) {
        call->untimed = 1;
        inflight.seen = 0;
        if (TMPI_UNLIKELY(inflight.count > 0) && tmpi_op_table[call->op].kind == TMPI_KIND_TIMED) {
            tmpi_inflight_snapshot(&inflight, call); /* a wait or test that may complete a recorded collective */
            call->untimed = inflight.seen == 0;
        } else if (inflight.count > 0 && tmpi_op_table[call->op].kind == TMPI_KIND_REQUEST_FREE) {
            tmpi_inflight_remove(&inflight, *call->requests); /* its record never ends (and is not written) */
        }
        if (on.enabled && tmpi_op_table[call->op].kind == TMPI_KIND_COMM_FREE)
            online_comm_release(call->comm);
        else if (tmpi_op_table[call->op].kind == TMPI_KIND_COMM_FREE)
            tmpi_comm_forget(call->comm);
        return;
    }
    tmpi_comm_info *info = tmpi_comm_lookup(call->comm);
    online_comm *cs = info->mode_data ? info->mode_data : online_comm_state(call->comm, info);
    if (!cs->enabled)
        return;
    const online_coll *coll = &on.colls[c];
    const double *cum = cs->cum[c * (on.nbounds + 1) + online_size_index(call->bytes)];
    uint64_t seq = cs->calls++;
    double u = tmpi_online_draw(cs->key, seq);
    int a, unmet = coll->any_requires ? online_unmet(call, cs->size) : 0, excluded = 0;
    for (int i = 1; unmet && i < coll->nalg && !excluded; i++)
        excluded = (coll->algs[i].requires & unmet) != 0;
    if (excluded) {
        a = online_pick_allowed(coll, cum, u, unmet);
        on.restricted_calls++;
    } else {
        a = tmpi_online_pick(cum, coll->nalg, u);
    }
    if (coll->algs[a].requires & NEED_DATATYPES) {
        int datatypes = online_datatypes_unmet(call);
        if (coll->algs[a].requires & datatypes) {
            /* the same u, more unmet requirements: every rank draws again, the same way */
            unmet |= datatypes;
            a = online_pick_allowed(coll, cum, u, unmet);
            if (!excluded)
                on.restricted_calls++;
        }
    }
    if (coll->needs_new_comm) {
        if (a != 0)
            call->comm = online_shadow(cs, c, a, call->comm);
    } else {
        /* The library is back in its start state between calls (the end hook undoes the writes):
         * composite algorithms read other collectives' cvars (MPICH's smp allreduce runs a reduce and
         * a bcast inside), and so do calls the mode does not see (communicator constructors, non-blocking
         * collectives). Values left behind by draws on disjoint communicators (the halves of a split)
         * would differ between ranks and mismatch those inner calls: measured as a hang (smp allreduce
         * on MPI_COMM_WORLD after draws on the split halves) when the writes were left in place. Both
         * writes are outside the timed section; a pinned default writes nothing. */
        if (a != 0) {
            online_apply_drawn(&coll->algs[a], cs->nodes);
            pending.restore = 1;
            /* The algorithm's writes include the library's strict selection where it has one (MPICH:
             * fallback=error): a drawn algorithm that cannot take these arguments returns an error instead
             * of silently running another one, whose time would be recorded under the drawn name. */
            PMPI_Comm_get_errhandler(call->comm, &pending.errhandler);
            PMPI_Comm_set_errhandler(call->comm, MPI_ERRORS_RETURN);
            pending.errhandler_set = 1;
        }
    }
    on.switchable_calls++;
    pending.active = 1;
    pending.coll = c;
    pending.alg = a;
    pending.comm = cs;
    pending.seq = seq;
}

/* Whether an error of a drawn algorithm is the library refusing the arguments (a `refusal` text in its
 * error string), as opposed to a failure: only a refusal is run again as the library's choice. */
static int online_is_refusal(int rc)
{
    if (on.nrefusals == 0)
        return 0;
    char text[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (PMPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        return 0;
    text[len < 0 ? 0 : len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len] = '\0';
    for (int i = 0; i < on.nrefusals; i++)
        if (strstr(text, on.refusals[i]) != NULL)
            return 1;
    return 0;
}

static void online_end(tmpi_call *call)
{
    if (TMPI_UNLIKELY(inflight.seen > 0))
        online_inflight_complete(call);
    if (!pending.active)
        return;
    if (pending.retrying) { /* the rerun as the library's choice: not recorded (its time includes the refusal) */
        pending.active = 0;
        if (call->rc != MPI_SUCCESS)
            PMPI_Comm_call_errhandler(pending.user_comm, call->rc);
        return;
    }
    if (pending.restore)
        online_apply(&on.colls[pending.coll].algs[0]);
    if (pending.errhandler_set) {
        PMPI_Comm_set_errhandler(pending.user_comm, pending.errhandler);
        PMPI_Errhandler_free(&pending.errhandler);
    }
    if (call->rc != MPI_SUCCESS && pending.alg != 0) {
        if (online_is_refusal(call->rc)) {
            /* Refused by the drawn algorithm: the library's usability checks read only arguments every
             * rank of the call shares (op, count, communicator size, MPI_IN_PLACE where every rank passes
             * it; docs/online.md 2d cites MPICH's sources) and come before any communication, so every
             * member refuses together: run it again as the library's own choice on the user's
             * communicator. */
            on.refused_calls++;
            pending.retrying = 1;
            call->comm = pending.user_comm;
            call->retry = 1;
            return;
        }
        /* Any other error may be this rank's alone (a root-only argument, a failure half-way through the
         * algorithm): the other ranks may be inside the algorithm, waiting for this one, so a rerun here
         * would hang them or mismatch their messages. The library's error goes to the user's handler, as
         * the library's own call would have it. */
        on.failed_draws++;
        pending.active = 0;
        PMPI_Comm_call_errhandler(pending.user_comm, call->rc);
        return;
    }
    pending.active = 0;
    if (call->rc != MPI_SUCCESS || on.nrecords >= on.cap)
        return;
    online_record *r = &on.records[on.nrecords++];
    r->rank = tmpi_globals.world_rank;
    r->coll = pending.coll;
    r->alg = pending.alg;
    r->ranks = pending.comm->size;
    r->nodes = pending.comm->nodes;
    r->ppn = pending.comm->ppn;
    r->bytes = call->bytes;
    r->seq = pending.seq;
    r->stream = pending.comm->stream;
    r->start = call->t_begin - tmpi_globals.t_start;
    r->end = call->t_end - tmpi_globals.t_start;
    r->call = call->t_end - call->t_begin;
    r->blocked = 0;
    if (!tmpi_op_table[call->op].blocking) { /* started: it ends when a wait or test completes it */
        r->end = 0;
        long *record = tmpi_inflight_add(&inflight, *call->requests);
        if (record != NULL)
            *record = on.nrecords - 1;
    }
}

/* Rank 0 writes every rank's records: header lines, then CSV. */
static void online_write(const online_record *all, long n, const char *path)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        tmpi_warn("cannot write the online records to %s", tmp);
        return;
    }
    fprintf(f, "# tunempi-online-records 1\n# fingerprint %s\n# batch %d\n# run %llu\n# world_ranks %d\n"
               "# world_nodes %d\n# rank0_switchable_calls %llu\n# rank0_cvar_writes %llu\n"
               "# rank0_shadow_communicators %llu\n# rank0_restricted_draws %llu\n# rank0_refused_draws %llu\n"
               "# rank0_datatype_agreements %llu\n# rank0_failed_draws %llu\n",
            on.fingerprint, on.batch, (unsigned long long)on.run, tmpi_globals.world_size, on.nnodes,
            (unsigned long long)on.switchable_calls, (unsigned long long)on.switches,
            (unsigned long long)on.shadows_created, (unsigned long long)on.restricted_calls,
            (unsigned long long)on.refused_calls, (unsigned long long)on.datatype_agreements,
            (unsigned long long)on.failed_draws);
    fputs("rank,seq,stream,collective,msg_bytes,ranks,nodes,ppn,algorithm,start_ns,end_ns,call_ns,blocked_ns\n", f);
    for (long i = 0; i < n; i++) {
        const online_record *r = &all[i];
        const online_coll *c = &on.colls[r->coll];
        fprintf(f, "%d,%llu,%016llx,%s,%llu,%d,%d,%d,%s,%llu,%llu,%llu,%llu\n", r->rank, (unsigned long long)r->seq,
                (unsigned long long)r->stream, c->label, (unsigned long long)r->bytes, r->ranks, r->nodes, r->ppn,
                c->algs[r->alg].name, (unsigned long long)r->start, (unsigned long long)r->end,
                (unsigned long long)r->call, (unsigned long long)r->blocked);
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        tmpi_warn("cannot write the online records to %s", path);
}

static void online_finish(void)
{
    if (!on.enabled)
        return;
    on.enabled = 0;
    online_apply(&on.colls[0].algs[0]); /* leave the library as it was (collective 0 is enough: */
    for (int c = 1; c < on.ncolls; c++) /* the default of each collective restores its cvars) */
        online_apply(&on.colls[c].algs[0]);
    long kept = 0;
    for (long i = 0; i < on.nrecords; i++) {
        if (on.records[i].end == 0)
            continue; /* a non-blocking collective never seen completed */
        on.records[kept] = on.records[i];
        on.records[kept].start = tmpi_ticks_to_ns(on.records[i].start);
        on.records[kept].call = tmpi_ticks_to_ns(on.records[i].call);
        on.records[kept].blocked = tmpi_ticks_to_ns(on.records[i].blocked);
        on.records[kept++].end = tmpi_ticks_to_ns(on.records[i].end);
    }
    on.nrecords = kept;
    int size = tmpi_globals.world_size, me = tmpi_globals.world_rank;
    int mine = (int)(on.nrecords * (long)sizeof(online_record));
    int *counts = me == 0 ? online_calloc((size_t)size, sizeof *counts) : NULL;
    int *displs = me == 0 ? online_calloc((size_t)size, sizeof *displs) : NULL;
    PMPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    long total = 0;
    if (me == 0)
        for (int r = 0; r < size; r++) {
            displs[r] = (int)total;
            total += counts[r];
        }
    char *all = me == 0 ? online_calloc((size_t)total + 1, 1) : NULL;
    PMPI_Gatherv(on.records, mine, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    const char *path = getenv("TUNEMPI_ONLINE_OUT");
    if (me == 0 && path && path[0])
        online_write((const online_record *)(void *)all, total / (long)sizeof(online_record), path);
    free(all);
    free(counts);
    free(displs);
    for (int i = 0; i < on.ncvars; i++)
        PMPI_T_cvar_handle_free(&on.cvars[i].handle);
    PMPI_T_finalize();
}

static void online_pcontrol(int level)
{
    (void)level; /* the online mode ignores MPI_Pcontrol */
}

const tmpi_mode tmpi_online_mode = {"online", online_start, online_begin, online_end, online_pcontrol,
                                    online_finish};
