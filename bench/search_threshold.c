/* A message-passing kernel whose speed depends on a transport threshold, for `tunempi search`.
 *
 *   search_threshold [BYTES [ROUNDS [BURST]]]     (defaults: 12288 4000 4)
 *
 * Two ranks exchange bursts of BURST messages of BYTES bytes in both directions (each rank posts
 * BURST receives, sends BURST messages, waits), ROUNDS times, after a short warm-up. The messages
 * are a little larger than the libraries' default eager/rendezvous switch points (MPICH ch4 shared
 * memory: single-copy CMA rendezvous from 8 KiB; UCX: rendezvous above its RNDV_THRESH), so each
 * one costs a handshake by default; a threshold raised above BYTES turns them into eager copies.
 * Rank 0 prints `Time in seconds = T` (the timed exchange only, without start-up) and the message
 * size; every rank checks the payload it received. Ranks beyond the first two only take part in the
 * final barrier.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long parse_positive(const char *text, const char *what) {
    char *end = NULL;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || value <= 0) {
        fprintf(stderr, "search_threshold: %s must be a positive integer, got '%s'\n", what, text);
        exit(2);
    }
    return value;
}

static void fill(unsigned char *buffer, long bytes, int seed) {
    for (long i = 0; i < bytes; i++) {
        buffer[i] = (unsigned char)((i * 31 + seed) & 0xff);
    }
}

static int check(const unsigned char *buffer, long bytes, int seed) {
    for (long i = 0; i < bytes; i++) {
        if (buffer[i] != (unsigned char)((i * 31 + seed) & 0xff)) {
            return 0;
        }
    }
    return 1;
}

/* One round: BURST messages each way between rank and peer. Returns 0 when a payload was wrong. */
static int exchange(unsigned char *send, unsigned char *recv, long bytes, int burst, int peer,
                    MPI_Request *requests, int verify, int peer_seed) {
    for (int i = 0; i < burst; i++) {
        MPI_Irecv(recv + (size_t)i * bytes, (int)bytes, MPI_UNSIGNED_CHAR, peer, i, MPI_COMM_WORLD, &requests[i]);
    }
    for (int i = 0; i < burst; i++) {
        MPI_Isend(send, (int)bytes, MPI_UNSIGNED_CHAR, peer, i, MPI_COMM_WORLD, &requests[burst + i]);
    }
    MPI_Waitall(2 * burst, requests, MPI_STATUSES_IGNORE);
    if (verify) {
        for (int i = 0; i < burst; i++) {
            if (!check(recv + (size_t)i * bytes, bytes, peer_seed)) {
                return 0;
            }
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long bytes = argc > 1 ? parse_positive(argv[1], "BYTES") : 12288;
    long rounds = argc > 2 ? parse_positive(argv[2], "ROUNDS") : 4000;
    long burst = argc > 3 ? parse_positive(argv[3], "BURST") : 4;
    if (size < 2) {
        if (rank == 0) {
            fprintf(stderr, "search_threshold: needs at least 2 ranks\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int ok = 1;
    double seconds = 0.0;
    if (rank < 2) {
        int peer = 1 - rank;
        unsigned char *send = malloc((size_t)bytes);
        unsigned char *recv = malloc((size_t)bytes * (size_t)burst);
        MPI_Request *requests = malloc(sizeof(MPI_Request) * 2 * (size_t)burst);
        if (send == NULL || recv == NULL || requests == NULL) {
            fprintf(stderr, "search_threshold: out of memory\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        fill(send, bytes, rank);
        long warmup = rounds / 10 + 1;
        for (long r = 0; r < warmup; r++) {
            ok &= exchange(send, recv, bytes, (int)burst, peer, requests, r == 0, peer);
        }
        MPI_Comm pair;
        MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &pair);
        MPI_Barrier(pair);
        double start = MPI_Wtime();
        for (long r = 0; r < rounds; r++) {
            ok &= exchange(send, recv, bytes, (int)burst, peer, requests, 0, peer);
        }
        seconds = MPI_Wtime() - start;
        ok &= exchange(send, recv, bytes, (int)burst, peer, requests, 1, peer);  /* still correct at the end */
        MPI_Comm_free(&pair);
        free(requests);
        free(recv);
        free(send);
    } else {
        MPI_Comm idle;
        MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, rank, &idle);
    }
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) {
        if (!all_ok) {
            fprintf(stderr, "search_threshold: a received payload was wrong\n");
        }
        printf("Message size = %ld bytes, %ld rounds of %ld each way\n", bytes, rounds, burst);
        printf("Time in seconds = %.6f\n", seconds);
        fflush(stdout);
    }
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
