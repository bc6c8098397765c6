/* tunempi benchmark engine: one launch measures many (collective, algorithm, size) points.
 *
 * Protocol (text lines; the Python driver is tunempi/bench/engine.py):
 *   rank 0 reads requests from stdin and broadcasts each to every rank;
 *     point id=<n> coll=<name> bytes=<n> cvar=<name|-> set=<int|default|keep> newcomm=<0|1>
 *           warmup=<n> min_iters=<n> max_iters=<n> rel_ci=<x> time_cap=<seconds> [spoil_every=<n>]
 *     quit                       (end of input also quits)
 *   rank 0 answers with ONE JSON line per request on stdout, flushed, and a "ready" line at start.
 * `set=<int>` writes the algorithm cvar through MPI_T on every rank; `set=default` restores every cvar this
 * engine has written to the value it had at start; `set=keep` writes nothing (algorithm forced through the
 * environment). `newcomm=1` measures on a communicator duplicated after the write (Open MPI honours a
 * written algorithm only on communicators created after it). The cvar is read back and reported.
 *
 * Measurement: warm-up iterations, then batches of barrier-synchronised iterations; each iteration's time
 * is the maximum over ranks; rank 0 stops when the 95 % confidence interval of the median is narrow enough
 * (half-width <= rel_ci * median, after min_iters), at max_iters, or when time_cap is spent. Every
 * iteration's result is checked; an iteration counts as wrong when any rank's result is wrong.
 * spoil_every=n (a self-test of that check) spoils one byte of the result of every n-th iteration.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"

#define MAX_LINE 4096
#define MAX_CVARS 64
#define MAX_NAME 128

typedef struct {
    char name[MAX_NAME];
    MPI_T_cvar_handle handle;
    int initial; /* value at first use: what `set=default` restores */
} cvar_slot;

typedef enum { SET_KEEP, SET_DEFAULT, SET_VALUE } set_mode;

typedef struct {
    long id;
    char coll[MAX_NAME];
    long long bytes;
    char cvar[MAX_NAME]; /* empty: none */
    set_mode set;
    int set_value;
    int newcomm;
    int spoil_every; /* self-test: spoil the result of every n-th iteration (0: never) */
    int warmup;
    int min_iters;
    int max_iters;
    double rel_ci;
    double time_cap;
} request;

typedef struct {
    MPI_Comm ctrl; /* requests and the reductions of per-iteration times */
    MPI_Comm meas; /* the measured communicator; re-created after cvar writes when asked */
    int rank;
    int size;
    int mpi_t;
    cvar_slot cvars[MAX_CVARS];
    int ncvars;
    int written_since_dup;
    double *local;   /* [times(batch) | wrong flags(batch)] of this rank */
    double *reduced; /* the same, maximum over ranks (rank 0) */
    double *samples; /* per-iteration maxima of the point, rank 0 */
    double *sorted;
    size_t capacity;
} engine;

/* ---------------------------------------------------------------- output (rank 0) */

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", out);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static void print_error(long id, const char *fmt, ...)
{
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    printf("{\"event\":\"point\",\"id\":%ld,\"status\":\"error\",\"error\":", id);
    json_string(stdout, message);
    printf("}\n");
    fflush(stdout);
}

/* ---------------------------------------------------------------- requests */

static int parse_long(const char *text, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end || value < lo || value > hi)
        return -1;
    *out = value;
    return 0;
}

static int parse_double(const char *text, double *out)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(value) || value < 0)
        return -1;
    *out = value;
    return 0;
}

