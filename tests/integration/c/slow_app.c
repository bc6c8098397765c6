/* An application of our own for `tunempi compare`: each rank waits SLOW_APP_BASE_MS (default 150) times
 * SLOW_APP_FACTOR (default 1) milliseconds, then the ranks reduce a deterministic sum, and rank 0 prints it
 * (the result the comparison checks) and a rate (a higher-is-better figure of merit). SLOW_APP_WRONG=1 makes
 * the sum come out wrong, SLOW_APP_FAIL=1 makes rank 0 exit with status 3.
 * Waiting (not spinning) keeps the cost independent of the machine's load: the test asserts decisions, and
 * a busy machine must not change them. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double env_double(const char *name, double fallback) {
    const char *text = getenv(name);
    return text && *text ? atof(text) : fallback;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double start = MPI_Wtime();
    double wait_ms = env_double("SLOW_APP_BASE_MS", 150.0) * env_double("SLOW_APP_FACTOR", 1.0);
    struct timespec pause = {(time_t)(wait_ms / 1000.0), (long)((wait_ms - 1000.0 * (long)(wait_ms / 1000.0)) * 1e6)};
    nanosleep(&pause, NULL);
    double local[64], total[64];
    for (int i = 0; i < 64; i++) local[i] = (rank + 1) * 0.1 + i / 3.0;
    for (int step = 0; step < 20; step++) MPI_Allreduce(local, total, 64, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double checksum = 0.0;
    for (int i = 0; i < 64; i++) checksum += total[i] * (i + 1);
    if (getenv("SLOW_APP_WRONG") && atoi(getenv("SLOW_APP_WRONG"))) checksum *= 1.001;
    MPI_Barrier(MPI_COMM_WORLD);
    double elapsed = MPI_Wtime() - start;
    if (rank == 0) {
        printf("ranks = %d\nchecksum = %.12g\nrate = %.6g steps/s\n", size, checksum, 20.0 / elapsed);
        fflush(stdout);
        if (getenv("SLOW_APP_FAIL") && atoi(getenv("SLOW_APP_FAIL"))) MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    return 0;
}
