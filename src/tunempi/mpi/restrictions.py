"""Which calls each collective algorithm can serve correctly, per library and version: data, with how each
entry was established (the library's source, and tunempi's conformance suite forcing the algorithm on
the problem case without tunempi: tests/conformance/, docs/conformance.md).

A requirement names a property of the CALL (or of the communicator) the algorithm needs. Users of this
table: the online mode (the interposer draws only among the algorithms whose requirements the call
meets, tunempi.online.switching), the tuning-file writers (an algorithm whose requirement the file
format cannot state is never written; MPICH's JSON can guard some of them), `tunempi report`.

`guarded` says the library checks the requirement itself when the algorithm is forced through the
environment or MPI_T (MPICH's MPIR_CVAR_COLLECTIVE_FALLBACK, silent by default: another algorithm runs).
MPICH's JSON tuning-file path does NOT check (the container is run as given), so a guard in the file is
needed there all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

#: requirement -> what the call must be like (for messages and docs). The interposer's bit for each is
#: ONLINE_BITS below (profile/c/tmpi_online.c spells the same values).
REQUIREMENTS: dict[str, str] = {
    "commutative": "a commutative operation (MPI_Op_commutative)",
    "builtin-op": "a predefined operation (MPI_SUM, MPI_MAX, ...), not a user-defined one",
    "not-inplace": "a separate send buffer (not MPI_IN_PLACE)",
    "inplace": "MPI_IN_PLACE as the send buffer",
    "count-ge-pow2": "count >= the largest power of two <= the communicator size",
    "power-of-two": "a communicator size that is a power of two",
    "parent-comm": "a whole communicator (not one of MPICH's own node-level sub-communicators)",
    "same-types": "send and receive datatypes with the same type map (not a strided send received as "
                  "plain elements)",
    "two-ranks": "a communicator of exactly two ranks",
    "at-most-four-ranks": "a communicator of at most four ranks",
    "block-regular": "equal receive counts on every rank (reduce_scatter)",
    "contiguous": "contiguous datatypes on every rank (predefined, or derived with no gaps and lower bounds 0)",
    "true-lb-zero": "datatypes whose data starts at the buffer pointer on every rank (true lower bound 0)",
    "same-counts": "the same count of datatypes of the same size on every rank (not a root's plain block "
                   "received as one derived element elsewhere)",
}

#: Requirements on the call's datatypes. Datatypes may differ between the ranks of one call (only their
#: signatures must match), so the online mode decides them by an agreement of every rank, made only for a
#: draw that needs it (profile/c/tmpi_online.c, online_datatypes_unmet); a tuning file can state none.
DATATYPE_REQUIREMENTS: frozenset[str] = frozenset({"contiguous", "true-lb-zero", "same-counts"})
#: What a user can vouch for at tune time, flag by flag (tune --assume-contiguous-datatypes, --assume-same-counts,
#: --assume-commutative-ops):
#: contiguous datatypes say nothing of counts (512 MPI_INT at the root, one contiguous type of 512 ints elsewhere).
CONTIGUOUS_DATATYPES: frozenset[str] = frozenset({"contiguous", "true-lb-zero"})
SAME_COUNTS: frozenset[str] = frozenset({"same-counts"})
#: tune --assume-commutative-ops, or a profile whose every reduction passed a commutative operation: every
#: MPI_Op the application reduces with commutes (all predefined ones do), so Open MPI's ring allreduce may be
#: written (a file cannot state the op: it would otherwise be left out).
COMMUTATIVE_OPS: frozenset[str] = frozenset({"commutative"})
#: tune's --assume flag -> the requirements it vouches for (a profile vouches by the same flags).
ASSUME_FLAGS: dict[str, frozenset[str]] = {"--assume-contiguous-datatypes": CONTIGUOUS_DATATYPES,
                                           "--assume-same-counts": SAME_COUNTS,
                                           "--assume-commutative-ops": COMMUTATIVE_OPS}

#: Bits of the online table's `requires` mask (tmpi_online.c); NEVER: a requirement the interposer
#: cannot decide identically on every rank of the call, so the algorithm is never drawn online.
ONLINE_BITS: dict[str, int] = {
    "commutative": 1,
    "builtin-op": 2,
    "not-inplace": 4,
    "inplace": 8,
    "count-ge-pow2": 16,
    "power-of-two": 32,
    "two-ranks": 64,
    "contiguous": 128,
    "true-lb-zero": 256,
    "same-counts": 512,
    "at-most-four-ranks": 1024,
}
ONLINE_NEVER = 1 << 30

#: Collectives where MPI_IN_PLACE is given by the root only: the other ranks cannot see it, so an
#: in-place requirement cannot be decided identically on every rank.
ROOTED: frozenset[str] = frozenset({"reduce", "gather", "scatter", "bcast", "gatherv", "scatterv"})

#: What the library's own check of a requirement reads, where the library checks it (`guarded`): MPICH's
#: maint/gen_coll.py (dump_fallback) turns each `restrictions:` entry of src/mpi/coll/coll_algorithms.txt into
#: one condition of MPII_COLLECTIVE_FALLBACK_CHECK, evaluated in MPIR_<Coll>_impl before the algorithm runs:
#: `MPIR_Op_is_commutative(op)`, `HANDLE_IS_BUILTIN(op)`, `count >= comm_ptr->coll.pof2`,
#: `comm_ptr->local_size == comm_ptr->coll.pof2`, `MPIR_Comm_is_parent_comm(comm_ptr)`, `sendbuf == MPI_IN_PLACE`
#: (and `!=`); the others it knows (node-consecutive: scan; displs-ordered, which reads displs: non-blocking
#: allgatherv) are on no collective the online mode switches. docs/online.md 2d.
LIBRARY_CHECK_READS: dict[str, str] = {
    "commutative": "op",
    "builtin-op": "op",
    "count-ge-pow2": "count",
    "power-of-two": "communicator",
    "parent-comm": "communicator",
    "two-ranks": "communicator",
    "inplace": "sendbuf",
    "not-inplace": "sendbuf",
}

#: Collectives whose count (and datatype and op) MPI requires to be the same on every rank: the reductions
#: (MPI-4.1 6.9.1 "called by all group members using the same arguments for count, datatype, op, root and
#: comm"; reduce_scatter(_block): the same recvcounts / recvcount everywhere). Elsewhere a rank may pass n
#: elements of one type where another passes m of another with the same signature.
SAME_COUNT_COLLECTIVES: frozenset[str] = frozenset({"allreduce", "reduce", "reduce_scatter", "reduce_scatter_block"})


def refusal_is_collective(collective: str, requirement: str) -> bool:
    """Whether the library's check of `requirement` gives the same answer on every rank of a valid call of
    `collective`, so that every rank refuses a forced algorithm together or none does (the online mode reruns
    a refused call as the library's choice on that assumption). False for what a rank may pass alone: the send
    buffer of a rooted collective (MPI_IN_PLACE at the root only), the count outside the reductions, anything
    the library does not check (then a failure, not a refusal, is all one can expect)."""
    reads = LIBRARY_CHECK_READS.get(requirement)
    if reads == "sendbuf":
        return collective not in ROOTED
    if reads == "count":
        return collective in SAME_COUNT_COLLECTIVES
    return reads in ("op", "communicator")


#: Collectives whose datatype arguments are significant at the root only: the interposer never reads them
#: (another rank may pass anything), so a datatype requirement keeps the algorithm out of the online draws.
ROOT_ONLY_DATATYPES: frozenset[str] = frozenset({"gather", "scatter", "gatherv", "scatterv"})


@dataclass(frozen=True)
class Restriction:
    """Algorithm `algorithm` of `collective` in `vendor` (versions starting with one of `versions`) is only
    correct for calls meeting every requirement in `requires`."""

    vendor: str
    versions: tuple[str, ...]
    collective: str
    algorithm: str
    requires: tuple[str, ...]
    evidence: str  # how it was established: source file(s), conformance-suite experiment
    guarded: bool = False  # the library checks it itself when forced through env/MPI_T

    def applies_to(self, vendor: str, version: str) -> bool:
        return vendor == self.vendor and any(version.startswith(v) for v in self.versions)

    def describe(self) -> str:
        return "; ".join(REQUIREMENTS[r] for r in self.requires)


_OMPI_EXP = ("conformance suite, algorithm forced by OMPI_MCA_coll_tuned_{c}_algorithm, Open MPI 5.0.11 "
             "at 2 and 4 ranks: {what}")
_OMPI_REDUCE_SRC = ("ompi/mca/coll/tuned/coll_tuned_reduce_decision.c: the fixed decision sends non-commutative "
                    "ops to in_order_binary; coll_base_reduce.c's generic tree reduces in arrival order")


def _ompi(collective: str, algorithm: str, requires: tuple[str, ...], what: str, source: str = "") -> Restriction:
    evidence = _OMPI_EXP.format(c=collective, what=what) + (f"; {source}" if source else "")
    return Restriction("openmpi", ("5.0", "4.1"), collective, algorithm, requires, evidence)


_NONCOMM = "wrong results for a non-commutative user op (2x2 matrix product)"

RESTRICTIONS: tuple[Restriction, ...] = (
    # ---- Open MPI coll/tuned (checked 5.0.11; 4.1.4 has the same coll/base code for these) ----
    _ompi("allreduce", "ring", ("commutative",), _NONCOMM,
          "coll_base_allreduce.c ompi_coll_base_allreduce_intra_ring: no commutativity check"),
    _ompi("allreduce", "segmented_ring", ("commutative",), _NONCOMM,
          "coll_base_allreduce.c: segmented ring falls back to ring, neither checks commutativity"),
    _ompi("reduce", "chain", ("commutative",), _NONCOMM, _OMPI_REDUCE_SRC),
    _ompi("reduce", "pipeline", ("commutative",), _NONCOMM, _OMPI_REDUCE_SRC),
    _ompi("reduce", "binary", ("commutative",), _NONCOMM, _OMPI_REDUCE_SRC),
    _ompi("reduce", "binomial", ("commutative",), _NONCOMM, _OMPI_REDUCE_SRC),
    _ompi("reduce_scatter", "ring", ("commutative",), _NONCOMM,
          "coll_base_reduce_scatter.c ompi_coll_base_reduce_scatter_intra_ring: 'commutative ops only' in its "
          "comment, not checked"),
    _ompi("reduce_scatter", "recursive_halving", ("commutative",), _NONCOMM,
          "coll_base_reduce_scatter.c: recursive halving is described for commutative ops, not checked"),
    # ---- Open MPI coll/libnbc (issue 41): one value for every call, so a file cannot state these ----
    *(Restriction("openmpi", ("5.0",), "iallreduce", algorithm, ("commutative",),
                  "forced by OMPI_MCA_coll_libnbc_iallreduce_algorithm (Open MPI 5.0.11, 3 and 4 ranks, counts "
                  "1-8, 2026-11-28): wrong results for a non-commutative associative user op (digit "
                  "concatenation on pairs of long long), where binomial and recursive_doubling are right; "
                  "nbc_iallreduce.c applies a forced algorithm without checking commutativity")
      for algorithm in ("ring", "rabenseifner")),
    *(Restriction("openmpi", ("5.0",), "iallreduce", algorithm, ("true-lb-zero",),
                  "conformance suite (issue 41), forced by OMPI_MCA_coll_libnbc_iallreduce_algorithm, Open MPI 5.0.11 "
                  "at 2 ranks: a crash or a hang in place with a user op on the nested type (true lb +160 bytes) "
                  "or the negative-lower-bound one (-16), counts 7 and 33, where the library's own choice is right "
                  "(as coll/tuned's ring allreduce: temporary buffers without the true lower bound's shift)")
      for algorithm in ("ring", "rabenseifner")),
    _ompi("allgather", "sparbit", ("same-types", "not-inplace"),
          "wrong results for a strided send type received as plain ints (the suite's in-place cases pass; "
          "the in-place segfault is issue 13's report from a real program under the online mode: "
          "ompi_coll_base_allgather_intra_sparbit)",
          "coll_base_allgather.c sparbit: copies blocks with the send type's layout"),
    *(_ompi(c, "two_proc", ("two-ranks",), "at 4 ranks the call fails (MPI_ERR_UNSUPPORTED_OPERATION, already "
            "inside MPI_Comm_split, which runs an allgather)", f"coll_base_{c}.c two_proc: comm size 2 only")
      for c in ("allgather", "allgatherv", "alltoall", "barrier")),
    _ompi("allgatherv", "sparbit", ("same-types",),
          "MPI error for a strided send type received as plain ints",
          "coll_base_allgatherv.c sparbit"),
    # ---- derived datatypes (issue 25) ----
    *(_ompi("allreduce", ring, ("true-lb-zero",),
            "a user op on a derived type whose true lower bound is not 0 (an hindexed of 4-D subarrays, true lb "
            "+160 bytes; an hindexed with a block below the buffer pointer, true lb -16 bytes) at counts 7 and "
            "33 writes past a buffer the algorithm allocated: glibc's heap check aborts in the call (without it, "
            "a crash or a hang cases later); the library's own choice picks ring_segmented for the 33-element "
            "nested case and crashes there too (listed as the library's own)",
            "coll_base_allreduce.c ring: the receive buffer is malloc'd as true_extent + (segcount - 1) * extent "
            "and received into without the true lower bound's shift")
      for ring in ("ring", "segmented_ring")),
    Restriction("openmpi", ("4.1",), "alltoall", "modified_bruck", ("same-types",),
                "conformance suite, algorithm forced by OMPI_MCA_coll_tuned_alltoall_algorithm, Debian's Open MPI "
                "4.1.4 at 2 ranks: a crash (and a hang once) for a nested send type (an hindexed of 4-D subarrays) "
                "received as plain ints, where the same type on both sides passes; Open MPI 5.0.11's "
                "modified_bruck passes it"),
    *(Restriction("openmpi", ("5.0", "4.1"), "bcast", algorithm, ("contiguous", "same-counts"),
                  "each splits the message by ELEMENT counts (two halves, or count / size blocks), so ranks that "
                  "pass the same bytes as different counts (a root's 512 MPI_INT received as one contiguous or "
                  "strided type of 512 ints) disagree on the blocks: forced by OMPI_MCA_coll_tuned_bcast_algorithm "
                  "(Open MPI 5.0.11, 2 ranks, 2026-11-27), split_binary_tree leaves half the receiver's values "
                  "wrong, scatter_allgather(_ring) leave them all wrong and hang the root (issue 38, found by "
                  "MPICH's bcast test with its DTP types built from seed + rank); the other algorithms are right. "
                  "'contiguous' is kept from issue 25's report (wrong values for 512 elements of a nested type, "
                  "most likely the same count mismatch), not reproduced with equal counts on every rank")
      for algorithm in ("split_binary_tree", "scatter_allgather", "scatter_allgather_ring")),
)


_MPICH_SRC = ("MPICH src/mpi/coll/coll_algorithms.txt `restrictions:` and the generated mpir_coll.c "
              "MPII_COLLECTIVE_FALLBACK_CHECK of the forced-algorithm switch")


def _mpich(collective: str, algorithm: str, requires: tuple[str, ...], what: str = "") -> Restriction:
    evidence = _MPICH_SRC + (f"; conformance suite (MPI_T-forced, fallback=error, MPICH 5.0.2 at 2 ranks): {what}"
                             if what else "")
    return Restriction("mpich", ("5.0", "4.0", "4.1", "4.2", "4.3"), collective, algorithm, requires, evidence,
                       guarded=True)


_REFUSED = "refused (MPI error) exactly for the cases that break the requirement"

RESTRICTIONS += (
    # ---- MPICH (5.0.2 checked; 4.0.2 by its sources: the same checks for the algorithms it has) ----
    _mpich("allreduce", "smp", ("commutative", "parent-comm"), _REFUSED),
    _mpich("allreduce", "reduce_scatter_allgather", ("count-ge-pow2", "builtin-op"), _REFUSED),
    _mpich("allreduce", "recursive_multiplying", ("commutative",), _REFUSED),
    _mpich("allreduce", "ring", ("commutative",), _REFUSED),
    _mpich("allreduce", "recexch", ("commutative",),
           "kept conservatively (tunempi's earlier writer guarded it): MPICH does not refuse it, and the suite "
           "found it correct for the non-commutative op at 2 ranks"),
    _mpich("allreduce", "tree", ("commutative",),
           "kept conservatively (tunempi's earlier writer guarded it): MPICH does not refuse it, and the suite "
           "found it correct for the non-commutative op at 2 ranks"),
    _mpich("allreduce", "k_reduce_scatter_allgather", ("commutative",), _REFUSED),
    _mpich("reduce", "smp", ("commutative", "parent-comm"), _REFUSED),
    _mpich("reduce", "reduce_scatter_gather", ("count-ge-pow2", "builtin-op"), _REFUSED),
    _mpich("bcast", "smp", ("parent-comm",)),
    _mpich("bcast", "scatter_recursive_doubling_allgather", ("power-of-two",)),
    _mpich("allgather", "recursive_doubling", ("power-of-two",)),
    _mpich("allgatherv", "recursive_doubling", ("power-of-two",)),
    _mpich("alltoall", "brucks", ("not-inplace",), _REFUSED),
    _mpich("alltoall", "k_brucks", ("not-inplace",), _REFUSED),
    _mpich("alltoall", "pairwise", ("not-inplace",), _REFUSED),
    _mpich("alltoall", "scattered", ("not-inplace",), _REFUSED),
    _mpich("alltoall", "pairwise_sendrecv_replace", ("inplace",), _REFUSED),
    _mpich("alltoallv", "scattered", ("not-inplace",), _REFUSED + " (issue 40; env-forced, MPICH falls back)"),
    _mpich("alltoallv", "pairwise_sendrecv_replace", ("inplace",), _REFUSED + " (issue 40; env-forced, MPICH falls "
           "back)"),
    # alltoallw (issue 40): alltoallv's two, by the same sources; MPI_T-forced with fallback=error (bench),
    # pairwise_sendrecv_replace is refused for every call with a separate send buffer; env-forced, MPICH falls
    # back (the conformance suite's 124 alltoallw cases pass under each of the three).
    _mpich("alltoallw", "scattered", ("not-inplace",)),
    _mpich("alltoallw", "pairwise_sendrecv_replace", ("inplace",)),
    _mpich("barrier", "smp", ("parent-comm",)),
    # Non-blocking (issue 41): coll_algorithms.txt's restrictions, as for their blocking algorithms. The
    # tuning-file writer guards them (csel.c computes each key for these collectives); the engine's calls
    # (separate buffers, MPI_SUM on floats) meet them; the online mode does not take these collectives.
    _mpich("iallreduce", "sched_smp", ("commutative", "parent-comm")),
    _mpich("iallreduce", "sched_reduce_scatter_allgather", ("count-ge-pow2", "builtin-op")),
    _mpich("iallreduce", "tsp_ring", ("commutative",)),
    _mpich("iallreduce", "tsp_recexch_reduce_scatter_recexch_allgatherv", ("commutative",)),
    _mpich("ibcast", "sched_smp", ("parent-comm",)),
    _mpich("ibcast", "sched_scatter_recursive_doubling_allgather", ("power-of-two",)),
    _mpich("iallgather", "sched_recursive_doubling", ("power-of-two",)),
    _mpich("ialltoall", "sched_brucks", ("not-inplace",)),
    _mpich("ialltoall", "sched_pairwise", ("not-inplace",)),
    _mpich("ialltoall", "sched_permuted_sendrecv", ("not-inplace",)),
    _mpich("ialltoall", "sched_inplace", ("inplace",),
           "refused under strict selection for the bench engine's separate buffers (issue 41)"),
    _mpich("reduce_scatter", "pairwise", ("commutative", "not-inplace"),
           "in place (MPI_SUM on ints, count >= 1) crashes even forced through the environment: the in-place "
           "requirement is found by the suite, not by MPICH's checks"),
    _mpich("reduce_scatter", "noncommutative", ("power-of-two", "block-regular"),
           "irregular receive counts crash even forced through the environment (the source comment says: "
           "power-of-two, block-regular case only; MPICH does not check it)"),
    _mpich("allgather", "recexch_doubling", ("same-types",),
           "wrong results for a strided send type received as plain ints, forced through the environment"),
    _mpich("allgather", "recexch_halving", ("same-types",),
           "wrong results for a strided send type received as plain ints, forced through the environment"),
    _mpich("reduce_scatter", "recursive_halving", ("commutative",), _REFUSED),
    _mpich("reduce_scatter_block", "noncommutative", ("power-of-two",)),
    _mpich("reduce_scatter_block", "pairwise", ("commutative",), _REFUSED),
    _mpich("reduce_scatter_block", "recursive_halving", ("commutative",), _REFUSED),
)

_TRUE_LB = ("conformance suite, algorithm forced through the environment (one per launch), MPICH 5.0.2 at 2 "
            "ranks: {what} for a derived type whose true lower bound is not 0 (an hindexed of 4-D subarrays, true "
            "lb +160 bytes, and/or an hindexed with a block below the buffer pointer, true lb -16 bytes), where "
            "the library's own choice is right; a struct with gaps and true lb 0 passes. MPICH does not check it "
            "(its fallback checks are on the op, counts and communicator)")


def _mpich_true_lb(collective: str, algorithm: str, what: str, versions: tuple[str, ...] = ("5.0",)) -> Restriction:
    return Restriction("mpich", versions, collective, algorithm, ("true-lb-zero",), _TRUE_LB.format(what=what))


RESTRICTIONS += (
    # ---- MPICH and derived datatypes (issue 25): temporary buffers without the true lower bound's shift ----
    _mpich_true_lb("allreduce", "tree", "a crash (user op, counts 0-33, both types)"),
    _mpich_true_lb("allreduce", "ring", "a crash (user op, counts 7 and 33, negative true lb; kept although "
                   "the library's own choice also crashes in that class of calls now and then)"),
    _mpich_true_lb("allreduce", "k_reduce_scatter_allgather", "a crash (user op, negative true lb; kept "
                   "although the library's own choice also crashes in that class of calls now and then)"),
    _mpich_true_lb("allgather", "k_brucks", "a crash (negative true lb)"),
    _mpich_true_lb("alltoall", "k_brucks", "a crash (negative true lb)"),
    Restriction("mpich", ("5.0",), "alltoall", "k_brucks", ("same-counts",),
                "conformance suite, forced through the environment, MPICH 5.0.2 at 2 ranks (issue 38): wrong "
                "values when one rank passes n elements of a strided vector type of 2 ints and the other 2n "
                "plain ints (the same bytes), at every count; the library's own choice is right"),
    # Non-blocking (issue 41): the transport-based (tsp_) algorithms, through the tuning files tunempi writes
    # (tests/conformance, the non-blocking cases), where the library's own choice passes.
    *(_mpich_true_lb("iallreduce", name, "a crash (user op on the negative-true-lb type, counts 1-33, in place "
                     "and not; found under the tuning files tunempi wrote)")
      for name in ("tsp_ring", "tsp_recexch_single_buffer", "tsp_recexch_multiple_buffer",
                   "tsp_recexch_reduce_scatter_recexch_allgatherv")),
    *(_mpich_true_lb(collective, "tsp_ring", "a crash (negative true lb, counts 1-33, in place and not, and a "
                     "root's ints received as that type; found under the tuning files tunempi wrote)")
      for collective in ("iallgather", "ialltoall")),
    _mpich_true_lb("iallgather", "tsp_brucks", "a crash (negative true lb, counts 1-33, in place and not; found "
                   "under the tuning files tunempi wrote)"),
    *(Restriction("mpich", ("5.0",), "iallgather", name, ("same-types",),
                  "conformance suite (issue 41), forced through the environment, MPICH 5.0.2 at 2 ranks: wrong values "
                  "for a strided vector or the nested type sent and received as plain ints (every count, one "
                  "request or three outstanding), as the blocking recexch allgathers; the library's own choice is "
                  "right")
      for name in ("tsp_recexch_doubling", "tsp_recexch_halving")),
    _mpich_true_lb("ialltoall", "tsp_brucks", "a crash (negative true lb, counts 1-33, in place and not, and a "
                   "root's ints received as that type), forced through the environment"),
    Restriction("mpich", ("5.0",), "ialltoall", "tsp_brucks", ("same-counts",),
                "conformance suite (issue 41), forced through the environment, MPICH 5.0.2 at 2 ranks: wrong values "
                "when one rank passes n elements of a strided vector (or the nested type) and the other as many "
                "plain ints (the same bytes), as the blocking k_brucks; the library's own choice is right"),
    _mpich_true_lb("ialltoall", "tsp_scattered", "a crash (negative true lb, in place), forced through the "
                   "environment"),
    # Both scatterv-based ibcasts (2026-12-07, the suite's 5- and 8-rank layouts): the scatter phase crashes for
    # a root other than 0 on every communicator size tried but 2 and 4 (8 included: power-of-two was not enough).
    *(Restriction("mpich", ("5.0",), "ibcast", name, ("power-of-two", "at-most-four-ranks"),
                  "conformance suite (2026-12-07, the 5- and 8-rank layouts), under the tuning files tunempi wrote, "
                  "in the online mode and forced through the environment, MPICH 5.0.2: a crash for a root other "
                  "than 0 on communicators of 3, 5, 6, 7 and 8 ranks (ints included: 27-58 of 208 cases per layout, "
                  "nearly all at the last rank as root), none at 2 and 4 ranks; the library's own choice is right")
      for name in ("tsp_scatterv_recexch_allgatherv", "tsp_scatterv_ring_allgatherv")),
    Restriction("mpich", ("5.0",), "ialltoall", "tsp_ring", ("same-types",),
                "conformance suite (issue 41), under the tuning files tunempi wrote, MPICH 5.0.2 at 2 ranks: wrong "
                "values for a strided vector or the nested type sent and received as plain ints (every count, "
                "one request or three outstanding); the library's own choice is right"),
    _mpich_true_lb("reduce_scatter_block", "noncommutative",
                   "wrong results (positive true lb) and a crash (negative true lb), user op; the same in "
                   "Debian's MPICH 4.0.2", versions=("5.0", "4.0")),
    Restriction("mpich", ("4.0",), "alltoall", "brucks", ("contiguous",),
                "conformance suite, algorithm forced through the environment, Debian's MPICH 4.0.2 at 2 ranks: "
                "the call returns an MPI error for 33 elements of an hindexed of struct {int, double} (gaps, two "
                "basic types), not in place, where the library's own choice is right (in place both fail: the "
                "library's own); MPICH 5.0.2's brucks passes it"),
)


def restrictions_for(vendor: str, version: str, collective: str, algorithm: str) -> tuple[Restriction, ...]:
    """The restrictions of one algorithm in one library (empty: none known)."""
    return tuple(r for r in RESTRICTIONS
                 if r.collective == collective and r.algorithm == algorithm and r.applies_to(vendor, version))


def requirements(vendor: str, version: str, collective: str, algorithm: str) -> tuple[str, ...]:
    out: list[str] = []
    for r in restrictions_for(vendor, version, collective, algorithm):
        out += [q for q in r.requires if q not in out]
    return tuple(out)


def online_mask(vendor: str, version: str, collective: str, algorithm: str) -> int:
    """The interposer's `requires` mask for an algorithm (ONLINE_NEVER where a requirement cannot be
    decided identically on every rank of a call)."""
    mask = 0
    guarded = {q for r in restrictions_for(vendor, version, collective, algorithm) if r.guarded for q in r.requires}
    for requirement in requirements(vendor, version, collective, algorithm):
        if requirement in ("inplace", "not-inplace") and collective in ROOTED:
            return ONLINE_NEVER
        if requirement in guarded and requirement in LIBRARY_CHECK_READS and \
                not refusal_is_collective(collective, requirement):
            return ONLINE_NEVER  # the library may refuse it on some ranks only: the others would wait in it
        if requirement == "parent-comm":
            continue  # an application's communicators are all parents
        if requirement in DATATYPE_REQUIREMENTS and collective in ROOT_ONLY_DATATYPES:
            return ONLINE_NEVER
        bit = ONLINE_BITS.get(requirement)
        if bit is None:
            return ONLINE_NEVER  # e.g. same-types: ranks may use different datatypes for one call
        mask |= bit
    return mask


def file_exclusion(vendor: str, version: str, collective: str, algorithm: str,
                   expressible: frozenset[str], assumed: frozenset[str] = frozenset()) -> str | None:
    """Why a tuning file whose format can only state `expressible` requirements must not select the
    algorithm (None: it may). `assumed`: requirements the user vouches every call of the application meets
    (e.g. "contiguous" for an application that passes no derived datatypes to collectives)."""
    missing = [r for r in requirements(vendor, version, collective, algorithm)
               if r not in expressible and r not in assumed]
    if not missing:
        return None
    return "needs " + "; ".join(REQUIREMENTS[r] for r in missing) + ", which the tuning file cannot state"


_IMPI_EXP = ("conformance suite, preset forced by I_MPI_ADJUST_{c}={n}, Intel MPI 2021.19.0 (PyPI wheel) at {ranks} "
             "ranks, passing with the library's own choice: {what} (Intel publishes no restrictions; its sources "
             "are closed)")


def _impi(collective: str, preset: int, requires: tuple[str, ...], what: str, ranks: str = "2 and 4") -> Restriction:
    evidence = _IMPI_EXP.format(c=collective.upper(), n=preset, what=what, ranks=ranks)
    return Restriction("impi", ("2021.19",), collective, f"preset_{preset}", requires, evidence)


_USER_OP_LAYOUTS = ("a user-defined op on a nested or negative-lower-bound datatype: wrong results or a "
                    "segfault")
RESTRICTIONS += (
    # ---- Intel MPI presets (docs/conformance.md; tests/conformance forces each one) ----
    _impi("allgather", 5, ("same-types",), "wrong results for a strided or nested send type received as ints"),
    _impi("allreduce", 4, ("contiguous", "true-lb-zero"), _USER_OP_LAYOUTS),
    # Found on 5-rank jobs (2026-12-07), outside the suite's layouts (2 and 4 ranks) and counts (0-1031):
    # both run a reduce and a bcast, and neither Intel's reduce nor its bcast forced alone fails there.
    *(Restriction("impi", ("2021.19",), "allreduce", f"preset_{preset}", ("at-most-four-ranks",),
                  f"forced by I_MPI_ADJUST_ALLREDUCE={preset}, Intel MPI 2021.19.0 (PyPI wheel) on one AMD EPYC node "
                  "(2026-12-07): wrong results, then a hang, for 4097-5200 ints (16388-20800 bytes; MPI_SUM, a user "
                  "op, in place or not) on communicators of 5, 6, 7, 8, 12 and 16 ranks, nearly every launch; right "
                  "at 1000-4096 and 5300-30000 ints there, and at 3 and 4 ranks (0 of 60 launches of 10 calls); the "
                  "library's own choice and presets 1, 2 and 5-32 right in the same probe. A file cannot bound a "
                  "preset to small communicators (Intel applies the nearest condition's preset to any other size)")
      for preset in (3, 4)),
    _impi("allreduce", 13, ("contiguous", "true-lb-zero"),
          "segfault for MPI_IN_PLACE with a user-defined op on a negative-lower-bound datatype"),
    _impi("gather", 2, ("true-lb-zero",), "segfault for a datatype with a negative lower bound"),
    _impi("gatherv", 3, ("contiguous",), "wrong results for a strided send type (received as such or as ints) "
          "on the one-rank halves of a split, counts 1, 7 and 1031 (issue 40)", ranks="2"),
    _impi("scatter", 2, ("true-lb-zero",), "segfault for a datatype with a negative lower bound"),
    _impi("reduce_scatter", 4, ("contiguous", "true-lb-zero"), _USER_OP_LAYOUTS),
    _impi("reduce_scatter", 5, ("contiguous", "true-lb-zero"), _USER_OP_LAYOUTS),
    # Found by a program nobody here wrote (mpi4py 4.1.2's test suite, test_cco_buf.TestCCOBufInplaceWorld.
    # testReduceScatter, 2 ranks): in place it overwrites the receive buffer beyond the rank's own block, which
    # every other preset and the library's default leave as they were; tunempi's suite does not check there.
    Restriction("impi", ("2021.19",), "reduce_scatter", "preset_2", ("not-inplace",),
                "mpi4py 4.1.2 test suite under I_MPI_ADJUST_REDUCE_SCATTER=2 (1..6 forced alone, only 2 fails), "
                "Intel MPI 2021.19.0 at 2 ranks: MPI_IN_PLACE with irregular counts changes the buffer past the "
                "rank's block (0 where the rank's input was 1); the other rank then waits in the next test"),
    _impi("reduce_scatter_block", 2, ("commutative",),
          "wrong results for a non-commutative user op (2x2 matrix product)"),
    # Found through allreduce on an intercommunicator, which Intel MPI runs as a reduce in each group: forcing
    # only I_MPI_ADJUST_REDUCE to 8-12 breaks it, forcing allreduce's presets alone does not.
    *(_impi("reduce", preset, ("contiguous",), "wrong results of allreduce on an intercommunicator (a reduce inside) "
            "for a user-defined op on a nested datatype", ranks="4") for preset in (8, 9, 10, 11, 12)),
    # Found the same way at 5 ranks (2026-12-07, the suite's 5-rank layout): allreduce on an intercommunicator
    # (groups of 2 and 3) with the non-commutative matrix product on the nested type, count 33, goes wrong under
    # I_MPI_ADJUST_BCAST=9, 10 or 11 alone (2 of 2 launches each; every other bcast preset and the library's own
    # choice right); bcast's own cases, the nested type on the 2- and 3-rank halves included, pass under them.
    *(_impi("bcast", preset, ("contiguous",), "wrong results of allreduce on an intercommunicator (a bcast inside) "
            "for a non-commutative user op on a nested datatype", ranks="5") for preset in (9, 10, 11)),
    # Found on an Intel Xeon host (2026-11-27; the machines before were AMD EPYC, where the suite passed): the
    # library picks its code paths by processor, so these presets' failures show only on Intel processors.
    *(_impi(collective, preset, ("true-lb-zero",),
            "wrong results for a user-defined op on a datatype with a negative lower bound (counts 7 and 33), on "
            "an Intel Xeon host", ranks="2")
      for collective, presets in (("allreduce", (10, 11, 12, *range(25, 32))), ("reduce", range(14, 20)))
      for preset in presets),
    # Non-blocking presets (issue 41; I_MPI_ADJUST_I<COLL>, the suite's non-blocking cases, one request or three
    # outstanding on one communicator).
    *(_impi("iallreduce", preset, ("commutative", "true-lb-zero"),
            "wrong results for a non-commutative user op (2x2 matrix product, contiguous and strided), and a crash "
            "for a user op on the negative-lower-bound type (counts 1-33)", ranks="2")
      for preset in (8, 14, 15, 16)),
    *(_impi("iallreduce", preset, ("commutative",),
            "wrong results for a non-commutative user op (2x2 matrix product, contiguous, strided and nested); "
            "right at 2 ranks", ranks="4")
      for preset in (10, 11, 12, 13)),
    _impi("iallgather", 4, ("true-lb-zero", "same-types", "same-counts"),
          "a crash or wrong results for the nested and negative-lower-bound types, a strided or nested send type "
          "received as plain ints, and ranks passing different types of one signature", ranks="2"),
)
