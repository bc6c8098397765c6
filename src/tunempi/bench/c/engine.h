/* tunempi benchmark engine: shared declarations.
 *
 * engine.c    request loop, measurement, JSON output (rank 0)
 * cvars.c     MPI_T control variables: look up, write, restore (algorithm switching)
 * cases.c     one collective at one message size: buffers, fill, run, check
 * stats.c     order statistics and the confidence interval of the median
 */
#ifndef TUNEMPI_ENGINE_H
#define TUNEMPI_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

/* Elements of reductions are floats, as in OSU: sizes of reductions are multiples of this. */
#define TM_REDUCTION_ELEMENT_BYTES 4

typedef enum {
    TM_ALLREDUCE,
    TM_BCAST,
    TM_ALLGATHER,
    TM_ALLTOALL,
    TM_REDUCE,
    TM_REDUCE_SCATTER,
    TM_REDUCE_SCATTER_BLOCK,
    TM_GATHER,
    TM_SCATTER,
    TM_BARRIER,
    TM_ALLGATHERV,
    TM_ALLTOALLV,
    TM_GATHERV,
    TM_SCATTERV,
    TM_ALLTOALLW,
    TM_UNKNOWN
} tm_collective;

/* "allreduce" -> TM_ALLREDUCE; "iallreduce" -> TM_ALLREDUCE with *nonblocking set (MPI_Iallreduce + MPI_Wait:
 * the same buffers, sizes and check). The non-blocking ones measured: iallreduce, ibcast, ialltoall, iallgather. */
tm_collective tm_collective_from_name(const char *name, int *nonblocking);
int tm_collective_is_reduction(tm_collective kind);

/* How the vector collectives' blocks differ between ranks; `bytes` is their mean block (OSU's per-peer
 * size, what the profiler records for them). uniform: every block `bytes` (OSU's v-benchmarks);
 * skewed: rank r's blocks are 2 (r + 1) / (ranks + 1) x `bytes` (the last rank sends twice the mean, the
 * first little); sparse: alltoallv (and alltoallw) sends only to the next rank (a block of ranks x `bytes`), allgatherv and
 * gatherv take blocks from the even ranks only, scatterv sends to the even ranks only. gatherv/scatterv: the
 * root receives (sends) rank r's block as allgatherv's rank r contributes it. alltoallw: alltoallv's blocks
 * with a datatype per peer (MPI_BYTE each, displacements in bytes). The other collectives take uniform only. */
typedef enum { TM_DIST_UNIFORM, TM_DIST_SKEWED, TM_DIST_SPARSE, TM_DIST_UNKNOWN } tm_distribution;

tm_distribution tm_distribution_from_name(const char *name);
int tm_collective_is_vector(tm_collective kind);
/* Bytes rank `source` sends to rank `dest` (alltoallv, alltoallw), or contributes to every rank (dest < 0: allgatherv;
 * gatherv: to the root; scatterv: the root's block for rank `source`). */
size_t tm_block_bytes(tm_distribution dist, size_t bytes, int source, int dest, int ranks);

/* One collective at one message size on one communicator. */
typedef struct {
    tm_collective kind;
    MPI_Comm comm;
    int rank;
    int size;
    size_t bytes;   /* OSU convention: per-rank buffer or per-destination block (the mean one: vector) */
    size_t count;   /* elements per block (floats for reductions, bytes otherwise) */
    tm_distribution dist;
    void *sendbuf;
    void *recvbuf;
    int *recvcounts; /* reduce_scatter and the vector collectives */
    int *rdispls;    /* vector collectives */
    int *sendcounts; /* alltoallv, alltoallw, scatterv; allgatherv, gatherv: sendcounts[0] is this rank's block */
    int *sdispls;    /* alltoallv, alltoallw, scatterv (alltoallw: in bytes, as its MPI_BYTE types make them) */
    MPI_Datatype *types; /* alltoallw: each peer's send and receive type (MPI_BYTE) */
    int nonblocking; /* started with MPI_I<coll> (tm_case_start), completed by tm_case_wait */
    MPI_Request request;
} tm_case;

/* Returns 0, or -1 when buffers cannot be allocated or the size (or distribution) does not fit the
 * collective. */
int tm_case_init(tm_case *c, tm_collective kind, size_t bytes, tm_distribution dist, MPI_Comm comm);
void tm_case_free(tm_case *c);
/* Fill the send side with values that depend on (rank, iteration) so that stale or misplaced data
 * in the result is detected. */
void tm_case_fill(tm_case *c, uint32_t iteration);
/* One call: the blocking collective, or (nonblocking) start + MPI_Wait. */
int tm_case_run(tm_case *c);
/* Non-blocking cases: start the call (its request in c->request), and complete it. */
int tm_case_start(tm_case *c);
int tm_case_wait(tm_case *c);
/* 1 when this rank's result for `iteration` is wrong, else 0. */
int tm_case_check(const tm_case *c, uint32_t iteration);
/* Self-test of the check: spoil one byte of the result on one rank that checks it. */
void tm_case_spoil(tm_case *c);

/* MPI_T control variables the engine writes (algorithm cvars, a library's selection settings). Only
 * unbound int cvars; each is read once at first use so that it can be put back. */
#define TM_MAX_CVARS 64
#define TM_CVAR_NAME_MAX 128

typedef struct {
    char name[TM_CVAR_NAME_MAX];
    MPI_T_cvar_handle handle;
    int initial; /* value at first use: what `set=default` restores */
    int current; /* value last written (initial until then) */
    int pinned;  /* written by a setup request: kept for the whole launch, never restored */
} tm_cvar;

typedef struct {
    int mpi_t;   /* MPI_T initialised: 0 makes every lookup fail with a reason */
    tm_cvar slots[TM_MAX_CVARS];
    int count;
    int written; /* set by every write; the engine clears it when it re-creates its communicator */
} tm_cvars;

void tm_cvars_init(tm_cvars *cvars); /* after MPI_Init */
void tm_cvars_free(tm_cvars *cvars); /* before MPI_Finalize */
/* The slot of cvar `name`, allocated on first use; NULL with `why` filled when it cannot be used. */
tm_cvar *tm_cvar_lookup(tm_cvars *cvars, const char *name, char *why, size_t why_len);
/* Returns 0, or -1 with `why` filled. */
int tm_cvar_write(tm_cvars *cvars, tm_cvar *cvar, int value, char *why, size_t why_len);
/* Puts every cvar written before back to its start-up value, except the `kept` ones of `keep` and pinned ones. */
int tm_cvar_restore_except(tm_cvars *cvars, const tm_cvar *const *keep, int kept, char *why, size_t why_len);

/* Statistics on per-iteration times (sorted in place). */
typedef struct {
    double median;
    double ci_low;
    double ci_high;
} tm_median_ci;

void tm_sort(double *values, size_t n);
/* 95 % confidence interval of the median by the binomial (order-statistics) method.
 * `sorted` must be sorted ascending; n >= 1. */
tm_median_ci tm_median_confidence(const double *sorted, size_t n);

#endif
