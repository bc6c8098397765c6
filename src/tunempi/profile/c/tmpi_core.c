/*
 * tunempi interposer runtime: thread roles, mode selection, start-up (at MPI_Init or lazily), the
 * communicator cache and the persistent-request table. No MPI communication happens here: everything
 * is local until the mode's finish hook runs inside MPI_Finalize.
 */
#include "tmpi.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Thread_local int tmpi_role __attribute__((tls_model("initial-exec"))) = TMPI_ROLE_UNKNOWN;

/* A mode whose hooks do nothing: used until a mode is chosen, so tmpi_active is never NULL. */
static void tmpi_idle_end(tmpi_call *call) { (void)call; }
static const tmpi_mode tmpi_idle_mode = {"idle", NULL, NULL, tmpi_idle_end, NULL, NULL};
const tmpi_mode *tmpi_active = &tmpi_idle_mode;

/* Every mode the interposer knows; TUNEMPI_MODE picks one ("off" disables the tool). */
static const tmpi_mode *const tmpi_modes[] = {&tmpi_profile_mode, &tmpi_online_mode};

tmpi_globals_t tmpi_globals = {.thread_level = -1};

/* ------------------------------------------------------------------------------- clock ---- */
int tmpi_clock_is_tsc;
static uint64_t calib_ticks0, calib_ns0;
static double ns_per_tick = 1.0;

static int tmpi_tsc_is_invariant(void)
{
#if defined(__x86_64__)
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return 0;
    char line[4096];
    int constant = 0, nonstop = 0;
    while (fgets(line, sizeof line, f) && !(constant && nonstop)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        constant = strstr(line, " constant_tsc") != NULL;
        nonstop = strstr(line, " nonstop_tsc") != NULL;
        break;
    }
    fclose(f);
    return constant && nonstop;
#else
    return 0;
#endif
}

static void tmpi_clock_start(void)
{
    const char *choice = getenv("TUNEMPI_CLOCK");
    tmpi_clock_is_tsc = !(choice && strcmp(choice, "gettime") == 0) && tmpi_tsc_is_invariant();
    calib_ns0 = tmpi_monotonic_ns();
    calib_ticks0 = tmpi_ticks();
}

void tmpi_clock_calibrate(void)
{
    if (!tmpi_clock_is_tsc)
        return;
    /* At least 20 ms between the two reference points keeps the error of the two clock reads < 1e-5. */
    uint64_t ns1, ticks1;
    do {
        ns1 = tmpi_monotonic_ns();
        ticks1 = tmpi_ticks();
    } while (ns1 - calib_ns0 < 20000000u);
    if (ticks1 > calib_ticks0)
        ns_per_tick = (double)(ns1 - calib_ns0) / (double)(ticks1 - calib_ticks0);
}

uint64_t tmpi_process_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t tmpi_ticks_to_ns(uint64_t ticks)
{
    return (uint64_t)((double)ticks * ns_per_tick + 0.5);
}

enum { TMPI_STATE_UNINIT = 0, TMPI_STATE_STARTING, TMPI_STATE_RUNNING, TMPI_STATE_DONE, TMPI_STATE_OFF };
static _Atomic int tmpi_state = TMPI_STATE_UNINIT;

void tmpi_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tunempi interposer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The mode named by TUNEMPI_MODE (default "profile"), or NULL for "off". */
static const tmpi_mode *tmpi_choose_mode(void)
{
    const char *name = getenv("TUNEMPI_MODE");
    if (name == NULL || name[0] == '\0')
        name = "profile";
    if (strcmp(name, "off") == 0)
        return NULL;
    for (size_t i = 0; i < sizeof tmpi_modes / sizeof tmpi_modes[0]; i++)
        if (strcmp(tmpi_modes[i]->name, name) == 0)
            return tmpi_modes[i];
    tmpi_warn("unknown TUNEMPI_MODE=%s (valid: profile, online, off); running untouched", name);
    return NULL;
}

int tmpi_init_wanted(void)
{
    if (tmpi_choose_mode() == NULL) {
        atomic_store(&tmpi_state, TMPI_STATE_OFF);
        tmpi_role = TMPI_ROLE_PASS;
        return 0;
    }
    return 1;
}

