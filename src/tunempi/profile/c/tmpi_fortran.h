/*
 * Argument conversions for the generated Fortran entry points (tunempi/profile/generate.py,
 * generate_fortran), used only for the Fortran bindings of a library that call PMPI_ directly.
 * A Fortran entry point converts its arguments with these, calls the C wrapper MPI_X (so the active mode
 * sees the call once) and converts the results back.
 */
#ifndef TUNEMPI_TMPI_FORTRAN_H
#define TUNEMPI_TMPI_FORTRAN_H

#include "tmpi.h"
#include <stdio.h>
#include <stdlib.h>

_Static_assert(sizeof(MPI_Fint) == sizeof(int), "Fortran INTEGER arrays are passed to C as int arrays");

#ifdef MPI_F_STATUS_SIZE
#define TMPIF_STATUS_SIZE MPI_F_STATUS_SIZE
#else
#define TMPIF_STATUS_SIZE ((int)(sizeof(MPI_Status) / sizeof(MPI_Fint)))
#endif

/* Fortran's MPI_IN_PLACE and MPI_BOTTOM are addresses of Open MPI's common blocks, one symbol per name
 * mangling. Weak: a library (or mangling) without them leaves the address NULL. */
extern int mpi_fortran_in_place_ __attribute__((weak));
extern int mpi_fortran_in_place __attribute__((weak));
extern int mpi_fortran_in_place__ __attribute__((weak));
extern int MPI_FORTRAN_IN_PLACE __attribute__((weak));
extern int mpi_fortran_bottom_ __attribute__((weak));
extern int mpi_fortran_bottom __attribute__((weak));
extern int mpi_fortran_bottom__ __attribute__((weak));
extern int MPI_FORTRAN_BOTTOM __attribute__((weak));

static inline void *tmpif_buffer(void *addr)
{
    if (addr == NULL)
        return addr;
    if (addr == (void *)&mpi_fortran_in_place_ || addr == (void *)&mpi_fortran_in_place ||
        addr == (void *)&mpi_fortran_in_place__ || addr == (void *)&MPI_FORTRAN_IN_PLACE)
        return MPI_IN_PLACE;
    if (addr == (void *)&mpi_fortran_bottom_ || addr == (void *)&mpi_fortran_bottom ||
        addr == (void *)&mpi_fortran_bottom__ || addr == (void *)&MPI_FORTRAN_BOTTOM)
        return MPI_BOTTOM;
    return addr;
}

/* Fortran's MPI_STATUS(ES)_IGNORE: mpif.h / `use mpi` (and Open MPI's mpi_f08) pass MPI_F_STATUS_IGNORE;
 * MPI-4 libraries give mpi_f08's own sentinel as MPI_F08_STATUS_IGNORE (MPICH's mpi_f08 uses it). */
static inline int tmpif_status_ignored(const MPI_Fint *f)
{
#if MPI_VERSION >= 4
    if ((const void *)f == (const void *)MPI_F08_STATUS_IGNORE)
        return 1;
#endif
    return f == MPI_F_STATUS_IGNORE;
}

static inline int tmpif_statuses_ignored(const MPI_Fint *f)
{
#if MPI_VERSION >= 4
    if ((const void *)f == (const void *)MPI_F08_STATUSES_IGNORE)
        return 1;
#endif
    return f == MPI_F_STATUSES_IGNORE;
}

static inline void *tmpif_alloc(int n, size_t size)
{
    void *p = malloc((size_t)(n > 0 ? n : 1) * size);
    if (p == NULL) {
        fprintf(stderr, "tunempi: out of memory converting Fortran arguments\n");
        abort();
    }
    return p;
}

/* A datatype per peer (alltoallw): as many as the communicator's group, the remote one for an intercommunicator. */
static inline MPI_Datatype *tmpif_types_in(const MPI_Fint *f, MPI_Comm comm)
{
    int inter = 0, n = 0;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter)
        PMPI_Comm_remote_size(comm, &n);
    else
        PMPI_Comm_size(comm, &n);
    MPI_Datatype *c = tmpif_alloc(n, sizeof *c);
    for (int i = 0; i < n; i++)
        c[i] = PMPI_Type_f2c(f[i]);
    return c;
}

static inline MPI_Request *tmpif_requests_in(const MPI_Fint *f, int n)
{
    MPI_Request *c = tmpif_alloc(n, sizeof *c);
    for (int i = 0; i < n; i++)
        c[i] = PMPI_Request_f2c(f[i]);
    return c;
}

static inline void tmpif_requests_done(int rc, MPI_Request *c, MPI_Fint *f, int n)
{
    if (rc == MPI_SUCCESS)
        for (int i = 0; i < n; i++)
            f[i] = PMPI_Request_c2f(c[i]);
    free(c);
}

/* noipa: GCC would otherwise see MPICH's MPI_STATUSES_IGNORE ((MPI_Status *)1) flow into an array
 * parameter and warn (-Wstringop-overflow) about a region of size 0. */
static __attribute__((noipa, unused)) MPI_Status *tmpif_statuses_in(MPI_Fint *f, int n)
{
    if (tmpif_statuses_ignored(f))
        return MPI_STATUSES_IGNORE;
    return tmpif_alloc(n, sizeof(MPI_Status));
}

static inline void tmpif_statuses_done(int rc, MPI_Status *c, MPI_Fint *f, int n)
{
    if (c == MPI_STATUSES_IGNORE)
        return;
    if (rc == MPI_SUCCESS)
        for (int i = 0; i < n; i++)
            PMPI_Status_c2f(&c[i], f + (size_t)i * TMPIF_STATUS_SIZE);
    free(c);
}

#endif
