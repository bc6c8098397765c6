#!/bin/bash
# Which ranks refuse a forced collective algorithm, MPICH 5.0.2 (issue 38, docs/online.md 2d): every algorithm
# MPICH checks, with its check kept and broken, one launch each, fallback=error written through MPI_T after
# MPI_Init; RANKS ranks that MPICH sees on NODES nodes (MPIR_CVAR_NUM_CLIQUES: rank r on node r % NODES).
# Prints, per call, each rank's "ok" or "REFUSED" and mpiexec's exit status (124: a rank hung, killed at 20 s).
#
#   bench/mpich_refusal_probe.sh [RANKS [NODES [MPICH_PREFIX]]]     (default: 4 1 .venv/opt/mpich)
#
# The ints are MPICH 5.0.2's (tunempi: adapter_for(resolve_library("mpich")).runtime_switch(coll, name)):
# MPIR_CVAR_COLLECTIVE_FALLBACK error = 0, every <COLL>_POSIX_INTRA_ALGORITHM mpir = 0.
set -u
ranks=${1:-4}; nodes=${2:-1}
here=$(cd "$(dirname "$0")" && pwd)
prefix=${3:-$here/../.venv/opt/mpich}
out=$(mktemp -d)
"$prefix/bin/mpicc" -O1 -o "$out/probe" "$here/mpich_refusal_probe.c" || exit 1
run() {
    local token=$1 value=$2 name=$3
    shift 3
    local text status
    text=$(env MPIR_CVAR_NUM_CLIQUES="$nodes" \
        PROBE_CVARS="MPIR_CVAR_COLLECTIVE_FALLBACK=0,MPIR_CVAR_${token}_INTRA_ALGORITHM=$value,MPIR_CVAR_${token}_POSIX_INTRA_ALGORITHM=0" \
        timeout 20 "$prefix/bin/mpiexec" -n "$ranks" "$out/probe" "$@" 2>&1)
    status=$?
    echo "$token $name $* (exit $status): $(echo "$text" | grep '^rank' | sort |
        awk '{printf "r%s:%s ", $2, ($4 == 0 ? "ok" : "REFUSED")}')"
}
echo "MPICH at $ranks ranks on $nodes node(s)"
run ALLREDUCE 5 reduce_scatter_allgather allreduce
run ALLREDUCE 5 reduce_scatter_allgather allreduce inplace
run ALLREDUCE 5 reduce_scatter_allgather allreduce1
run ALLREDUCE 8 ring allreduce
run ALLREDUCE 8 ring allreducenc
run ALLREDUCE 9 k_reduce_scatter_allgather allreduce
run ALLREDUCE 9 k_reduce_scatter_allgather allreducenc
run ALLREDUCE 4 recursive_multiplying allreduce
run ALLREDUCE 4 recursive_multiplying allreducenc
run ALLTOALL 1 brucks alltoall
run ALLTOALL 1 brucks alltoall inplace
run ALLTOALL 2 k_brucks alltoall
run ALLTOALL 4 pairwise alltoall
run ALLTOALL 6 scattered alltoall
run ALLTOALL 5 pairwise_sendrecv_replace alltoall inplace
run ALLTOALL 5 pairwise_sendrecv_replace alltoall
run REDUCE 4 reduce_scatter_gather reduce
run REDUCE 4 reduce_scatter_gather reduce inplace
run REDUCE 4 reduce_scatter_gather reduce1
run REDUCE 4 reduce_scatter_gather reduce1 inplace
run REDUCE_SCATTER_BLOCK 3 pairwise rsb
run REDUCE_SCATTER_BLOCK 3 pairwise rsbnc
run REDUCE_SCATTER_BLOCK 1 noncommutative rsbnc
run REDUCE_SCATTER 5 recursive_halving rs
run REDUCE_SCATTER 3 pairwise rs
run ALLGATHER 4 recursive_doubling allgather
run ALLGATHER 4 recursive_doubling allgather inplace
run ALLGATHERV 3 recursive_doubling allgatherv
run BCAST 4 scatter_recursive_doubling_allgather bcast
run BCAST 5 scatter_ring_allgather bcast
rm -rf "$out"
