"""The algorithm restriction table (mpi/restrictions.py) and the places that read it: the online table,
the tuning-file exclusions and the MPICH JSON guards."""

from __future__ import annotations

import json
from pathlib import Path

from tunempi.mpi.mpich import LEAF_RESTRICTIONS, file_expressible
from tunempi.mpi.restrictions import (
    ASSUME_FLAGS,
    CONTIGUOUS_DATATYPES,
    DATATYPE_REQUIREMENTS,
    ONLINE_BITS,
    ONLINE_NEVER,
    REQUIREMENTS,
    RESTRICTIONS,
    Restriction,
    file_exclusion,
    online_mask,
    refusal_is_collective,
    requirements,
)
from tunempi.rules.ruleset import CommBlock, MsgRule, RuleSet
from tunempi.writers import selection_json


def test_every_entry_names_known_requirements_and_says_how_it_was_established():
    for r in RESTRICTIONS:
        assert r.requires and set(r.requires) <= set(REQUIREMENTS), r
        assert r.evidence and r.versions, r


def test_issue_13_cases_are_in_the_table():
    # Open MPI's forced reduce_scatter ring / recursive_halving give wrong results for non-commutative ops
    for name in ("ring", "recursive_halving"):
        assert requirements("openmpi", "5.0.11", "reduce_scatter", name) == ("commutative",)
        assert requirements("openmpi", "4.1.4", "reduce_scatter", name) == ("commutative",)
    assert "not-inplace" in requirements("openmpi", "5.0.11", "allgather", "sparbit")
    assert requirements("openmpi", "5.0.11", "allreduce", "recursive_doubling") == ()
    assert requirements("mpich", "5.0.2", "reduce_scatter", "ring") == ()  # a name MPICH does not restrict


def test_online_masks_say_what_a_call_must_be_like():
    assert online_mask("openmpi", "5.0.11", "reduce_scatter", "ring") == ONLINE_BITS["commutative"]
    # a requirement no rank can decide alone for everyone (datatypes may differ between ranks): never drawn
    assert online_mask("openmpi", "5.0.11", "allgather", "sparbit") == ONLINE_NEVER
    assert online_mask("mpich", "5.0.2", "alltoall", "pairwise_sendrecv_replace") == ONLINE_BITS["inplace"]
    # MPICH's smp needs a parent communicator: every application communicator is one
    assert online_mask("mpich", "5.0.2", "allreduce", "smp") == ONLINE_BITS["commutative"]
    assert online_mask("openmpi", "5.0.11", "alltoall", "two_proc") == ONLINE_BITS["two-ranks"]
    assert online_mask("openmpi", "5.0.11", "bcast", "binomial") == 0


def test_rules_files_cannot_restrict_but_mpich_json_can():
    reason = file_exclusion("openmpi", "5.0.11", "reduce_scatter", "ring", frozenset())
    assert reason is not None and "commutative" in reason
    assert file_exclusion("openmpi", "5.0.11", "bcast", "binomial", frozenset()) is None
    excluded = {(r.collective, r.algorithm) for r in RESTRICTIONS if r.vendor == "mpich" and file_exclusion(
        "mpich", "5.0.2", r.collective, r.algorithm, file_expressible(r.collective))}
    # the JSON cannot compare send and receive datatypes, nor see a datatype's bounds, and its in-place key
    # exists for alltoall only
    assert excluded == {("allgather", "recexch_doubling"), ("allgather", "recexch_halving"),
                        ("reduce_scatter", "pairwise"), ("allreduce", "tree"), ("allreduce", "ring"),
                        ("allreduce", "k_reduce_scatter_allgather"), ("allgather", "k_brucks"),
                        ("alltoall", "k_brucks"), ("reduce_scatter_block", "noncommutative"),
                        # non-blocking (issue 41): the tsp_ algorithms the conformance suite breaks with derived
                        # datatypes (true lower bound, send type != receive type, different counts per rank)
                        *(("iallreduce", n) for n in ("tsp_ring", "tsp_recexch_single_buffer",
                                                      "tsp_recexch_multiple_buffer",
                                                      "tsp_recexch_reduce_scatter_recexch_allgatherv")),
                        *(("iallgather", n) for n in ("tsp_ring", "tsp_brucks", "tsp_recexch_doubling",
                                                      "tsp_recexch_halving")),
                        *(("ialltoall", n) for n in ("tsp_ring", "tsp_brucks", "tsp_scattered"))}
    assert file_expressible("alltoall") >= {"inplace", "not-inplace"}