/* MPI is initialised: pick the mode, start it, and make the calling thread the recorded one. */
static void tmpi_start(int provided, int lazily)
{
    const tmpi_mode *mode = tmpi_choose_mode();
    if (mode == NULL) {
        atomic_store(&tmpi_state, TMPI_STATE_OFF);
        tmpi_role = TMPI_ROLE_PASS;
        return;
    }
    tmpi_clock_start();
    tmpi_globals.t_start = tmpi_ticks();
    tmpi_globals.started_lazily = lazily;
    tmpi_globals.thread_level = provided;
    PMPI_Comm_rank(MPI_COMM_WORLD, &tmpi_globals.world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &tmpi_globals.world_size);
    tmpi_active = mode;
    if (mode->start)
        mode->start();
    atomic_store(&tmpi_state, TMPI_STATE_RUNNING);
    tmpi_role = TMPI_ROLE_OWNER;
}

void tmpi_after_init(int provided)
{
    int expected = TMPI_STATE_UNINIT;
    if (atomic_compare_exchange_strong(&tmpi_state, &expected, TMPI_STATE_STARTING))
        tmpi_start(provided, 0);
}

/* Called by a thread whose role is still unknown. Starts the tool lazily when MPI was initialised
 * before the tool became active (MPI_Init not intercepted); other threads only pass through. */
int tmpi_claim_slow(void)
{
    int state = atomic_load(&tmpi_state);
    if (state == TMPI_STATE_UNINIT) {
        int initialized = 0, finalized = 0;
        PMPI_Initialized(&initialized);
        if (!initialized)
            return 0; /* erroneous call before MPI_Init: pass it through, decide later */
        PMPI_Finalized(&finalized);
        if (finalized) {
            tmpi_role = TMPI_ROLE_PASS;
            return 0;
        }
        int expected = TMPI_STATE_UNINIT;
        if (atomic_compare_exchange_strong(&tmpi_state, &expected, TMPI_STATE_STARTING)) {
            int provided = -1;
            PMPI_Query_thread(&provided);
            tmpi_start(provided, 1);
            return tmpi_role == TMPI_ROLE_OWNER;
        }
    }
    tmpi_role = TMPI_ROLE_PASS; /* another thread owns the tool, or the tool is off or finished */
    return 0;
}

int tmpi_finalize_claim(void)
{
    /* MPI_Finalize may come from another thread than MPI_Init (THREAD_MULTIPLE): every rank must take
     * part in the finish hook, so any thread qualifies here. */
    if (atomic_load(&tmpi_state) == TMPI_STATE_UNINIT && tmpi_role == TMPI_ROLE_UNKNOWN)
        tmpi_claim_slow();
    return atomic_load(&tmpi_state) == TMPI_STATE_RUNNING;
}

void tmpi_before_finalize(void)
{
    tmpi_role = TMPI_ROLE_PASS; /* from here on, nothing is recorded: the finish hook may communicate */
    tmpi_globals.t_finalize = tmpi_ticks();
    tmpi_globals.cpu_finalize_ns = tmpi_process_cpu_ns(); /* before the calibration's busy wait */
    tmpi_clock_calibrate();
    if (tmpi_active->finish)
        tmpi_active->finish();
    atomic_store(&tmpi_state, TMPI_STATE_DONE);
    tmpi_active = &tmpi_idle_mode;
}

void tmpi_pcontrol(int level)
{
    if (tmpi_active->pcontrol)
        tmpi_active->pcontrol(level);
}

/* ------------------------------------------------------------------------------------------------
 * Communicator cache. Keyed by the handle's bits (an int in MPICH, a pointer in Open MPI); entries
 * are dropped in MPI_Comm_free/MPI_Comm_disconnect because handles are reused. Each communicator
 * maps to a SHAPE: its sorted member list in MPI_COMM_WORLD ranks, computed locally (group
 * translation, no communication) and deduplicated. Shapes become (nodes, ppn) at finalize, once
 * the host of every world rank is known.
 * ------------------------------------------------------------------------------------------------ */
typedef struct {
    uint64_t key;
    int used;
    tmpi_comm_info info;
} tmpi_comm_slot;

static tmpi_comm_slot *comm_slots;
static size_t comm_capacity, comm_used;
static tmpi_comm_slot *last_comm; /* applications call on the same communicator in a row */

typedef struct {
    int size;
    uint64_t hash;
    int *members;
} tmpi_shape;

static tmpi_shape *shapes;
static int shape_count;
static size_t shape_capacity;
static MPI_Group world_group = MPI_GROUP_NULL;

static uint64_t tmpi_handle_key(const void *handle, size_t size)
{
    uint64_t key = 0;
    memcpy(&key, handle, size < sizeof key ? size : sizeof key);
    return key;
}

static size_t tmpi_hash_slot(uint64_t key, size_t capacity)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (capacity - 1);
}

