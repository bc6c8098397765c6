/* What the MPI library thinks the layout is: rank 0 prints one JSON line
 *   {"size":N,"nodes":K,"node_sizes":[...],"names":[...],"sum_ok":true}
 * nodes: how many MPI_COMM_TYPE_SHARED communicators there are (their rank-0 processes counted);
 * node_sizes: each rank's shared-communicator size, by rank; names: MPI_Get_processor_name by rank;
 * sum_ok: an allreduce across all ranks gave the right sum (traffic between nodes works).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, node_rank, node_size, name_len, leaders = 0, sum = 0;
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    MPI_Comm node;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &node_rank);
    MPI_Comm_size(node, &node_size);
    MPI_Get_processor_name(name, &name_len);
    int leader = node_rank == 0;
    MPI_Allreduce(&leader, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int *sizes = rank == 0 ? malloc(sizeof(int) * (size_t)size) : NULL;
    char *names = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(&node_size, 1, MPI_INT, sizes, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("{\"size\":%d,\"nodes\":%d,\"node_sizes\":[", size, leaders);
        for (int r = 0; r < size; ++r) printf("%s%d", r ? "," : "", sizes[r]);
        printf("],\"names\":[");
        for (int r = 0; r < size; ++r) printf("%s\"%s\"", r ? "," : "", names + (size_t)r * MPI_MAX_PROCESSOR_NAME);
        printf("],\"sum_ok\":%s}\n", sum == size * (size + 1) / 2 ? "true" : "false");
        fflush(stdout);
        free(sizes);
        free(names);
    }
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
