/* An alltoallv-bound program (issue 40): ITERS calls of MPI_Alltoallv of BLOCK bytes per peer (a little
 * more to the higher ranks), one 4-byte MPI_Allreduce and one 4-byte MPI_Alltoall. Its profile has one size
 * per collective at one layout, and almost all of its MPI time is in a collective the tuner could not
 * measure before. argv[1]: iterations (default 200), argv[2]: the block in bytes (default 512 KiB), argv[3]:
 * how many bytes more each higher rank receives (default 64; 0: equal counts).
 * Prints "checksum <n>" (the same for every run) and exits 1 when a received block is wrong. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    int block = argc > 2 ? atoi(argv[2]) : 512 * 1024;
    int skew = argc > 3 ? atoi(argv[3]) : 64;
    int *scounts = malloc(sizeof(int) * (size_t)size), *sdispls = malloc(sizeof(int) * (size_t)size);
    int *rcounts = malloc(sizeof(int) * (size_t)size), *rdispls = malloc(sizeof(int) * (size_t)size);
    int stotal = 0, rtotal = 0;
    for (int p = 0; p < size; p++) {
        scounts[p] = block + skew * p; /* what rank r sends to p depends on p; so what p receives from anyone */
        rcounts[p] = block + skew * rank;
        sdispls[p] = stotal;
        rdispls[p] = rtotal;
        stotal += scounts[p];
        rtotal += rcounts[p];
    }
    unsigned char *send = malloc((size_t)stotal), *recv = malloc((size_t)rtotal);
    int wrong = 0;
    for (int it = 0; it < iters; it++) {
        for (int p = 0; p < size; p++)
            for (int i = 0; i < scounts[p]; i++)
                send[sdispls[p] + i] = (unsigned char)(rank * 31 + p * 7 + i + it);
        MPI_Alltoallv(send, scounts, sdispls, MPI_BYTE, recv, rcounts, rdispls, MPI_BYTE, MPI_COMM_WORLD);
        for (int q = 0; q < size; q++)
            for (int i = 0; i < rcounts[q]; i++)
                wrong |= recv[rdispls[q] + i] != (unsigned char)(q * 31 + rank * 7 + i + it);
    }
    int one = rank + 1, sum = 0, token[64], got[64];
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int p = 0; p < size && p < 64; p++)
        token[p] = rank * 100 + p;
    if (size <= 64)
        MPI_Alltoall(token, 1, MPI_INT, got, 1, MPI_INT, MPI_COMM_WORLD);
    int all_wrong = 0;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("checksum %d %s\n", sum, all_wrong ? "WRONG" : "right");
    free(send);
    free(recv);
    free(scounts);
    free(sdispls);
    free(rcounts);
    free(rdispls);
    MPI_Finalize();
    return all_wrong ? 1 : 0;
}
