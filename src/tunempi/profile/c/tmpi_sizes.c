/*
 * Message sizes of intercepted calls, by tunempi's convention (the shared dataset's, after OSU):
 * the per-rank buffer for allreduce/reduce/bcast and point-to-point; the per-destination block for
 * allgather/alltoall/gather/scatter; the average block for allgatherv/alltoallv/alltoallw; the rank's own block
 * for gatherv/scatterv; the whole vector for reduce_scatter(_block). See docs/profile.md.
 */
#include "tmpi.h"

static uint64_t tmpi_type_size(MPI_Datatype type)
{
    int size = 0;
    if (type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS || size < 0)
        return 0;
    return (uint64_t)size;
}

static uint64_t tmpi_times(int count, MPI_Datatype type)
{
    return count > 0 ? (uint64_t)count * tmpi_type_size(type) : 0;
}

/* Number of entries in the counts arrays of a v-collective: the remote group for intercommunicators. */
static int tmpi_peer_count(MPI_Comm comm)
{
    int inter = 0, size = 0;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter)
        PMPI_Comm_remote_size(comm, &size);
    else
        PMPI_Comm_size(comm, &size);
    return size;
}

static uint64_t tmpi_sum(const int *counts, int n)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] > 0)
            total += (uint64_t)counts[i];
    return total;
}

uint64_t tmpi_bytes_none(void) { return 0; }

uint64_t tmpi_bytes_count(int count, MPI_Datatype type) { return tmpi_times(count, type); }

uint64_t tmpi_bytes_block_inplace(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                                  MPI_Datatype recvtype)
{
    if (sendbuf == MPI_IN_PLACE)
        return tmpi_times(recvcount, recvtype);
    return tmpi_times(sendcount, sendtype);
}

uint64_t tmpi_bytes_scatter(int sendcount, MPI_Datatype sendtype, const void *recvbuf, int recvcount,
                            MPI_Datatype recvtype)
{
    if (recvbuf == MPI_IN_PLACE) /* only the root may pass it: its block is described by the send side */
        return tmpi_times(sendcount, sendtype);
    return tmpi_times(recvcount, recvtype);
}

uint64_t tmpi_bytes_vavg(const int *counts, MPI_Datatype type, MPI_Comm comm)
{
    int n = tmpi_peer_count(comm);
    return n > 0 ? tmpi_sum(counts, n) * tmpi_type_size(type) / (uint64_t)n : 0;
}

uint64_t tmpi_bytes_vsum(const int *counts, MPI_Datatype type, MPI_Comm comm)
{
    int n = 0;
    PMPI_Comm_size(comm, &n);
    return tmpi_sum(counts, n) * tmpi_type_size(type);
}

uint64_t tmpi_bytes_block_total(int count, MPI_Datatype type, MPI_Comm comm)
{
    int n = 0;
    PMPI_Comm_size(comm, &n);
    return tmpi_times(count, type) * (uint64_t)n;
}

uint64_t tmpi_bytes_alltoallv(const void *sendbuf, const int *sendcounts, MPI_Datatype sendtype,
                              const int *recvcounts, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (sendbuf == MPI_IN_PLACE)
        return tmpi_bytes_vavg(recvcounts, recvtype, comm);
    return tmpi_bytes_vavg(sendcounts, sendtype, comm);
}

/* The mean block over the peers, each block its count x its own datatype's size. */
uint64_t tmpi_bytes_alltoallw(const void *sendbuf, const int *sendcounts, const MPI_Datatype *sendtypes,
                              const int *recvcounts, const MPI_Datatype *recvtypes, MPI_Comm comm)
{
    const int in_place = sendbuf == MPI_IN_PLACE;
    const int *counts = in_place ? recvcounts : sendcounts;
    const MPI_Datatype *types = in_place ? recvtypes : sendtypes;
    int n = tmpi_peer_count(comm);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += tmpi_times(counts[i], types[i]);
    return n > 0 ? total / (uint64_t)n : 0;
}

uint64_t tmpi_bytes_gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, const int *recvcounts,
                            MPI_Datatype recvtype, MPI_Comm comm)
{
    if (sendbuf == MPI_IN_PLACE) { /* root only: its own block sits in the receive buffer */
        int rank = 0;
        PMPI_Comm_rank(comm, &rank);
        return tmpi_times(recvcounts[rank], recvtype);
    }
    return tmpi_times(sendcount, sendtype);
}

uint64_t tmpi_bytes_scatterv(const int *sendcounts, MPI_Datatype sendtype, const void *recvbuf, int recvcount,
                             MPI_Datatype recvtype, MPI_Comm comm)
{
    if (recvbuf == MPI_IN_PLACE) { /* root only */
        int rank = 0;
        PMPI_Comm_rank(comm, &rank);
        return tmpi_times(sendcounts[rank], sendtype);
    }
    return tmpi_times(recvcount, recvtype);
}