/* Parses "point key=value ..." into `req`; returns 0, or -1 with `why` filled. */
static int parse_point(char *line, request *req, char *why, size_t why_len)
{
    memset(req, 0, sizeof *req);
    req->id = -1;
    req->set = SET_KEEP;
    req->warmup = 2;
    req->min_iters = 10;
    req->max_iters = 1000;
    req->rel_ci = 0.05;
    req->time_cap = 1.0;
    char *save = NULL;
    strtok_r(line, " \t", &save); /* "point" */
    for (char *tok = strtok_r(NULL, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(why, why_len, "token without '=': %s", tok);
            return -1;
        }
        *eq = '\0';
        const char *key = tok, *val = eq + 1;
        long long n = 0;
        int bad = 0;
        if (strcmp(key, "id") == 0) {
            bad = parse_long(val, 0, 1LL << 62, &n);
            req->id = (long)n;
        } else if (strcmp(key, "coll") == 0) {
            bad = strlen(val) >= MAX_NAME;
            snprintf(req->coll, sizeof req->coll, "%s", val);
        } else if (strcmp(key, "bytes") == 0) {
            bad = parse_long(val, 0, 1LL << 40, &req->bytes);
        } else if (strcmp(key, "cvar") == 0) {
            bad = strlen(val) >= MAX_NAME;
            snprintf(req->cvar, sizeof req->cvar, "%s", strcmp(val, "-") == 0 ? "" : val);
        } else if (strcmp(key, "set") == 0) {
            if (strcmp(val, "keep") == 0) {
                req->set = SET_KEEP;
            } else if (strcmp(val, "default") == 0) {
                req->set = SET_DEFAULT;
            } else {
                req->set = SET_VALUE;
                bad = parse_long(val, -2147483647LL, 2147483647LL, &n);
                req->set_value = (int)n;
            }
        } else if (strcmp(key, "newcomm") == 0) {
            bad = parse_long(val, 0, 1, &n);
            req->newcomm = (int)n;
        } else if (strcmp(key, "spoil_every") == 0) {
            bad = parse_long(val, 0, 1000000, &n);
            req->spoil_every = (int)n;
        } else if (strcmp(key, "warmup") == 0) {
            bad = parse_long(val, 0, 1000000, &n);
            req->warmup = (int)n;
        } else if (strcmp(key, "min_iters") == 0) {
            bad = parse_long(val, 1, 10000000, &n);
            req->min_iters = (int)n;
        } else if (strcmp(key, "max_iters") == 0) {
            bad = parse_long(val, 1, 10000000, &n);
            req->max_iters = (int)n;
        } else if (strcmp(key, "rel_ci") == 0) {
            bad = parse_double(val, &req->rel_ci);
        } else if (strcmp(key, "time_cap") == 0) {
            bad = parse_double(val, &req->time_cap);
        } else {
            snprintf(why, why_len, "unknown key %s", key);
            return -1;
        }
        if (bad) {
            snprintf(why, why_len, "bad value for %s: %s", key, val);
            return -1;
        }
    }
    if (req->id < 0 || !req->coll[0]) {
        snprintf(why, why_len, "a point needs id= and coll=");
        return -1;
    }
    if (req->max_iters < req->min_iters)
        req->max_iters = req->min_iters;
    if (req->cvar[0] == '\0' && req->set == SET_VALUE) {
        snprintf(why, why_len, "set=<int> needs a cvar");
        return -1;
    }
    return 0;
}

/* Rank 0 reads one line and every rank receives it. Returns 0, or -1 at end of input. */
static int next_line(engine *e, char *line)
{
    int length = 0;
    if (e->rank == 0) {
        if (!fgets(line, MAX_LINE, stdin)) {
            length = -1;
        } else {
            length = (int)strlen(line);
            if (length == MAX_LINE - 1 && line[length - 1] != '\n') {
                int ch;
                while ((ch = getchar()) != EOF && ch != '\n')
                    ;
                snprintf(line, MAX_LINE, "toolong");
                length = (int)strlen(line);
            }
            while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r'))
                line[--length] = '\0';
        }
    }
    /* Ranks other than 0 wait for the next request asleep rather than spinning in MPI_Bcast (MPICH
     * busy-polls): between points the CPU goes to the driver, or to whatever else shares the node. */
    MPI_Request pending;
    MPI_Ibcast(&length, 1, MPI_INT, 0, e->ctrl, &pending);
    if (e->rank == 0) {
        MPI_Wait(&pending, MPI_STATUS_IGNORE);
    } else {
        const struct timespec nap = {0, 50 * 1000}; /* 50 us: small next to a point's measuring time */
        int arrived = 0;
        for (MPI_Test(&pending, &arrived, MPI_STATUS_IGNORE); !arrived;
             MPI_Test(&pending, &arrived, MPI_STATUS_IGNORE))
            nanosleep(&nap, NULL);
    }
    if (length < 0)
        return -1;
    MPI_Bcast(line, length + 1, MPI_CHAR, 0, e->ctrl);
    return 0;
}

