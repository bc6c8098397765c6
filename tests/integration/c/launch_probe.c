/* A tiny MPI program for the launcher tests.
 *
 *   launch_probe hello VAR   every rank checks an allreduce and prints "rank R/N VAR=value"
 *   launch_probe hang        every rank sleeps forever after MPI_Init (killed by the timeout)
 *   launch_probe echo        rank 0 reads lines from stdin and shares them; every rank adds up
 *                            the line's bytes; rank 0 answers {"line":"...","ranks":N,"sum":S}
 *                            per line and stops at a line "quit" or at end of input
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int hello(const char *var) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int one = 1, total = 0;
    MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (total != size) {
        fprintf(stderr, "rank %d: allreduce gave %d, expected %d\n", rank, total, size);
        return 1;
    }
    const char *value = getenv(var);
    printf("rank %d/%d %s=%s\n", rank, size, var, value ? value : "(unset)");
    fflush(stdout);
    return 0;
}

static int echo(void) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char line[4096];
    for (;;) {
        int length = -1;
        if (rank == 0 && fgets(line, sizeof line, stdin) != NULL) {
            length = (int)strcspn(line, "\n");
            line[length] = '\0';
            if (strcmp(line, "quit") == 0) {
                length = -1;
            }
        }
        MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (length < 0) {
            return 0;
        }
        MPI_Bcast(line, length + 1, MPI_CHAR, 0, MPI_COMM_WORLD);
        long mine = 0, sum = 0;
        for (int i = 0; i < length; i++) {
            mine += (unsigned char)line[i];
        }
        MPI_Reduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("{\"line\":\"%s\",\"ranks\":%d,\"sum\":%ld}\n", line, size, sum);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int status = 2;
    if (argc >= 3 && strcmp(argv[1], "hello") == 0) {
        status = hello(argv[2]);
    } else if (argc >= 2 && strcmp(argv[1], "hang") == 0) {
        for (;;) {
            sleep(1);
        }
    } else if (argc >= 2 && strcmp(argv[1], "echo") == 0) {
        status = echo();
    } else {
        /* Every rank takes this branch, so ending normally cannot leave a rank waiting. */
        fprintf(stderr, "usage: %s hello VAR | hang | echo\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    if (status != 0) {
        MPI_Abort(MPI_COMM_WORLD, status);
    }
    MPI_Finalize();
    return 0;
}
