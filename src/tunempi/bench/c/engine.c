/* tunempi benchmark engine: one launch measures many (collective, algorithm, size) points.
 *
 * Protocol (text lines; the Python driver is tunempi/bench/engine.py):
 *   rank 0 reads requests from stdin and broadcasts each to every rank;
 *     point id=<n> coll=<name> bytes=<n> cvar=<name|-> set=<int|default|keep> newcomm=<0|1>
 *           warmup=<n> min_iters=<n> max_iters=<n> rel_ci=<x> time_cap=<seconds> [back_to_back=<n>]
 *           [spoil_every=<n>] [dist=<uniform|skewed|sparse>] [nb=<latency|overlap|time> [compute=<seconds>]]
 *     setup id=<n> cvar=<name> set=<int> [newcomm=1]   (a cvar kept for the whole launch)
 *     quit                       (end of input also quits)
 *   rank 0 answers with ONE JSON line per request on stdout, flushed, and a "ready" line at start.
 * `set=<int>` writes the algorithm cvar through MPI_T on every rank (and puts back every other cvar written
 * before to its start-up value, except the point's `also=<cvar>:<int>[,...]` writes, made first); `set=default` restores every cvar this engine has written to the value it
 * had at start; `set=keep` writes nothing (algorithm forced through the environment). `newcomm=1` measures on a communicator duplicated after the write (Open MPI honours a
 * written algorithm only on communicators created after it). The cvar is read back and reported.
 *
 * Measurement: warm-up iterations, then batches of barrier-synchronised iterations; each iteration's time
 * is the maximum over ranks; rank 0 stops when the 95 % confidence interval of the median is narrow enough
 * (half-width <= rel_ci * median, after min_iters), at max_iters, or when time_cap is spent. Every
 * iteration's result is checked; an iteration counts as wrong when any rank's result is wrong.
 * back_to_back=n (default 1) makes an iteration n calls in a row with no barrier between them, as an
 * application calls, timed together and reported per call; the last call's result is checked (every call
 * writes the whole result, so the check still sees a wrong algorithm, not a wrong call in the middle).
 * spoil_every=n (a self-test of that check) spoils one byte of the result of every n-th iteration.
 * dist= (default uniform) is how the blocks of a vector collective (allgatherv, alltoallv, gatherv, scatterv, alltoallw)
 * differ between ranks around the mean block `bytes` (engine.h, tm_distribution); the others take uniform only.
 * Non-blocking collectives (coll=iallreduce|ibcast|ialltoall|iallgather) are measured as OSU's osu_i<coll>:
 * nb=latency (the default) times start + MPI_Wait, the point's samples and median as for a blocking call;
 * nb=overlap then calibrates a busy loop on EACH rank to ITS OWN pure time (the median of its own start +
 * MPI_Wait) and times start + loop + MPI_Wait as many iterations again, the library making progress on its
 * own only (no MPI call in the loop), every iteration of the point after MPI_Barrier as the peers time it
 * (iteration_barrier); each rank's overlap % = max(0, min(100, 100 (1 - median(own overlapped
 * - own compute) / own pure))), as the peers (OSU, IMB-NBC) have each rank calibrate to its own time. The
 * reply adds the mean of those over ranks (overlap_pct) and each rank's own figures (overlap_pct_ranks,
 * pure_us_ranks, overlapped_us_ranks: the median of its own start + loop + wait),
 * the medians of each iteration's slowest rank's overlapped time and loop time, and per iteration the time
 * not hidden on the rank that waited longest (max over ranks of own overlapped - own compute:
 * unhidden_samples_us).
 * nb=time compute=<seconds> (tune --objective time) times start + a computation of that fixed length + MPI_Wait
 * in every timed iteration instead: the point's samples and median are that, the reply adds the computation's
 * median (compute_us). Every iteration's result is checked in every phase.
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
#define MAX_NAME 128
#define TM_MAX_ALSO 4
/* The share of a point's time cap its warm-up may take at most (then the point is measured). */
#define WARMUP_SHARE 0.25

typedef enum { SET_KEEP, SET_DEFAULT, SET_VALUE } set_mode;

typedef struct {
    long id;
    char coll[MAX_NAME];
    long long bytes;
    tm_distribution dist;
    char cvar[MAX_NAME]; /* empty: none */
    set_mode set;
    /* `also=<cvar>:<int>[,...]`: further writes that belong to this selection (MPICH's shared-memory level
     * pinned to mpir beside a forced algorithm), made before the algorithm's, undone by a later point that
     * does not ask for them, so the default and its contenders are measured in one launch. */
    int also_count;
    char also_cvar[TM_MAX_ALSO][MAX_NAME];
    int also_value[TM_MAX_ALSO];
    int set_value;
    int newcomm;
    int spoil_every; /* self-test: spoil the result of every n-th iteration (0: never) */
    int back_to_back; /* calls per timed iteration, in a row without a barrier */
    int warmup;
    int min_iters;
    int max_iters;
    double rel_ci;
    double time_cap;
    int overlap; /* nb=overlap: a non-blocking collective's overlap phase after its latency */
    double compute; /* nb=time: seconds of computation between start and wait in every timed iteration; <0: none */
} request;