static void *tmpi_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p == NULL) {
        tmpi_warn("out of memory");
        abort();
    }
    return p;
}

static int tmpi_cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int tmpi_shape_of(MPI_Comm comm, int *size_out)
{
    MPI_Group group;
    int size;
    PMPI_Comm_group(comm, &group);
    PMPI_Group_size(group, &size);
    int *ranks = tmpi_xcalloc((size_t)size + 1, sizeof *ranks);
    int *members = tmpi_xcalloc((size_t)size + 1, sizeof *members);
    for (int i = 0; i < size; i++)
        ranks[i] = i;
    if (world_group == MPI_GROUP_NULL)
        PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
    PMPI_Group_translate_ranks(group, size, ranks, world_group, members);
    PMPI_Group_free(&group);
    free(ranks);
    for (int i = 0; i < size; i++)
        if (members[i] == MPI_UNDEFINED)
            members[i] = -1;
    qsort(members, (size_t)size, sizeof *members, tmpi_cmp_int);
    uint64_t hash = tmpi_fnv1a_words(members, size);
    *size_out = size;
    for (int s = 0; s < shape_count; s++)
        if (shapes[s].hash == hash && shapes[s].size == size &&
            memcmp(shapes[s].members, members, (size_t)size * sizeof *members) == 0) {
            free(members);
            return s;
        }
    tmpi_grow((void **)&shapes, &shape_capacity, (size_t)shape_count + 1, sizeof *shapes);
    shapes[shape_count] = (tmpi_shape){size, hash, members};
    return shape_count++;
}

static void tmpi_comm_grow(void)
{
    size_t old_capacity = comm_capacity;
    tmpi_comm_slot *old = comm_slots;
    comm_capacity = comm_capacity ? 2 * comm_capacity : 64;
    comm_slots = tmpi_xcalloc(comm_capacity, sizeof *comm_slots);
    for (size_t i = 0; i < old_capacity; i++) {
        if (!old[i].used)
            continue;
        size_t j = tmpi_hash_slot(old[i].key, comm_capacity);
        while (comm_slots[j].used)
            j = (j + 1) & (comm_capacity - 1);
        comm_slots[j] = old[i];
    }
    free(old);
    last_comm = NULL;
}

tmpi_comm_info *tmpi_comm_lookup(MPI_Comm comm)
{
    uint64_t key = tmpi_handle_key(&comm, sizeof comm);
    if (last_comm && last_comm->key == key)
        return &last_comm->info;
    if (comm_capacity) {
        size_t j = tmpi_hash_slot(key, comm_capacity);
        while (comm_slots[j].used) {
            if (comm_slots[j].key == key)
                return &(last_comm = &comm_slots[j])->info;
            j = (j + 1) & (comm_capacity - 1);
        }
    }
    if (2 * (comm_used + 1) > comm_capacity)
        tmpi_comm_grow();
    size_t j = tmpi_hash_slot(key, comm_capacity);
    while (comm_slots[j].used)
        j = (j + 1) & (comm_capacity - 1);
    comm_slots[j].used = 1;
    comm_slots[j].key = key;
    comm_slots[j].info.mode_data = NULL;
    tmpi_comm_info *info = &comm_slots[j].info;
    info->shape = tmpi_shape_of(comm, &info->size);
    info->rank = info->inter = 0;
    PMPI_Comm_rank(comm, &info->rank);
    PMPI_Comm_test_inter(comm, &info->inter);
    comm_used++;
    return &(last_comm = &comm_slots[j])->info;
}

tmpi_comm_info *tmpi_comm_find(MPI_Comm comm)
{
    uint64_t key = tmpi_handle_key(&comm, sizeof comm);
    if (!comm_capacity)
        return NULL;
    for (size_t j = tmpi_hash_slot(key, comm_capacity); comm_slots[j].used; j = (j + 1) & (comm_capacity - 1))
        if (comm_slots[j].key == key)
            return &comm_slots[j].info;
    return NULL;
}

void tmpi_comm_forget(MPI_Comm comm)
{
    if (!comm_capacity)
        return;
    uint64_t key = tmpi_handle_key(&comm, sizeof comm);
    size_t j = tmpi_hash_slot(key, comm_capacity);
    while (comm_slots[j].used && comm_slots[j].key != key)
        j = (j + 1) & (comm_capacity - 1);
    if (!comm_slots[j].used)
        return;
    last_comm = NULL; /* entries move below */
    /* Backward-shift deletion keeps linear probing correct without tombstones. */
    comm_slots[j].used = 0;
    comm_used--;
    size_t hole = j;
    for (size_t k = (j + 1) & (comm_capacity - 1); comm_slots[k].used; k = (k + 1) & (comm_capacity - 1)) {
        size_t home = tmpi_hash_slot(comm_slots[k].key, comm_capacity);
        int movable = (hole <= k) ? (home <= hole || home > k) : (home <= hole && home > k);
        if (movable) {
            comm_slots[hole] = comm_slots[k];
            comm_slots[k].used = 0;
            hole = k;
        }
    }
}