def test_mpich_json_guards_a_commutative_only_leaf():
    default = {"algorithm=MPIR_Reduce_scatter_intra_noncommutative": {}}
    rule_set = RuleSet("reduce_scatter", (CommBlock(1, None, (MsgRule(None, "recursive_halving"),)),))
    tree = selection_json.tuned_intra_subtree(rule_set, default, restrictions=LEAF_RESTRICTIONS)
    leaf = {"algorithm=MPIR_Reduce_scatter_intra_recursive_halving": {}}
    assert json.dumps(tree) == json.dumps({"is_commutative=no": default, "is_commutative=yes": leaf})
    # the suite's in-place crash of reduce_scatter pairwise reaches the guards' spelling too
    assert LEAF_RESTRICTIONS["MPIR_Reduce_scatter_intra_pairwise"] == ("commutative", "noinplace")


def test_issue_25_datatype_restrictions_are_in_the_table():
    # Open MPI's ring allreduces write past their buffer for a datatype whose true lower bound is not 0
    for name in ("ring", "segmented_ring"):
        assert requirements("openmpi", "5.0.11", "allreduce", name) == ("commutative", "true-lb-zero")
    # the bcasts that split by element counts (issue 38: wrong or hung where ranks pass different counts)
    for name in ("split_binary_tree", "scatter_allgather", "scatter_allgather_ring"):
        assert requirements("openmpi", "5.0.11", "bcast", name) == ("contiguous", "same-counts")
        assert requirements("openmpi", "4.1.4", "bcast", name) == ("contiguous", "same-counts")
    assert requirements("openmpi", "5.0.11", "bcast", "binomial") == ()
    assert "true-lb-zero" in requirements("mpich", "5.0.2", "allreduce", "tree")
    assert "true-lb-zero" not in requirements("mpich", "5.0.2", "allreduce", "recursive_doubling")


def test_datatype_requirements_are_agreed_online_except_where_only_the_root_s_datatype_counts():
    bits = ONLINE_BITS["commutative"] | ONLINE_BITS["true-lb-zero"]
    assert online_mask("openmpi", "5.0.11", "allreduce", "ring") == bits
    assert online_mask("openmpi", "5.0.11", "bcast", "scatter_allgather") == (ONLINE_BITS["contiguous"]
                                                                              | ONLINE_BITS["same-counts"])
    # the bits are the interposer's (tmpi_online.c NEED_CONTIGUOUS, NEED_TRUE_LB_ZERO, NEED_SAME_COUNTS)
    source = (Path(__file__).parents[2] / "src/tunempi/profile/c/tmpi_online.c").read_text()
    assert f"NEED_CONTIGUOUS = {ONLINE_BITS['contiguous']}," in source
    assert f"NEED_TRUE_LB_ZERO = {ONLINE_BITS['true-lb-zero']}," in source
    assert f"NEED_SAME_COUNTS = {ONLINE_BITS['same-counts']}," in source
    assert f"NEED_AT_MOST_FOUR_RANKS = {ONLINE_BITS['at-most-four-ranks']}," in source
    assert DATATYPE_REQUIREMENTS == {"contiguous", "true-lb-zero", "same-counts"}


def test_a_user_may_vouch_for_a_datatype_requirement_a_file_cannot_state():
    reason = file_exclusion("openmpi", "5.0.11", "bcast", "scatter_allgather", frozenset())
    assert reason is not None and "contiguous" in reason
    assert file_exclusion("openmpi", "5.0.11", "bcast", "scatter_allgather", frozenset(),
                          DATATYPE_REQUIREMENTS) is None
    # contiguous datatypes say nothing of counts: a root's 512 ints may arrive as one derived element
    reason = file_exclusion("openmpi", "5.0.11", "bcast", "scatter_allgather", frozenset(), CONTIGUOUS_DATATYPES)
    assert reason is not None and "same count" in reason and "contiguous" not in reason
    # vouching for datatypes does not lift the other requirements
    reason = file_exclusion("openmpi", "5.0.11", "allreduce", "ring", frozenset(), DATATYPE_REQUIREMENTS)
    assert reason is not None and "commutative" in reason and "true lower bound" not in reason