typedef struct {
    MPI_Comm ctrl; /* requests and the reductions of per-iteration times */
    MPI_Comm meas; /* the measured communicator; re-created after cvar writes when asked */
    int rank;
    int size;
    tm_cvars cvars; /* written through MPI_T; `cvars.written` since the measured communicator's dup */
    char call_error[MPI_MAX_ERROR_STRING]; /* this rank's first failed collective call of a point */
    double watchdog; /* MPI_Wtime deadline for control messages after a failed call here; 0: none */
    double *local;   /* [times(batch) | wrong flags(batch)] of this rank */
    double *scratch; /* receive buffer of the reductions of `local` */
    double *samples; /* per-iteration maxima of the point, rank 0 */
    double *sorted;
    double *overlapped; /* nb=overlap: per-iteration maxima of start + compute + wait, and of the compute */
    double *computed;
    double *unhidden; /* nb=overlap: per-iteration maxima over ranks of each rank's own (overlapped - compute) */
    double *own;      /* nb=overlap, every rank: its own times (latency phase: start + wait; overlap phase:
                       * overlapped - compute), before the reduction over ranks */
    double *own_overlapped; /* nb=overlap, every rank: its own start + compute + wait */
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

/* ---------------------------------------------------------------- control messages
 *
 * The engine's own coordination (requests, per-iteration times, decisions) uses point-to-point
 * binomial trees on the control communicator, never collectives: in MPICH an algorithm cvar applies
 * to every communicator, so a collective used for control would run the algorithm under test, and
 * with strict selection fail where that algorithm cannot take the control message. */

enum { TAG_BCAST = 7001, TAG_REDUCE = 7002, TAG_BARRIER = 7003 };

/* After a collective call failed on this rank, the other ranks may not have failed with it (MPICH's
 * strict selection can fail a sub-collective on some ranks only) and may be stuck in the call for good.
 * Control messages are then awaited for this long at most before the whole launch is aborted: the
 * driver records the point as failed and relaunches, instead of waiting for its own timeout. The point
 * fails either way, so a short wait costs at most a needless relaunch. */
static const double WATCHDOG_S = 0.5;

/* The first and the last line of a (multi-line) MPI error string: MPICH's error stack ends with its cause. */
static void first_and_last_line(const char *message, char *out, size_t out_len)
{
    const char *end_first = strchr(message, '\n');
    if (!end_first) {
        snprintf(out, out_len, "%s", message);
        return;
    }
    const char *last = end_first, *scan = end_first;
    while ((scan = strchr(scan + 1, '\n')) != NULL)
        if (scan[1] != '\0' && scan[1] != '\n')
            last = scan;
    snprintf(out, out_len, "%.*s ... %s", (int)(end_first - message), message, last + 1);
    char *newline = strchr(out, '\n');
    if (newline)
        *newline = '\0';
}

static void ctl_complete(engine *e, MPI_Request *pending, int sleepy)
{
    if (!sleepy && e->watchdog == 0) {
        MPI_Wait(pending, MPI_STATUS_IGNORE);
        return;
    }
    struct timespec nap = {0, 50 * 1000}; /* 50 us: small next to a point */
    /* The next request usually comes within a millisecond of the previous answer: poll that long before
     * napping, since waking from a nap can take a scheduler tick on a busy node. */
    const double spin_until = MPI_Wtime() + 1e-3;
    int done = 0;
    for (MPI_Test(pending, &done, MPI_STATUS_IGNORE); !done && MPI_Wtime() < spin_until;
         MPI_Test(pending, &done, MPI_STATUS_IGNORE))
        ;
    for (; !done; MPI_Test(pending, &done, MPI_STATUS_IGNORE)) {
        if (e->watchdog != 0 && MPI_Wtime() > e->watchdog) {
            char why[MPI_MAX_ERROR_STRING];
            first_and_last_line(e->call_error, why, sizeof why);
            fprintf(stderr, "tunempi engine: rank %d: a collective call failed here (%s) but other ranks did not "
                    "follow within %.0f s; aborting the launch\n", e->rank, why, WATCHDOG_S);
            fflush(stderr);
            /* Hydra tears the job down on MPI_Abort, and under load it did so before forwarding this
             * line (6 of 25 runs of a test on a busy machine lost it; with 30 ms, 0 of 30): give the line
             * time to leave. Short: every failing point pays it (MPICH's exhaustive sweep has ~33). */
            struct timespec forward = {0, 30 * 1000 * 1000};
            nanosleep(&forward, NULL);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        nanosleep(&nap, NULL);
        /* An engine idle for longer (the tuner keeps one per launch setup open side by side) naps
         * longer, up to 1 ms: 20000 wake-ups a second of an idle engine's ranks disturbed the busy-polling
         * ranks of the engine that measures, on a node with no core to spare. */
        if (nap.tv_nsec < 1000 * 1000)
            nap.tv_nsec += nap.tv_nsec / 8;
    }
}

/* Broadcast from rank 0. With `sleepy`, ranks wait for their parent's message asleep instead of
 * busy-polling (MPICH spins in blocking calls): between points the CPU goes to the driver. */
static void ctl_bcast(engine *e, void *buf, int count, MPI_Datatype type, int sleepy)
{
    int mask = 1;
    while (mask < e->size) {
        if (e->rank & mask) {
            MPI_Request pending;
            MPI_Irecv(buf, count, type, e->rank - mask, TAG_BCAST, e->ctrl, &pending);
            ctl_complete(e, &pending, sleepy);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (e->rank + mask < e->size) {
            MPI_Request pending;
            MPI_Isend(buf, count, type, e->rank + mask, TAG_BCAST, e->ctrl, &pending);
            ctl_complete(e, &pending, 0);
        }
    }
}

/* The barrier before each timed iteration, as a dissemination of empty messages: MPI_Barrier would run
 * the library's own collectives, and MPICH's barrier calls its allreduce internally (with no data),
 * which then runs the allreduce algorithm under test: with strict selection that algorithm refuses the
 * empty call, and MPICH 5.0.2 bound to cores crashed in that error path (SIGSEGV in MPI_Barrier after a
 * forced reduce_scatter_allgather, issue 39). The engine's control never runs the algorithm it measures.
 * The one exception, nb=overlap: the peers' own barrier, MPI_Barrier on the measured communicator (IMB-NBC
 * and OSU's osu_i<coll> call it after each iteration). A blocking barrier never runs the non-blocking
 * algorithm under test, and how it releases the ranks decides what a small collective can hide: with the
 * symmetric dissemination, MPICH 5.0.2's ibcast receivers (8 B, 2 ranks bound) started with the root, waited
 * for its message and hid 13-25 % of their time behind the computation, 0-4 % after MPI_Barrier; a
 * root-first tree matched the peers at ibcast but not at iallgather (docs/bench.md "Against a peer"). */
static void iteration_barrier(engine *e, int peer_barrier)
{
    if (peer_barrier) {
        MPI_Barrier(e->meas);
        return;
    }
    for (int distance = 1; distance < e->size; distance <<= 1) {
        int to = (e->rank + distance) % e->size, from = (e->rank - distance + e->size) % e->size;
        MPI_Sendrecv(NULL, 0, MPI_BYTE, to, TAG_BARRIER, NULL, 0, MPI_BYTE, from, TAG_BARRIER, e->ctrl,
                     MPI_STATUS_IGNORE);
    }
}

/* Element-wise maximum of `values` over ranks, in place; complete on rank 0 only. `scratch` holds n. */
static void ctl_reduce_max(engine *e, double *values, double *scratch, int n)
{
    for (int mask = 1; mask < e->size; mask <<= 1) {
        MPI_Request pending;
        if (e->rank & mask) {
            MPI_Isend(values, n, MPI_DOUBLE, e->rank - mask, TAG_REDUCE, e->ctrl, &pending);
            ctl_complete(e, &pending, 0);
            return;
        }
        if (e->rank + mask < e->size) {
            MPI_Irecv(scratch, n, MPI_DOUBLE, e->rank + mask, TAG_REDUCE, e->ctrl, &pending);
            ctl_complete(e, &pending, 0);
            for (int i = 0; i < n; i++)
                if (scratch[i] > values[i])
                    values[i] = scratch[i];
        }
    }
}

/* The maximum of an int over ranks, known to every rank. */
static int ctl_any(engine *e, int value)
{
    double v = value, scratch;
    ctl_reduce_max(e, &v, &scratch, 1);
    int result = (int)v;
    ctl_bcast(e, &result, 1, MPI_INT, 0);
    return result;
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

/* "<cvar>:<int>[,<cvar>:<int>...]" into req->also_*; returns nonzero when malformed. */
static int parse_also(const char *val, request *req)
{
    char copy[MAX_LINE];
    snprintf(copy, sizeof copy, "%s", val);
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(item, ':');
        long long n = 0;
        if (!colon || req->also_count == TM_MAX_ALSO || colon - item >= MAX_NAME || colon == item)
            return 1;
        *colon = '\0';
        if (parse_long(colon + 1, -2147483647LL, 2147483647LL, &n))
            return 1;
        snprintf(req->also_cvar[req->also_count], MAX_NAME, "%s", item);
        req->also_value[req->also_count++] = (int)n;
    }
    return 0;
}

/* Parses "point|setup key=value ..." into `req`; returns 0, or -1 with `why` filled. */
static int parse_point(char *line, request *req, char *why, size_t why_len)
{
    memset(req, 0, sizeof *req);
    req->id = -1;
    req->set = SET_KEEP;
    req->warmup = 64;
    req->min_iters = 10;
    req->max_iters = 1000;
    req->rel_ci = 0.05;
    req->time_cap = 1.0;
    req->back_to_back = 1;
    req->compute = -1;
    int timed = 0; /* nb=time: needs compute= */
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
        } else if (strcmp(key, "dist") == 0) {
            req->dist = tm_distribution_from_name(val);
            bad = req->dist == TM_DIST_UNKNOWN;
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
        } else if (strcmp(key, "nb") == 0) {
            bad = strcmp(val, "latency") != 0 && strcmp(val, "overlap") != 0 && strcmp(val, "time") != 0;
            req->overlap = strcmp(val, "overlap") == 0;
            timed = strcmp(val, "time") == 0;
        } else if (strcmp(key, "compute") == 0) {
            bad = parse_double(val, &req->compute) || req->compute < 0 || req->compute > 60;
        } else if (strcmp(key, "also") == 0) {
            bad = parse_also(val, req);
        } else if (strcmp(key, "newcomm") == 0) {
            bad = parse_long(val, 0, 1, &n);
            req->newcomm = (int)n;
        } else if (strcmp(key, "spoil_every") == 0) {
            bad = parse_long(val, 0, 1000000, &n);
            req->spoil_every = (int)n;
        } else if (strcmp(key, "back_to_back") == 0) {
            bad = parse_long(val, 1, 1000000, &n);
            req->back_to_back = (int)n;
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
    if (req->id < 0) {
        snprintf(why, why_len, "a request needs id=");
        return -1;
    }
    if (req->max_iters < req->min_iters)
        req->max_iters = req->min_iters;
    if (timed != (req->compute >= 0)) {
        snprintf(why, why_len, "nb=time and compute=<seconds> go together");
        return -1;
    }
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
    ctl_bcast(e, &length, 1, MPI_INT, 1);
    if (length < 0)
        return -1;
    ctl_bcast(e, line, length + 1, MPI_CHAR, 0);
    return 0;
}

/* A fresh measured communicator (after cvar writes that only apply to new communicators). Its calls
 * return errors instead of aborting: an algorithm that cannot take a call's arguments (Open MPI's
 * two-process-only ones on more ranks, MPICH with strict selection) fails that point, not the launch. */
static void renew_measured_communicator(engine *e)
{
    if (e->meas != MPI_COMM_NULL)
        MPI_Comm_free(&e->meas);
    MPI_Comm_dup(MPI_COMM_WORLD, &e->meas);
    MPI_Comm_set_errhandler(e->meas, MPI_ERRORS_RETURN);
    e->cvars.written = 0;
}

static const char *call_name(tm_collective kind, int nonblocking)
{
    if (nonblocking) {
        static const char *const started[] = {"MPI_Iallreduce", "MPI_Ibcast", "MPI_Iallgather", "MPI_Ialltoall"};
        return kind <= TM_ALLTOALL ? started[kind] : "?";
    }
    static const char *const names[] = {"MPI_Allreduce", "MPI_Bcast", "MPI_Allgather", "MPI_Alltoall",
                                        "MPI_Reduce", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block",
                                        "MPI_Gather", "MPI_Scatter", "MPI_Barrier", "MPI_Allgatherv",
                                        "MPI_Alltoallv", "MPI_Gatherv", "MPI_Scatterv", "MPI_Alltoallw"};
    return kind < TM_UNKNOWN ? names[kind] : "?";
}

/* ---------------------------------------------------------------- machine-state probe */

/* The machine's state at a point (issue 39): on this kind of VM, transfers between cores were 4x slower for
 * seconds at a time while each core alone kept its speed (docs/measurements/tune.md "Two tunes, and a machine
 * with two speeds"), and which algorithm is fastest differs between the states. So every point carries the
 * one-way time of a 256 KiB ping-pong between rank 0 and the last rank, taken just before it, for verify and
 * tune to compare launches only within one state: the fastest of its round trips, as a state lasts for
 * seconds and a single trip can meet a descheduled rank. 256 KiB: its two states read 40-60 and 120-170 us
 * (64 KiB's only 2.3x apart, within the noise of a loaded machine). About 0.5 ms a point (1.5 ms slow). */
#define PROBE_BYTES 262144
#define PROBE_TRIPS 5

static double probe_state(engine *e)
{
    static char *buffer = NULL;
    if (e->size < 2)
        return -1;
    if (!buffer && !(buffer = calloc(1, PROBE_BYTES)))
        return -1;
    int last = e->size - 1;
    double trips[PROBE_TRIPS];
    for (int k = -2; k < PROBE_TRIPS; k++) { /* two round trips to warm up */
        double t0 = MPI_Wtime();
        if (e->rank == 0) {
            MPI_Send(buffer, PROBE_BYTES, MPI_BYTE, last, 7, e->ctrl);
            MPI_Recv(buffer, PROBE_BYTES, MPI_BYTE, last, 7, e->ctrl, MPI_STATUS_IGNORE);
        } else if (e->rank == last) {
            MPI_Recv(buffer, PROBE_BYTES, MPI_BYTE, 0, 7, e->ctrl, MPI_STATUS_IGNORE);
            MPI_Send(buffer, PROBE_BYTES, MPI_BYTE, 0, 7, e->ctrl);
        }
        if (k >= 0)
            trips[k] = MPI_Wtime() - t0;
    }
    if (e->rank != 0)
        return -1;
    tm_sort(trips, PROBE_TRIPS);
    return trips[0] / 2 * 1e6;
}

/* ---------------------------------------------------------------- measurement */

/* Grow *buffer to n doubles (realloc); -1 where that failed, the old buffer kept. */
static int grow(double **buffer, size_t n)
{
    double *bigger = realloc(*buffer, n * sizeof(double));
    if (!bigger)
        return -1;
    *buffer = bigger;
    return 0;
}

static int reserve(engine *e, size_t n)
{
    if (n <= e->capacity)
        return 0;
    size_t capacity = n < 1024 ? 1024 : n;
    /* one slot per sample; local and scratch hold four figures per sample */
    double **per_sample[] = {&e->samples, &e->sorted, &e->overlapped, &e->computed, &e->unhidden, &e->own,
                             &e->own_overlapped};
    int failed = grow(&e->local, 4 * capacity) | grow(&e->scratch, 4 * capacity);
    for (size_t i = 0; i < sizeof per_sample / sizeof per_sample[0]; i++)
        failed |= grow(per_sample[i], capacity);
    if (failed)
        return -1;
    e->capacity = capacity;
    return 0;
}

/* The median of values[0..n) (0 when n is 0), on any rank; e->sorted is the scratch. */
static double median_of(engine *e, const double *values, size_t n)
{
    if (n == 0)
        return 0;
    memcpy(e->sorted, values, n * sizeof(double));
    tm_sort(e->sorted, n);
    return tm_median_confidence(e->sorted, n).median;
}

/* The overlap phase's computation: a dependent chain of floating-point operations the compiler cannot
 * drop (the result goes to a volatile), with no MPI call in it: the library progresses on its own, as
 * in an application's compute phase (OSU's dummy_compute without probes). */
static volatile double compute_sink;

static void busy_compute(long loops)
{
    double x = 1.0;
    for (long i = 0; i < loops; i++)
        x = x * 1.0000001 + 1e-9;
    compute_sink = x;
}

/* busy_compute's loops per second on this rank, measured once per launch (a run of at least 2 ms): the
 * doubling runs cost about 4 ms, which every point of a tune for time would otherwise pay. */
static double compute_rate;

/* Loop count for `seconds` of busy_compute on this rank: the launch's rate, then one correction from the
 * shortest of three runs of the count itself (so a rate measured while descheduled does not stay wrong). */
static long calibrate_compute(double seconds)
{
    if (compute_rate <= 0) {
        long loops = 1024;
        double elapsed = 0;
        for (;;) {
            double start = MPI_Wtime();
            busy_compute(loops);
            elapsed = MPI_Wtime() - start;
            if (elapsed >= 2e-3 || loops > (1L << 40))
                break;
            loops *= 2;
        }
        compute_rate = (double)loops / (elapsed > 0 ? elapsed : 1e-9);
    }
    long count = (long)(seconds * compute_rate);
    if (count < 1)
        return 1;
    double best = 0;
    for (int run = 0; run < 3; run++) {
        double start = MPI_Wtime();
        busy_compute(count);
        double took = MPI_Wtime() - start;
        if (run == 0 || took < best)
            best = took;
    }
    if (best > 0)
        count = (long)((double)count * seconds / best);
    return count < 1 ? 1 : count;
}

/* Where run_batch puts a batch's times (each NULL: not kept). On rank 0, per-iteration maxima over ranks:
 * `samples` of the timed iteration, `computed` of the computation alone, `unhidden` of each rank's own
 * (iteration - computation); on every rank, `own`: this rank's own time (with a computation: its own
 * iteration - computation), and `own_whole` its own whole iteration, taken before the reduction over ranks. */
typedef struct {
    double *samples;
    double *computed;
    double *unhidden;
    double *own;
    double *own_whole;
} batch_out;

/* Runs `batch` iterations, stores their times as `out` says, adds the iterations whose call failed on some
 * rank to *failed_calls, and returns (rank 0) the number of iterations with a wrong result. Per iteration
 * each rank reports 0 (right), 1 (wrong result) or 2 (the call failed: its result is not checked); the
 * maximum over ranks decides. compute_loops >= 0 (nb=overlap's overlap phase, nb=time): each iteration is
 * start, busy_compute, wait, timed as a whole and the computation alone. peer_barrier (every phase of an
 * nb=overlap point, whose latency phase calibrates the computation): each iteration after MPI_Barrier. */
static int run_batch(engine *e, tm_case *c, int batch, uint32_t *iteration, batch_out out, int spoil_every,
                     int back_to_back, int *failed_calls, long compute_loops, int peer_barrier)
{
    /* [times | wrong flags | computation | iteration - computation] of this rank, reduced in one message */
    const int sections = compute_loops >= 0 ? (out.unhidden ? 4 : 3) : 2;
    for (int k = 0; k < batch; k++) {
        tm_case_fill(c, *iteration);
        iteration_barrier(e, peer_barrier);
        double start = MPI_Wtime();
        int rc;
        if (compute_loops >= 0) {
            rc = tm_case_start(c);
            double compute_start = MPI_Wtime();
            busy_compute(compute_loops);
            e->local[2 * batch + k] = MPI_Wtime() - compute_start;
            if (rc == MPI_SUCCESS)
                rc = tm_case_wait(c);
        } else {
            rc = tm_case_run(c);
            for (int call = 1; call < back_to_back && rc == MPI_SUCCESS; call++)
                rc = tm_case_run(c);
        }
        double stop = MPI_Wtime();
        e->local[k] = (stop - start) / back_to_back;
        if (rc != MPI_SUCCESS) {
            /* No more calls on the measured communicator: if other ranks did not fail with this one,
             * they may be stuck in this call, and further calls could get this rank stuck as well. */
            if (!e->call_error[0]) {
                int length = 0;
                MPI_Error_string(rc, e->call_error, &length);
            }
            for (int rest = k; rest < batch; rest++) {
                e->local[rest] = e->local[k];
                e->local[batch + rest] = 2;
                if (sections >= 3)
                    e->local[2 * batch + rest] = 0;
            }
            *iteration += (uint32_t)(batch - k);
            e->watchdog = MPI_Wtime() + WATCHDOG_S;
            break;
        }
        if (spoil_every && (*iteration + 1) % (uint32_t)spoil_every == 0)
            tm_case_spoil(c);
        e->local[batch + k] = tm_case_check(c, *iteration);
        (*iteration)++;
    }
    for (int k = 0; k < batch; k++) {
        double own = sections >= 3 ? e->local[k] - e->local[2 * batch + k] : e->local[k];
        if (sections == 4)
            e->local[3 * batch + k] = own;
        if (out.own)
            out.own[k] = own;
        if (out.own_whole)
            out.own_whole[k] = e->local[k];
    }
    ctl_reduce_max(e, e->local, e->scratch, sections * batch);
    int wrong = 0;
    if (e->rank == 0) {
        for (int k = 0; k < batch; k++) {
            if (out.samples)
                out.samples[k] = e->local[k];
            if (out.computed && sections >= 3)
                out.computed[k] = e->local[2 * batch + k];
            if (out.unhidden && sections == 4)
                out.unhidden[k] = e->local[3 * batch + k];
            wrong += e->local[batch + k] == 1.0;
            *failed_calls += e->local[batch + k] >= 2.0;
        }
    }
    return wrong;
}

static void measure_point(engine *e, request *req)
{
    char why[512] = "";
    int failed = 0;
    tm_cvar *slot = NULL;
    int nonblocking = 0;
    tm_collective kind = tm_collective_from_name(req->coll, &nonblocking);
    if (kind == TM_UNKNOWN) {
        snprintf(why, sizeof why, "unknown collective %s", req->coll);
        failed = 1;
    } else if (req->overlap && !nonblocking) {
        snprintf(why, sizeof why, "nb=overlap needs a non-blocking collective, not %s", req->coll);
        failed = 1;
    } else if (req->compute >= 0 && !nonblocking) {
        snprintf(why, sizeof why, "nb=time needs a non-blocking collective, not %s", req->coll);
        failed = 1;
    } else if ((req->overlap || req->compute >= 0) && req->back_to_back != 1) {
        snprintf(why, sizeof why, "nb=overlap and nb=time time one call per iteration: back_to_back=1 only");
        failed = 1;
    }
    if (!failed && req->cvar[0]) {
        slot = tm_cvar_lookup(&e->cvars, req->cvar, why, sizeof why);
        failed = slot == NULL;
    }
    const tm_cvar *keep[1 + TM_MAX_ALSO] = {NULL};
    int kept = 0;
    tm_cvar *also[TM_MAX_ALSO] = {NULL};
    if (!failed && req->set == SET_VALUE) {
        keep[kept++] = slot;
        for (int i = 0; i < req->also_count && !failed; i++) {
            also[i] = tm_cvar_lookup(&e->cvars, req->also_cvar[i], why, sizeof why);
            failed = also[i] == NULL;
            keep[kept++] = also[i];
        }
    }
    if (!failed && req->set != SET_KEEP)
        failed = tm_cvar_restore_except(&e->cvars, keep, kept, why, sizeof why) != 0;
    for (int i = 0; i < req->also_count && !failed && req->set == SET_VALUE; i++)
        if (also[i]->current != req->also_value[i])
            failed = tm_cvar_write(&e->cvars, also[i], req->also_value[i], why, sizeof why) != 0;
    if (!failed && req->set == SET_VALUE && slot->current != req->set_value)
        failed = tm_cvar_write(&e->cvars, slot, req->set_value, why, sizeof why) != 0;
    if (ctl_any(e, failed)) {
        if (e->rank == 0)
            print_error(req->id, "%s", failed ? why : "failed on another rank");
        return;
    }
    if (req->newcomm && e->cvars.written)
        renew_measured_communicator(e);
    int readback = 0, consistent = 1;
    if (slot) {
        MPI_T_cvar_read(slot->handle, &readback);
        double range[2] = {readback, -readback}, scratch[2]; /* max and -min over ranks */
        ctl_reduce_max(e, range, scratch, 2);
        consistent = range[0] == -range[1];
    }

    tm_case c;
    failed = tm_case_init(&c, kind, (size_t)req->bytes, req->dist, e->meas) != 0 || reserve(e, (size_t)req->max_iters) != 0 ||
             reserve(e, (size_t)req->warmup) != 0;
    if (ctl_any(e, failed)) {
        if (e->rank == 0)
            print_error(req->id, "cannot set up %s with %lld bytes (size or distribution not valid, or out of memory)", req->coll,
                        req->bytes);
        tm_case_free(&c);
        return;
    }
    c.nonblocking = nonblocking;

    double probe_us = probe_state(e);
    uint32_t iteration = 0;
    int failed_calls = 0;
    e->call_error[0] = '\0';
    e->watchdog = 0;
    /* nb=time: every timed iteration is start + a computation of the asked length (calibrated on each rank
     * now) + wait, the point's samples and median; the computation alone goes to computed[]. */
    long timed_loops = req->compute >= 0 ? calibrate_compute(req->compute) : -1;
    /* Warm-up: req->warmup untimed (checked) iterations in doubling batches, ended early once they took
     * WARMUP_SHARE of the time cap. Not 2: Intel MPI 2021.19 on shared memory runs its first 10-35 calls
     * of a new large message size 4-5x slower (bcast 1 MiB at 2 ranks: ~470 us, then ~120), and a median
     * of the first 10-50 iterations, where the stopping rule often ends a point, was that (docs/bench.md,
     * "Warm-up"). */
    const batch_out none = {NULL, NULL, NULL, NULL, NULL};
    int wrong = 0, warmed = 0;
    int warm_batch = req->warmup < 2 ? req->warmup : 2;
    double warm_start = MPI_Wtime();
    while (warm_batch > 0) {
        wrong += run_batch(e, &c, warm_batch, &iteration, none, req->spoil_every, req->back_to_back, &failed_calls,
                           -1, req->overlap);
        warmed += warm_batch;
        int more = 0;
        if (e->rank == 0 && !failed_calls && MPI_Wtime() - warm_start < WARMUP_SHARE * req->time_cap)
            more = warmed < req->warmup - warmed ? warmed : req->warmup - warmed;
        ctl_bcast(e, &more, 1, MPI_INT, 0);
        warm_batch = more;
    }
    const char *stop_reason = "max_iters";
    int batch = req->min_iters;
    size_t n = 0;
    tm_median_ci ci = {0, 0, 0};
    double start = MPI_Wtime(), elapsed = 0;
    int next = failed_calls ? 0 : 1;
    ctl_bcast(e, &next, 1, MPI_INT, 0);
    if (!next)
        batch = 0;
    while (batch > 0) {
        /* nb=overlap: every rank keeps its own latency samples, its overlap phase's calibration */
        batch_out out = {e->samples + n, timed_loops >= 0 ? e->computed + n : NULL, NULL,
                         req->overlap ? e->own + n : NULL, NULL};
        wrong += run_batch(e, &c, batch, &iteration, out, req->spoil_every, req->back_to_back, &failed_calls,
                           timed_loops, req->overlap);
        n += (size_t)batch;
        next = 0;
        if (e->rank == 0 && failed_calls) {
            stop_reason = "failed";
        } else if (e->rank == 0) {
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
        ctl_bcast(e, &next, 1, MPI_INT, 0);
        batch = next;
    }
    /* nb=overlap (the peers' method: OSU's osu_i<coll>, IMB-NBC): EACH RANK calibrates its computation to
     * ITS OWN pure time, the median of its own start + wait over the latency phase's iterations (the
     * median, not IMB's and OSU's mean, as everywhere in this engine: on a shared node one descheduled
     * iteration would stretch a mean of microsecond calls, and the computation with it); then as many
     * iterations as the latency phase time start + computation + wait. Each rank's overlap comes from its
     * own figures: 1 - median over iterations of its own (overlapped - compute) / its own pure, clipped to
     * [0, 1]; rank 0 gathers every rank's pure time, overlap and overlapped time (control messages) and
     * reports them and the mean overlap.
     * A small ibcast is why it is per rank: its root's pure time is a fraction of a microsecond, the other
     * ranks' the transfer; one length for all (rank 0's slowest-rank median, before) let the root compute
     * for the receivers' time and read overlap the peers do not. */
    size_t overlap_n = 0;
    long compute_loops = 0;
    double overlapped_median = 0, computed_median = 0;
    double *ranks_figures = NULL; /* rank 0: [own pure (s), own overlap (%), own overlapped (s)] of every rank */
    int go = req->overlap && (e->rank != 0 || !failed_calls);
    ctl_bcast(e, &go, 1, MPI_INT, 0);
    if (go) {
        double own_pure = median_of(e, e->own, n);
        compute_loops = calibrate_compute(own_pure);
        int todo = (int)n;
        ctl_bcast(e, &todo, 1, MPI_INT, 0);
        while (todo > 0 && !failed_calls) {
            int chunk = todo < 1024 ? todo : 1024;
            batch_out out = {e->overlapped + overlap_n, e->computed + overlap_n, e->unhidden + overlap_n,
                             e->own + overlap_n, e->own_overlapped + overlap_n};
            wrong += run_batch(e, &c, chunk, &iteration, out, req->spoil_every, 1, &failed_calls, compute_loops,
                              req->overlap);
            overlap_n += (size_t)chunk;
            todo -= chunk;
            int stop = failed_calls;
            ctl_bcast(e, &stop, 1, MPI_INT, 0);
            if (stop)
                failed_calls = failed_calls ? failed_calls : 1;
        }
        double own_unhidden = median_of(e, e->own, overlap_n);
        double own_pct = own_pure > 0 ? 100.0 * (1.0 - own_unhidden / own_pure) : 0;
        own_pct = own_pct < 0 ? 0 : own_pct > 100 ? 100 : own_pct;
        /* the gather, as an element-wise maximum of per-rank slots (all >= 0) left at 0 by the other ranks */
        ranks_figures = calloc(6 * (size_t)e->size, sizeof(double));
        if (!ranks_figures) {
            fprintf(stderr, "tunempi engine: rank %d: out of memory\n", e->rank);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        ranks_figures[3 * e->rank] = own_pure;
        ranks_figures[3 * e->rank + 1] = own_pct;
        ranks_figures[3 * e->rank + 2] = median_of(e, e->own_overlapped, overlap_n);
        ctl_reduce_max(e, ranks_figures, ranks_figures + 3 * e->size, 3 * e->size);
        if (e->rank == 0) {
            overlapped_median = median_of(e, e->overlapped, overlap_n);
            computed_median = median_of(e, e->computed, overlap_n);
        }
    }
    tm_case_free(&c);
    e->watchdog = 0; /* every rank got through the point's control messages: all are in step again */
    if (e->rank != 0 || failed_calls)
        free(ranks_figures);
    if (e->rank != 0)
        return;
    if (failed_calls) {
        char why[MPI_MAX_ERROR_STRING]; /* MPICH's error stack ends with its cause: keep that line */
        first_and_last_line(e->call_error[0] ? e->call_error : "an MPI error on another rank", why, sizeof why);
        print_error(req->id, "%s failed in %d iteration(s): %s", call_name(kind, nonblocking), failed_calls, why);
        return;
    }

    printf("{\"event\":\"point\",\"id\":%ld,\"status\":\"ok\",\"collective\":", req->id);
    json_string(stdout, req->coll);
    printf(",\"bytes\":%lld,\"ranks\":%d,\"cvar\":", req->bytes, e->size);
    if (slot) {
        json_string(stdout, slot->name);
        printf(",\"cvar_value\":%d,\"cvar_consistent\":%s", readback, consistent ? "true" : "false");
    } else {
        printf("null,\"cvar_value\":null,\"cvar_consistent\":true");
    }
    printf(",\"warmup\":%d,\"iterations\":%zu,\"errors\":%d,\"checked\":%zu,\"stop\":\"%s\",\"elapsed_s\":%.6f",
           warmed, n, wrong, n + (size_t)warmed + overlap_n, stop_reason, elapsed);
    if (probe_us >= 0)
        printf(",\"probe_us\":%.3f", probe_us);
    if (nonblocking)
        printf(",\"nb\":\"%s\"", req->overlap ? "overlap" : timed_loops >= 0 ? "time" : "latency");
    if (timed_loops >= 0) {
        double compute_median = 0;
        if (n) {
            memcpy(e->sorted, e->computed, n * sizeof(double));
            tm_sort(e->sorted, n);
            compute_median = tm_median_confidence(e->sorted, n).median;
        }
        printf(",\"compute_loops\":%ld,\"compute_us\":%.6f", timed_loops, compute_median * 1e6);
    }
    if (req->overlap) {
        /* overlap_pct: the mean over ranks of each rank's own overlap; overlapped_us and compute_us: medians
         * of each iteration's maxima over ranks (the rank with the longest pure time computes longest);
         * compute_loops: rank 0's count. */
        double hidden = 0;
        for (int r = 0; r < e->size; r++)
            hidden += ranks_figures[3 * r + 1] / e->size;
        printf(",\"overlap_iterations\":%zu,\"compute_loops\":%ld,\"overlapped_us\":%.6f,\"compute_us\":%.6f"
               ",\"overlap_pct\":%.3f", overlap_n, compute_loops, overlapped_median * 1e6, computed_median * 1e6, hidden);
        printf(",\"overlap_pct_ranks\":[");
        for (int r = 0; r < e->size; r++)
            printf(r ? ",%.3f" : "%.3f", ranks_figures[3 * r + 1]);
        printf("],\"pure_us_ranks\":[");
        for (int r = 0; r < e->size; r++)
            printf(r ? ",%.6f" : "%.6f", ranks_figures[3 * r] * 1e6);
        printf("],\"overlapped_us_ranks\":[");
        for (int r = 0; r < e->size; r++)
            printf(r ? ",%.6f" : "%.6f", ranks_figures[3 * r + 2] * 1e6);
        /* per iteration, the time not hidden behind the computation on the rank that waited longest: the
         * maximum over ranks of each rank's own overlapped - compute (tune --objective overlap's samples) */
        printf("],\"unhidden_samples_us\":[");
        for (size_t i = 0; i < overlap_n; i++)
            printf(i ? ",%.6f" : "%.6f", e->unhidden[i] * 1e6);
        printf("]");
        free(ranks_figures);
    }
    printf(",\"median_us\":%.6f,\"ci_low_us\":%.6f,\"ci_high_us\":%.6f,\"samples_us\":[", ci.median * 1e6,
           ci.ci_low * 1e6, ci.ci_high * 1e6);
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%.6f" : "%.6f", e->samples[i] * 1e6);
    printf("]}\n");
    fflush(stdout);
}

/* "setup id= cvar= set=<int> [newcomm=1]": write a cvar for the rest of the launch (e.g. a library's
 * strict algorithm selection); `set=default` in later points does not undo it. */
static void setup_cvar(engine *e, request *req)
{
    char why[512] = "";
    tm_cvar *slot = NULL;
    int failed = 0;
    if (!req->cvar[0] || req->set != SET_VALUE) {
        snprintf(why, sizeof why, "setup needs cvar= and set=<int>");
        failed = 1;
    }
    if (!failed)
        failed = (slot = tm_cvar_lookup(&e->cvars, req->cvar, why, sizeof why)) == NULL;
    if (!failed)
        failed = tm_cvar_write(&e->cvars, slot, req->set_value, why, sizeof why) != 0;
    if (ctl_any(e, failed)) {
        if (e->rank == 0)
            print_error(req->id, "%s", failed ? why : "failed on another rank");
        return;
    }
    slot->pinned = 1;
    if (req->newcomm)
        renew_measured_communicator(e);
    int value = 0;
    MPI_T_cvar_read(slot->handle, &value);
    if (e->rank == 0) {
        printf("{\"event\":\"setup\",\"id\":%ld,\"status\":\"ok\",\"cvar\":", req->id);
        json_string(stdout, slot->name);
        printf(",\"cvar_value\":%d}\n", value);
        fflush(stdout);
    }
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
    printf("{\"event\":\"ready\",\"ranks\":%d,\"mpi_t\":%s,\"library\":", e->size, e->cvars.mpi_t ? "true" : "false");
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
    tm_cvars_init(&e.cvars);
    MPI_Comm_dup(MPI_COMM_WORLD, &e.ctrl);
    e.meas = MPI_COMM_NULL;
    renew_measured_communicator(&e);
    MPI_Comm_rank(e.ctrl, &e.rank);
    MPI_Comm_size(e.ctrl, &e.size);
    print_ready(&e);

    char line[MAX_LINE];
    while (next_line(&e, line) == 0) {
        if (line[0] == '\0')
            continue;
        if (strcmp(line, "quit") == 0)
            break;
        int is_point = strncmp(line, "point ", 6) == 0, is_setup = strncmp(line, "setup ", 6) == 0;
        if (!is_point && !is_setup) {
            if (e.rank == 0)
                print_error(-1, "unknown request: %.100s", line);
            continue;
        }
        request req;
        char why[256] = "";
        if (parse_point(line, &req, why, sizeof why) != 0 || (is_point && !req.coll[0])) {
            if (e.rank == 0)
                print_error(req.id, "%s", why[0] ? why : "a point needs coll=");
            continue;
        }
        if (is_setup)
            setup_cvar(&e, &req);
        else
            measure_point(&e, &req);
    }

    tm_cvars_free(&e.cvars);
    free(e.local);
    free(e.scratch);
    free(e.samples);
    free(e.sorted);
    free(e.overlapped);
    free(e.computed);
    free(e.unhidden);
    free(e.own);
    free(e.own_overlapped);
    MPI_Comm_free(&e.meas);
    MPI_Comm_free(&e.ctrl);
    MPI_Finalize();
    return 0;
}
