/*
 * tunempi interposer: the interface between the GENERATED wrapper layer (tmpi_wrappers.c, written by
 * tunempi/profile/generate.py from the target library's own mpi.h) and the hand-written runtime.
 *
 * Every generated wrapper has the same shape:
 *
 *     int MPI_X(args) {
 *         if (TMPI_PASSTHROUGH()) return PMPI_X(args);        <- the disabled path: one branch, then PMPI
 *         tmpi_call call = {.op = TMPI_OP_X, .comm = comm, .bytes = tmpi_bytes_<rule>(...)};
 *         tmpi_begin(&call);                                   <- mode hook may replace call.comm
 *         call.rc = PMPI_X(args with call.comm);
 *         while (tmpi_end(&call)) call.rc = PMPI_X(...);       <- mode hook records; may ask for a rerun
 *         return call.rc;
 *     }
 *
 * What a call does is decided by the active MODE (tmpi_mode below): "profile" records tables
 * (tmpi_profile.c); an "online" mode (algorithm switching through MPI_T) slots in as another
 * tmpi_mode without touching the wrappers.
 *
 * Threads: only the thread that initialised MPI (or, when MPI was initialised before the tool was
 * active, the first thread that makes a wrapped call) is recorded; the per-thread role doubles as the
 * re-entry guard (while a wrapper runs, its thread is TMPI_ROLE_PASS, so MPI_ calls made by the
 * library or by a mode hook go straight to PMPI).
 */
#ifndef TUNEMPI_TMPI_H
#define TUNEMPI_TMPI_H

#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, gethostname under -std=c11 */
#endif

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "tmpi_hash.h"
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#define TMPI_LIKELY(x) __builtin_expect(!!(x), 1)
#define TMPI_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- what each wrapped function is (the table itself is generated) ---- */
typedef enum {
    TMPI_KIND_COLL,          /* collective (blocking or non-blocking) */
    TMPI_KIND_SEND,          /* point-to-point send (blocking, non-blocking, sendrecv) */
    TMPI_KIND_SEND_INIT,     /* persistent send: bytes are counted at each MPI_Start */
    TMPI_KIND_START,         /* MPI_Start / MPI_Startall */
    TMPI_KIND_TIMED,         /* receives, waits, tests, probes: only time in MPI */
    TMPI_KIND_COMM_FREE,     /* MPI_Comm_free / MPI_Comm_disconnect: invalidates caches */
    TMPI_KIND_REQUEST_FREE,  /* MPI_Request_free: forgets a persistent request */
    TMPI_KIND_SPECIAL        /* init, init_thread, finalize, pcontrol: own templates */
} tmpi_kind;

typedef struct {
    const char *label;     /* "allreduce", "iallreduce", "send", ... */
    tmpi_kind kind;
    int blocking;          /* 0 for the non-blocking (I...) forms: their time is the posting time */
} tmpi_op_info;

extern const tmpi_op_info tmpi_op_table[]; /* generated */
extern const int tmpi_op_count;            /* generated */

/* ---- one intercepted call ---- */
typedef struct {
    int op;                 /* index into tmpi_op_table */
    MPI_Comm comm;          /* the call's communicator; a mode's begin hook may replace it */
    uint64_t bytes;         /* message size by tunempi's convention (docs/profile.md) */
    const void *buffer;     /* collectives: the buffer that may be MPI_IN_PLACE (NULL: none) */
    long count;             /* collectives: the element count the library's selection sees (-1: none) */
    MPI_Op mpi_op;          /* reductions: the operation (MPI_OP_NULL otherwise) */
    MPI_Datatype datatype;  /* collectives: a datatype significant on every rank (MPI_DATATYPE_NULL: none) */
    MPI_Datatype send_datatype; /* the send datatype, significant unless buffer is MPI_IN_PLACE (or NULL) */
    const int *counts[2];   /* vector collectives: the counts arrays of this rank's call whose shape the profile
                               records (tmpi_counts.h; NULL: none): alltoallv's send (NULL in place) and receive
                               counts, allgatherv's, gatherv's and reduce_scatter's receive, scatterv's send */
    int root, rooted;       /* gatherv, scatterv (rooted 1): the root, the only rank whose counts are significant */
    MPI_Request *requests;  /* SEND_INIT: the new request; START: the started requests */
    int nrequests;
    uint64_t t_begin, t_end; /* clock ticks (tmpi_ticks); tmpi_ticks_to_ns converts after calibration */
    int untimed;            /* set by a begin hook that will not use the times: no clock reads (a
                               time-stamp read costs ~9 ns in this VM, two per call) */
    int rc;                 /* what the PMPI call returned (set before the end hook) */
    int retry;              /* set by an end hook: run the PMPI call again (on call.comm), then end again */
    void *mode_data;        /* private to the active mode */
} tmpi_call;

