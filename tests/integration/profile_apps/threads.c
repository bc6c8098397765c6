/*
 * MPI_THREAD_MULTIPLE: the main thread makes 3 allreduces on MPI_COMM_WORLD while a second thread
 * makes 5 on a duplicate at the same time. Only the thread that initialised MPI is recorded.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

static MPI_Comm dup;

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++) {
        int one = 1, sum = 0;
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, dup);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "no MPI_THREAD_MULTIPLE\n");
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    for (int i = 0; i < 3; i++) {
        double x = 1, sum = 0;
        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    pthread_join(thread, NULL);
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return 0;
}