int tmpi_shape_count(void) { return shape_count; }

const int *tmpi_shape_members(int shape, int *size)
{
    *size = shapes[shape].size;
    return shapes[shape].members;
}

/* ------------------------------------------------------------------------------------------------
 * Hosts and nodes. Every mode that reports (nodes, ppn) maps world ranks to nodes the same way: ranks
 * whose host names hash equal share a node. Sorting (hash, rank) pairs keeps the map O(n log n) even
 * when it runs inside MPI_Init on many ranks.
 * ------------------------------------------------------------------------------------------------ */
void tmpi_host_name(char host[TMPI_HOST_MAX])
{
    const int room = TMPI_HOST_MAX - 16; /* leaves room for the "#<node>" suffix below */
    if (gethostname(host, (size_t)room) != 0)
        strcpy(host, "unknown");
    host[room] = '\0';
    const char *fake = getenv("TUNEMPI_FAKE_PPN");
    int ppn = fake ? atoi(fake) : 0;
    if (ppn > 0) {
        size_t len = strlen(host);
        snprintf(host + len, TMPI_HOST_MAX - len, "#%d", tmpi_globals.world_rank / ppn);
    }
}

typedef struct {
    uint64_t hash;
    int rank;
} tmpi_host_rank;

static int tmpi_cmp_host_rank(const void *a, const void *b)
{
    const tmpi_host_rank *x = a, *y = b;
    if (x->hash != y->hash)
        return (x->hash > y->hash) - (x->hash < y->hash);
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int tmpi_node_map(const char *host, int *node_of)
{
    int size = tmpi_globals.world_size;
    uint64_t mine = tmpi_fnv1a_string(host);
    uint64_t *all = tmpi_xcalloc((size_t)size, sizeof *all);
    PMPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    tmpi_host_rank *by_host = tmpi_xcalloc((size_t)size, sizeof *by_host);
    for (int r = 0; r < size; r++)
        by_host[r] = (tmpi_host_rank){all[r], r};
    free(all);
    qsort(by_host, (size_t)size, sizeof *by_host, tmpi_cmp_host_rank);
    /* First pass: each rank points at the lowest rank on its host (first of its run after the sort). */
    int lowest = 0;
    for (int i = 0; i < size; i++) {
        if (i == 0 || by_host[i].hash != by_host[i - 1].hash)
            lowest = by_host[i].rank;
        node_of[by_host[i].rank] = lowest;
    }
    free(by_host);
    /* Second pass, in rank order: a rank that is the lowest of its host opens the next node; the others
     * copy their lowest rank's node, already numbered because it is smaller. */
    int nodes = 0;
    for (int r = 0; r < size; r++)
        node_of[r] = node_of[r] == r ? nodes++ : node_of[node_of[r]];
    return nodes;
}

int tmpi_members_layout(const int *members, int size, const int *node_of, int n_nodes, int *nodes, int *ppn)
{
    for (int i = 0; i < size; i++)
        if (members[i] < 0 || members[i] >= tmpi_globals.world_size)
            return -1;
    int *per_node = tmpi_xcalloc((size_t)n_nodes + 1, sizeof *per_node);
    int n = 0, most = 0;
    for (int i = 0; i < size; i++) {
        int *count = &per_node[node_of[members[i]]];
        if ((*count)++ == 0)
            n++;
        if (*count > most)
            most = *count;
    }
    free(per_node);
    *nodes = n;
    *ppn = most;
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Persistent send requests: MPI_Send_init & co. remember (request -> bytes); MPI_Start/Startall
 * count the bytes each time the request is started; MPI_Request_free forgets it. Small linear
 * table: applications keep few persistent requests alive, and the table is not touched otherwise.
 * ------------------------------------------------------------------------------------------------ */
typedef struct {
    uint64_t key;
    uint64_t bytes;
} tmpi_request_entry;

static tmpi_request_entry *requests;
static size_t request_count, request_capacity;

void tmpi_request_remember(MPI_Request request, uint64_t bytes)
{
    uint64_t key = tmpi_handle_key(&request, sizeof request);
    for (size_t i = 0; i < request_count; i++)
        if (requests[i].key == key) {
            requests[i].bytes = bytes;
            return;
        }
    tmpi_grow((void **)&requests, &request_capacity, request_count + 1, sizeof *requests);
    requests[request_count++] = (tmpi_request_entry){key, bytes};
}

int tmpi_request_bytes(MPI_Request request, uint64_t *bytes)
{
    uint64_t key = tmpi_handle_key(&request, sizeof request);
    for (size_t i = 0; i < request_count; i++)
        if (requests[i].key == key) {
            *bytes = requests[i].bytes;
            return 1;
        }
    return 0;
}

void tmpi_request_forget(MPI_Request request)
{
    uint64_t key = tmpi_handle_key(&request, sizeof request);
    for (size_t i = 0; i < request_count; i++)
        if (requests[i].key == key) {
            requests[i] = requests[--request_count];
            return;
        }
}

/* ------------------------------------------------------------------------------------------------
 * Growing arrays, and non-blocking collectives in flight (see tmpi.h)
 * ------------------------------------------------------------------------------------------------ */
void tmpi_grow(void **array, size_t *capacity, size_t needed, size_t elem_size)
{
    if (needed <= *capacity)
        return;
    size_t grown = *capacity ? *capacity : 16;
    while (grown < needed)
        grown *= 2;
    void *moved = realloc(*array, grown * elem_size);
    if (moved == NULL) {
        tmpi_warn("out of memory");
        abort(); /* inside an MPI call of the application: nothing sensible to return */
    }
    *array = moved;
    *capacity = grown;
}

void *tmpi_inflight_add(tmpi_inflight *t, MPI_Request request)
{
    if (request == MPI_REQUEST_NULL)
        return NULL;
    size_t slot = 0;
    while (slot < t->count && t->request[slot] != request)
        slot++; /* a handle completed behind the tool's back and reused: overwrite */
    if (slot == t->count) {
        size_t payload_capacity = t->capacity;
        tmpi_grow((void **)&t->request, &t->capacity, t->count + 1, sizeof *t->request);
        tmpi_grow(&t->payload, &payload_capacity, t->capacity, t->payload_size);
        t->count++;
    }
    t->request[slot] = request;
    void *payload = tmpi_inflight_payload(t, slot);
    memset(payload, 0, t->payload_size);
    return payload;
}

static void tmpi_inflight_move(tmpi_inflight *t, size_t to, size_t from)
{
    t->request[to] = t->request[from];
    memcpy(tmpi_inflight_payload(t, to), tmpi_inflight_payload(t, from), t->payload_size);
}

void tmpi_inflight_remove(tmpi_inflight *t, MPI_Request request)
{
    for (size_t slot = 0; slot < t->count; slot++)
        if (t->request[slot] == request) {
            tmpi_inflight_move(t, slot, --t->count);
            return;
        }
}

void tmpi_inflight_snapshot(tmpi_inflight *t, const tmpi_call *call)
{
    t->seen = t->live = 0;
    if (t->count == 0 || call->requests == NULL)
        return;
    for (int i = 0; i < call->nrequests; i++) {
        if (call->requests[i] == MPI_REQUEST_NULL)
            continue;
        t->live++;
        for (size_t slot = 0; slot < t->count; slot++)
            if (t->request[slot] == call->requests[i]) {
                tmpi_grow((void **)&t->seen_list, &t->seen_capacity, t->seen + 1, sizeof *t->seen_list);
                t->seen_list[t->seen++] = (tmpi_inflight_seen){.index = i, .slot = slot};
                break;
            }
    }
}

int tmpi_inflight_completed(const tmpi_inflight *t, const tmpi_call *call, size_t k)
{
    return call->requests[t->seen_list[k].index] == MPI_REQUEST_NULL;
}

void tmpi_inflight_drop_completed(tmpi_inflight *t, const tmpi_call *call)
{
    int any = 0;
    for (size_t k = 0; k < t->seen; k++)
        if (tmpi_inflight_completed(t, call, k)) {
            t->request[t->seen_list[k].slot] = MPI_REQUEST_NULL; /* marked; compacted below */
            any = 1;
        }
    t->seen = 0;
    if (!any)
        return;
    size_t out = 0;
    for (size_t slot = 0; slot < t->count; slot++)
        if (t->request[slot] != MPI_REQUEST_NULL)
            tmpi_inflight_move(t, out++, slot);
    t->count = out;
}