/* ---- modes ---- */
typedef struct {
    const char *name;
    void (*start)(void);               /* MPI is initialised; no communication allowed */
    void (*begin)(tmpi_call *call);    /* before the PMPI call (may be NULL) */
    void (*end)(tmpi_call *call);      /* after the PMPI call */
    void (*pcontrol)(int level);
    void (*finish)(void);              /* inside MPI_Finalize, before PMPI_Finalize: may communicate */
} tmpi_mode;

extern const tmpi_mode tmpi_profile_mode; /* tmpi_profile.c */
extern const tmpi_mode tmpi_online_mode;  /* tmpi_online.c */

/* ---- thread role and global state ---- */
enum { TMPI_ROLE_UNKNOWN = 0, TMPI_ROLE_OWNER = 1, TMPI_ROLE_PASS = 2 };
extern _Thread_local int tmpi_role __attribute__((tls_model("initial-exec")));
extern const tmpi_mode *tmpi_active;

int tmpi_claim_slow(void); /* decides the role of a thread that has none yet; 1 if it records */

/* True when the call must go straight to PMPI. */
#define TMPI_PASSTHROUGH() \
    (TMPI_UNLIKELY(tmpi_role != TMPI_ROLE_OWNER) && (tmpi_role == TMPI_ROLE_PASS || !tmpi_claim_slow()))

/* Time stamps are TICKS: the time-stamp counter on x86-64 when it is invariant (constant_tsc and
 * nonstop_tsc; about half the cost of clock_gettime, which matters at two reads per call), else
 * CLOCK_MONOTONIC nanoseconds. The tick length is calibrated against CLOCK_MONOTONIC between start-up
 * and finalize (tmpi_clock_calibrate); TUNEMPI_CLOCK=gettime forces clock_gettime. */
extern int tmpi_clock_is_tsc;

static inline uint64_t tmpi_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t tmpi_ticks(void)
{
#if defined(__x86_64__)
    if (TMPI_LIKELY(tmpi_clock_is_tsc))
        return __rdtsc();
#endif
    return tmpi_monotonic_ns();
}

void tmpi_clock_calibrate(void);
uint64_t tmpi_process_cpu_ns(void); /* CPU time of the whole process (all threads), ns; 0 if unavailable */        /* at finalize, before the mode's finish hook */
uint64_t tmpi_ticks_to_ns(uint64_t ticks);

static inline void tmpi_begin(tmpi_call *call)
{
    tmpi_role = TMPI_ROLE_PASS; /* re-entry guard for the duration of the call */
    if (tmpi_active->begin)
        tmpi_active->begin(call);
    if (TMPI_LIKELY(!call->untimed))
        call->t_begin = tmpi_ticks();
}

/* 1 when the end hook asks for the call to be run again (the re-entry guard stays up meanwhile). */
static inline int tmpi_end(tmpi_call *call)
{
    if (TMPI_LIKELY(!call->untimed))
        call->t_end = tmpi_ticks();
    call->retry = 0;
    tmpi_active->end(call);
    if (TMPI_UNLIKELY(call->retry))
        return 1;
    tmpi_role = TMPI_ROLE_OWNER;
    return 0;
}

/* Special entry points used by the generated init/finalize/pcontrol wrappers. */
int tmpi_init_wanted(void);        /* 0 when the tool is off: MPI_Init goes straight to PMPI */
void tmpi_after_init(int provided);
int tmpi_finalize_claim(void);     /* 1 when this rank must run the mode's finish hook */
void tmpi_before_finalize(void);
void tmpi_pcontrol(int level);

/* ---- message sizes (tmpi_sizes.c); the generator checks argument types against these ---- */
uint64_t tmpi_bytes_none(void);
uint64_t tmpi_bytes_count(int count, MPI_Datatype type);
uint64_t tmpi_bytes_block_inplace(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                                  MPI_Datatype recvtype);
uint64_t tmpi_bytes_scatter(int sendcount, MPI_Datatype sendtype, const void *recvbuf, int recvcount,
                            MPI_Datatype recvtype);
uint64_t tmpi_bytes_vavg(const int *counts, MPI_Datatype type, MPI_Comm comm);
uint64_t tmpi_bytes_vsum(const int *counts, MPI_Datatype type, MPI_Comm comm);
uint64_t tmpi_bytes_block_total(int count, MPI_Datatype type, MPI_Comm comm);
uint64_t tmpi_bytes_alltoallv(const void *sendbuf, const int *sendcounts, MPI_Datatype sendtype,
                              const int *recvcounts, MPI_Datatype recvtype, MPI_Comm comm);
uint64_t tmpi_bytes_alltoallw(const void *sendbuf, const int *sendcounts, const MPI_Datatype *sendtypes,
                              const int *recvcounts, const MPI_Datatype *recvtypes, MPI_Comm comm);
uint64_t tmpi_bytes_gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, const int *recvcounts,
                            MPI_Datatype recvtype, MPI_Comm comm);
uint64_t tmpi_bytes_scatterv(const int *sendcounts, MPI_Datatype sendtype, const void *recvbuf, int recvcount,
                             MPI_Datatype recvtype, MPI_Comm comm);

