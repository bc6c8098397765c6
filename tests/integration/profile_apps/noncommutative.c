/* A reduction with a user-defined, non-commutative operation (the left operand wins: associative, not
 * commutative) and one with MPI_SUM: the profile must count the first as non-commutative, so that
 * tune --from-profile does not vouch for commutative operations (docs/profile.md). */
#include <mpi.h>

static void left_wins(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] = ((int *)in)[i];
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, left = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Op op;
    MPI_Op_create(left_wins, 0, &op);
    MPI_Allreduce(&rank, &left, 1, MPI_INT, op, MPI_COMM_WORLD);
    int ones[64] = {0}, sums[64];
    MPI_Allreduce(ones, sums, 64, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Op_free(&op);
    MPI_Finalize();
    return left == 0 && sums[0] == 0 ? 0 : 1; /* the lowest rank's value: each step's left operand wins */
}