/* ---------------------------------------------------------------- MPI_T */

/* The slot of cvar `name`, allocated on first use; NULL with `why` filled when it cannot be used. */
static cvar_slot *cvar_lookup(engine *e, const char *name, char *why, size_t why_len)
{
    for (int i = 0; i < e->ncvars; i++)
        if (strcmp(e->cvars[i].name, name) == 0)
            return &e->cvars[i];
    if (!e->mpi_t) {
        snprintf(why, why_len, "MPI_T is not available");
        return NULL;
    }
    if (e->ncvars == MAX_CVARS) {
        snprintf(why, why_len, "too many distinct cvars");
        return NULL;
    }
    int index;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) {
        snprintf(why, why_len, "unknown cvar %s", name);
        return NULL;
    }
    char info_name[256], desc[16];
    int name_len = sizeof info_name, desc_len = sizeof desc, verbosity, bind, scope;
    MPI_Datatype datatype;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(index, info_name, &name_len, &verbosity, &datatype, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS) {
        snprintf(why, why_len, "MPI_T_cvar_get_info failed for %s", name);
        return NULL;
    }
    if (datatype != MPI_INT || bind != MPI_T_BIND_NO_OBJECT) {
        snprintf(why, why_len, "cvar %s is not an unbound int", name);
        return NULL;
    }
    cvar_slot *slot = &e->cvars[e->ncvars];
    int count;
    if (MPI_T_cvar_handle_alloc(index, NULL, &slot->handle, &count) != MPI_SUCCESS || count != 1) {
        snprintf(why, why_len, "MPI_T_cvar_handle_alloc failed for %s", name);
        return NULL;
    }
    if (MPI_T_cvar_read(slot->handle, &slot->initial) != MPI_SUCCESS) {
        MPI_T_cvar_handle_free(&slot->handle);
        snprintf(why, why_len, "MPI_T_cvar_read failed for %s", name);
        return NULL;
    }
    snprintf(slot->name, sizeof slot->name, "%s", name);
    e->ncvars++;
    return slot;
}

static int cvar_write(engine *e, cvar_slot *slot, int value, char *why, size_t why_len)
{
    if (MPI_T_cvar_write(slot->handle, &value) != MPI_SUCCESS) {
        snprintf(why, why_len, "MPI_T_cvar_write of %d to %s failed (read-only?)", value, slot->name);
        return -1;
    }
    e->written_since_dup = 1;
    return 0;
}

/* ---------------------------------------------------------------- measurement */

static int reserve(engine *e, size_t n)
{
    if (n <= e->capacity)
        return 0;
    size_t capacity = n < 1024 ? 1024 : n;
    double *local = realloc(e->local, 2 * capacity * sizeof(double));
    if (local)
        e->local = local;
    double *reduced = realloc(e->reduced, 2 * capacity * sizeof(double));
    if (reduced)
        e->reduced = reduced;
    double *samples = realloc(e->samples, capacity * sizeof(double));
    if (samples)
        e->samples = samples;
    double *sorted = realloc(e->sorted, capacity * sizeof(double));
    if (sorted)
        e->sorted = sorted;
    if (!local || !reduced || !samples || !sorted)
        return -1;
    e->capacity = capacity;
    return 0;
}

/* Runs `batch` iterations; on rank 0, stores per-iteration maxima in samples[first..] (when `samples`
 * is not NULL) and returns the number of wrong iterations. */