/* ---- communicator cache (tmpi_core.c), shared by all modes ---- */
typedef struct {
    int size;           /* number of processes the collective spans (local group) */
    int shape;          /* index of the distinct member set (world ranks), resolved to nodes/ppn at finalize */
    int rank;           /* this process's rank in the communicator (its local group) */
    int inter;          /* 1: an intercommunicator */
    void *mode_data;    /* private to the active mode (online: shadow communicators) */
} tmpi_comm_info;

tmpi_comm_info *tmpi_comm_lookup(MPI_Comm comm);
tmpi_comm_info *tmpi_comm_find(MPI_Comm comm); /* like lookup, but NULL when not cached (no new entry) */
void tmpi_comm_forget(MPI_Comm comm);
int tmpi_shape_count(void);
const int *tmpi_shape_members(int shape, int *size); /* sorted world ranks (-1: not in MPI_COMM_WORLD) */

/* ---- hosts and nodes (tmpi_core.c), shared by all modes ---- */
#define TMPI_HOST_MAX 256

/* This rank's host name. TUNEMPI_FAKE_PPN=N (testing node/ppn accounting on one machine) pretends world
 * rank r runs on node r / N: the name becomes "<host>#<r / N>". */
void tmpi_host_name(char host[TMPI_HOST_MAX]);
/* node_of[world rank] for every rank, nodes numbered 0, 1, ... in order of their lowest rank: one
 * allgather of host-name hashes on MPI_COMM_WORLD (collective), then a sort. Returns the node count. */
int tmpi_node_map(const char *host, int *node_of);
/* How the members (world ranks) of a shape spread over nodes: the number of nodes and the largest
 * number of members on one node. Returns 0, or -1 (nodes, ppn untouched) when a member is outside
 * MPI_COMM_WORLD. */
int tmpi_members_layout(const int *members, int size, const int *node_of, int n_nodes, int *nodes, int *ppn);

/* ---- persistent send requests (tmpi_core.c) ---- */
void tmpi_request_remember(MPI_Request request, uint64_t bytes);
int tmpi_request_bytes(MPI_Request request, uint64_t *bytes); /* 1 if known */
void tmpi_request_forget(MPI_Request request);

/* ---- growing arrays (tmpi_core.c) ---- */
/* Makes *array hold at least `needed` elements (doubling from 16); aborts when memory runs out. */
void tmpi_grow(void **array, size_t *capacity, size_t needed, size_t elem_size);

/* ---- non-blocking collectives in flight (tmpi_core.c), one table per mode ----
 * A started collective is remembered by its request, with a mode's payload (payload_size bytes), until a
 * wait or test (MPI_Wait, Test, Waitall, Testall, Waitany, Testany, Waitsome, Testsome) returns it completed:
 * the request set to MPI_REQUEST_NULL (collectives' requests are never persistent here). Around such a call:
 * tmpi_inflight_snapshot before it (which of its requests the table holds), then the mode reads seen_list
 * with tmpi_inflight_completed, then tmpi_inflight_drop_completed. A small linear table: applications keep
 * few collectives in flight, and waits look at it only while one is. */
typedef struct {
    int index;   /* position in the wait's request array */
    size_t slot; /* the table's slot */
} tmpi_inflight_seen;

typedef struct {
    size_t payload_size;
    MPI_Request *request;
    void *payload;
    size_t count, capacity;
    tmpi_inflight_seen *seen_list; /* the current wait's snapshot */
    size_t seen, seen_capacity;
    int live; /* active requests the wait names, tracked or not */
} tmpi_inflight;

void *tmpi_inflight_add(tmpi_inflight *t, MPI_Request request); /* its payload, zeroed (NULL: null request) */
void tmpi_inflight_remove(tmpi_inflight *t, MPI_Request request);
void tmpi_inflight_snapshot(tmpi_inflight *t, const tmpi_call *call);
void tmpi_inflight_drop_completed(tmpi_inflight *t, const tmpi_call *call);
/* 1 when the k-th request of the snapshot completed in the call (its handle is now MPI_REQUEST_NULL). */
int tmpi_inflight_completed(const tmpi_inflight *t, const tmpi_call *call, size_t k);

static inline void *tmpi_inflight_payload(const tmpi_inflight *t, size_t slot)
{
    return (char *)t->payload + slot * t->payload_size;
}


/* ---- state shared with modes ---- */
typedef struct {
    uint64_t t_start;        /* ticks when MPI_Init returned (or the first wrapped call, when started lazily) */
    uint64_t t_finalize;     /* ticks when MPI_Finalize was entered */
    uint64_t cpu_finalize_ns; /* the process's CPU time then (tmpi_process_cpu_ns) */
    int started_lazily;      /* MPI was initialised before the tool became active */
    int thread_level;        /* provided thread level, -1 if unknown */
    int world_rank, world_size;
} tmpi_globals_t;
extern tmpi_globals_t tmpi_globals;

void tmpi_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