def test_a_leaf_keeps_every_guard_of_its_entries_and_none_for_datatypes():
    # allreduce tree has two entries (commutativity from MPICH's checks, true lb 0 from issue 25): the guard
    # of the first must survive the second, and no guard is asked for a datatype requirement
    assert LEAF_RESTRICTIONS["MPIR_Allreduce_intra_tree"] == ("commutative",)
    assert LEAF_RESTRICTIONS["MPIR_Alltoall_intra_brucks"] == ("noinplace",)
    assert "MPIR_Allgather_intra_k_brucks" not in LEAF_RESTRICTIONS
    assert not any(set(v) & DATATYPE_REQUIREMENTS for v in LEAF_RESTRICTIONS.values())


def test_the_library_refuses_a_forced_algorithm_on_every_rank_or_on_none():
    """Issue 38: the online mode reruns a refused call as the library's choice, assuming every rank refused.
    MPICH's checks (MPII_COLLECTIVE_FALLBACK_CHECK, from coll_algorithms.txt's restrictions) read the op, the
    count of reductions, the communicator and MPI_IN_PLACE: pinned here for every requirement the table says
    the library checks, so an entry whose check could differ between ranks is never drawn online."""
    for r in RESTRICTIONS:
        if not r.guarded:
            continue
        for requirement in r.requires:
            for version in r.versions:
                mask = online_mask(r.vendor, version + ".0", r.collective, r.algorithm)
                assert refusal_is_collective(r.collective, requirement) or mask == ONLINE_NEVER, (r, requirement)
    # what a rank may pass alone: MPI_IN_PLACE at the root, a count outside the reductions
    assert not refusal_is_collective("reduce", "inplace") and refusal_is_collective("alltoall", "inplace")
    assert refusal_is_collective("reduce", "count-ge-pow2") and not refusal_is_collective("bcast", "count-ge-pow2")
    assert not refusal_is_collective("allgather", "same-types")  # not a library check: a failure, no refusal
    # the MPICH entries the online mode draws all refuse collectively
    drawn = {(r.collective, r.algorithm) for r in RESTRICTIONS if r.vendor == "mpich" and r.guarded and
             online_mask("mpich", "5.0.2", r.collective, r.algorithm) != ONLINE_NEVER}
    assert {("allreduce", "reduce_scatter_allgather"), ("reduce", "reduce_scatter_gather"),
            ("alltoall", "pairwise_sendrecv_replace"), ("allgather", "recursive_doubling")} <= drawn


def test_a_guarded_check_on_a_rank_local_argument_is_never_drawn_online(monkeypatch):
    import tunempi.mpi.restrictions as table

    local = Restriction("mpich", ("5.0",), "reduce", "made_up", ("not-inplace",), "test", guarded=True)
    counts = Restriction("mpich", ("5.0",), "bcast", "made_up", ("count-ge-pow2",), "test", guarded=True)
    monkeypatch.setattr(table, "RESTRICTIONS", (*table.RESTRICTIONS, local, counts))
    assert online_mask("mpich", "5.0.2", "reduce", "made_up") == ONLINE_NEVER
    assert online_mask("mpich", "5.0.2", "bcast", "made_up") == ONLINE_NEVER


def test_intel_reduce_and_bcast_allreduce_presets_stay_out_of_every_file_whatever_the_user_vouches():
    """Intel MPI 2021.19's allreduce presets 3 and 4 compute wrong sums on communicators of 5 ranks and more
    (16-20 KB, measured): no Intel file can bound a preset to smaller communicators, and no flag of the user's
    vouches for a communicator size, so neither is written, nor drawn above four ranks; the ring (8) still is."""
    vouched = frozenset().union(*ASSUME_FLAGS.values())
    for preset in ("preset_3", "preset_4"):
        assert "at-most-four-ranks" in requirements("impi", "2021.19.0", "allreduce", preset)
        reason = file_exclusion("impi", "2021.19.0", "allreduce", preset, frozenset(), vouched)
        assert reason is not None and "at most four ranks" in reason
        # the interposer decides the size on every rank alike (tmpi_online.c NEED_AT_MOST_FOUR_RANKS)
        assert online_mask("impi", "2021.19.0", "allreduce", preset) & ONLINE_BITS["at-most-four-ranks"]
    assert file_exclusion("impi", "2021.19.0", "allreduce", "preset_8", frozenset(), vouched) is None
    assert "at-most-four-ranks" not in set().union(*ASSUME_FLAGS.values())