static int run_batch(engine *e, tm_case *c, int batch, uint32_t *iteration, double *samples, int spoil_every)
{
    for (int k = 0; k < batch; k++) {
        tm_case_fill(c, *iteration);
        MPI_Barrier(e->meas);
        double start = MPI_Wtime();
        tm_case_run(c);
        double stop = MPI_Wtime();
        e->local[k] = stop - start;
        if (spoil_every && (*iteration + 1) % (uint32_t)spoil_every == 0)
            tm_case_spoil(c);
        e->local[batch + k] = tm_case_check(c, *iteration);
        (*iteration)++;
    }
    MPI_Reduce(e->local, e->reduced, 2 * batch, MPI_DOUBLE, MPI_MAX, 0, e->ctrl);
    int wrong = 0;
    if (e->rank == 0) {
        for (int k = 0; k < batch; k++) {
            if (samples)
                samples[k] = e->reduced[k];
            wrong += e->reduced[batch + k] != 0.0;
        }
    }
    return wrong;
}

static void measure_point(engine *e, request *req)
{
    char why[512] = "";
    int failed = 0;
    cvar_slot *slot = NULL;
    tm_collective kind = tm_collective_from_name(req->coll);
    if (kind == TM_UNKNOWN) {
        snprintf(why, sizeof why, "unknown collective %s", req->coll);
        failed = 1;
    }
    if (!failed && req->cvar[0]) {
        slot = cvar_lookup(e, req->cvar, why, sizeof why);
        failed = slot == NULL;
    }
    if (!failed && req->set == SET_VALUE)
        failed = cvar_write(e, slot, req->set_value, why, sizeof why) != 0;
    if (!failed && req->set == SET_DEFAULT)
        for (int i = 0; i < e->ncvars && !failed; i++)
            failed = cvar_write(e, &e->cvars[i], e->cvars[i].initial, why, sizeof why) != 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, e->ctrl);
    if (any_failed) {
        if (e->rank == 0)
            print_error(req->id, "%s", failed ? why : "failed on another rank");
        return;
    }
    if (req->newcomm && e->written_since_dup) {
        MPI_Comm_free(&e->meas);
        MPI_Comm_dup(MPI_COMM_WORLD, &e->meas);
        e->written_since_dup = 0;
    }
    int readback[2] = {0, 0}, readback_range[2] = {0, 0};
    if (slot) {
        MPI_T_cvar_read(slot->handle, &readback[0]);
        readback[1] = -readback[0];
        MPI_Allreduce(readback, readback_range, 2, MPI_INT, MPI_MAX, e->ctrl); /* max and -min */
    }

    tm_case c;
    failed = tm_case_init(&c, kind, (size_t)req->bytes, e->meas) != 0 || reserve(e, (size_t)req->max_iters) != 0 ||
             reserve(e, (size_t)req->warmup) != 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, e->ctrl);
    if (any_failed) {
        if (e->rank == 0)
            print_error(req->id, "cannot set up %s with %lld bytes (size not valid or out of memory)", req->coll,
                        req->bytes);
        tm_case_free(&c);
        return;
    }

    uint32_t iteration = 0;
    int wrong = req->warmup ? run_batch(e, &c, req->warmup, &iteration, NULL, req->spoil_every) : 0;
    const char *stop_reason = "max_iters";
    int batch = req->min_iters;
    size_t n = 0;
    tm_median_ci ci = {0, 0, 0};
    double start = MPI_Wtime(), elapsed = 0;
    while (batch > 0) {
        wrong += run_batch(e, &c, batch, &iteration, e->samples + n, req->spoil_every);
        n += (size_t)batch;
        int next = 0;
        if (e->rank == 0) {
            elapsed = MPI_Wtime() - start;
            memcpy(e->sorted, e->samples, n * sizeof(double));
            tm_sort(e->sorted, n);
            ci = tm_median_confidence(e->sorted, n);
            if (n >= (size_t)req->max_iters) {
                stop_reason = "max_iters";
            } else if (req->rel_ci > 0 && (ci.ci_high - ci.ci_low) / 2 <= req->rel_ci * ci.median) {
                stop_reason = "ci";
            } else if (elapsed >= req->time_cap) {
                stop_reason = "time_cap";
            } else {
                /* Grow batches geometrically (few reductions), but stay within max_iters and the time cap. */
                double per_iteration = elapsed / (double)n;
                double affordable = per_iteration > 0 ? (req->time_cap - elapsed) / per_iteration : 1e9;
                next = (int)(n / 2);
                if ((double)next > affordable)
                    next = (int)affordable;
                if (next > req->max_iters - (int)n)
                    next = req->max_iters - (int)n;
                if (next < 1)
                    next = 1;
            }
        }
        MPI_Bcast(&next, 1, MPI_INT, 0, e->ctrl);
        batch = next;
    }
    tm_case_free(&c);
    if (e->rank != 0)
        return;

    printf("{\"event\":\"point\",\"id\":%ld,\"status\":\"ok\",\"collective\":", req->id);
    json_string(stdout, req->coll);
    printf(",\"bytes\":%lld,\"ranks\":%d,\"cvar\":", req->bytes, e->size);
    if (slot) {
        json_string(stdout, slot->name);
        printf(",\"cvar_value\":%d,\"cvar_consistent\":%s", readback[0],
               readback_range[0] == -readback_range[1] ? "true" : "false");
    } else {
        printf("null,\"cvar_value\":null,\"cvar_consistent\":true");
    }
    printf(",\"warmup\":%d,\"iterations\":%zu,\"errors\":%d,\"checked\":%zu,\"stop\":\"%s\",\"elapsed_s\":%.6f",
           req->warmup, n, wrong, n + (size_t)req->warmup, stop_reason, elapsed);
    printf(",\"median_us\":%.6f,\"ci_low_us\":%.6f,\"ci_high_us\":%.6f,\"samples_us\":[", ci.median * 1e6,
           ci.ci_low * 1e6, ci.ci_high * 1e6);
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%.6f" : "%.6f", e->samples[i] * 1e6);
    printf("]}\n");
    fflush(stdout);
}

