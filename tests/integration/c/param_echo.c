/* Reports what every rank sees of one run-time parameter, for the search integration tests.
 *
 *   param_echo CVAR ENVVAR
 *
 * Every rank reads control variable CVAR through MPI_T (after MPI_Init: the value the library took
 * from its environment at start) and the environment variable ENVVAR. Rank 0 checks that all ranks
 * agree and prints "cvar = <value>" and "env = <value>" (ENVVAR must hold an integer; -1 when unset).
 * Exit status 1 when the ranks disagree or the cvar cannot be read.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long read_cvar(const char *name, int *ok) {
    int index = -1;
    *ok = 0;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) {
        return 0;
    }
    char cvar_name[256], desc[1024];
    int name_len = sizeof cvar_name, desc_len = sizeof desc, verbosity, bind, scope;
    MPI_Datatype datatype;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(index, cvar_name, &name_len, &verbosity, &datatype, &enumtype, desc, &desc_len, &bind,
                            &scope) != MPI_SUCCESS) {
        return 0;
    }
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) != MPI_SUCCESS || count != 1) {
        return 0;
    }
    union {
        int i;
        unsigned u;
        unsigned long ul;
        unsigned long long ull;
        long l;
        long long ll;
        char text[256];
    } value;
    memset(&value, 0, sizeof value);
    int rc = MPI_T_cvar_read(handle, &value);
    MPI_T_cvar_handle_free(&handle);
    if (rc != MPI_SUCCESS) {
        return 0;
    }
    *ok = 1;
    if (datatype == MPI_INT) return value.i;
    if (datatype == MPI_UNSIGNED) return (long long)value.u;
    if (datatype == MPI_UNSIGNED_LONG) return (long long)value.ul;
    if (datatype == MPI_UNSIGNED_LONG_LONG) return (long long)value.ull;
    if (datatype == MPI_LONG) return value.l;
    if (datatype == MPI_LONG_LONG) return value.ll;
    *ok = 0;  /* not an integer cvar */
    return 0;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init(&argc, &argv);
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) {
            fprintf(stderr, "usage: param_echo CVAR ENVVAR\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int ok = 0;
    long long mine[2];
    mine[0] = read_cvar(argv[1], &ok);
    const char *env = getenv(argv[2]);
    mine[1] = env != NULL ? atoll(env) : -1;
    long long low[2], high[2];
    int all_ok = 0;
    MPI_Allreduce(mine, low, 2, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mine, high, 2, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    int agree = all_ok && low[0] == high[0] && low[1] == high[1];
    if (rank == 0) {
        if (!all_ok) {
            fprintf(stderr, "param_echo: cannot read %s through MPI_T\n", argv[1]);
        } else if (!agree) {
            fprintf(stderr, "param_echo: ranks disagree: cvar %lld..%lld, env %lld..%lld\n", low[0], high[0], low[1],
                    high[1]);
        }
        printf("ranks = %d\ncvar = %lld\nenv = %lld\n", size, mine[0], mine[1]);
        fflush(stdout);
    }
    MPI_T_finalize();
    MPI_Finalize();
    return agree ? 0 : 1;
}