/* ---------------------------------------------------------------- start-up */

static void print_ready(engine *e)
{
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int host_len = 0;
    MPI_Get_processor_name(host, &host_len);
    char *hosts = NULL;
    if (e->rank == 0)
        hosts = calloc((size_t)e->size, MPI_MAX_PROCESSOR_NAME);
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, e->ctrl);
    if (e->rank != 0)
        return;
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int version_len = 0;
    MPI_Get_library_version(version, &version_len);
    printf("{\"event\":\"ready\",\"ranks\":%d,\"mpi_t\":%s,\"library\":", e->size, e->mpi_t ? "true" : "false");
    json_string(stdout, version);
    printf(",\"hosts\":[");
    int printed = 0;
    for (int r = 0; r < e->size; r++) {
        const char *name = hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME;
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = strcmp(name, hosts + (size_t)q * MPI_MAX_PROCESSOR_NAME) == 0;
        if (seen)
            continue;
        if (printed++)
            fputc(',', stdout);
        json_string(stdout, name);
    }
    printf("]}\n");
    fflush(stdout);
    free(hosts);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    engine e;
    memset(&e, 0, sizeof e);
    int provided;
    e.mpi_t = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS;
    MPI_Comm_dup(MPI_COMM_WORLD, &e.ctrl);
    MPI_Comm_dup(MPI_COMM_WORLD, &e.meas);
    MPI_Comm_rank(e.ctrl, &e.rank);
    MPI_Comm_size(e.ctrl, &e.size);
    print_ready(&e);

    char line[MAX_LINE];
    while (next_line(&e, line) == 0) {
        if (line[0] == '\0')
            continue;
        if (strcmp(line, "quit") == 0)
            break;
        if (strncmp(line, "point ", 6) != 0) {
            if (e.rank == 0)
                print_error(-1, "unknown request: %.100s", line);
            continue;
        }
        request req;
        char why[256];
        if (parse_point(line, &req, why, sizeof why) != 0) {
            if (e.rank == 0)
                print_error(req.id, "%s", why);
            continue;
        }
        measure_point(&e, &req);
    }

    for (int i = 0; i < e.ncvars; i++)
        MPI_T_cvar_handle_free(&e.cvars[i].handle);
    if (e.mpi_t)
        MPI_T_finalize();
    free(e.local);
    free(e.reduced);
    free(e.samples);
    free(e.sorted);
    MPI_Comm_free(&e.meas);
    MPI_Comm_free(&e.ctrl);
    MPI_Finalize();
    return 0;
}
