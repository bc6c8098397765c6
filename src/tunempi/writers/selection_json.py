"""Rule sets -> a COMPLETE MPICH collective-selection JSON file (MPIR level) and its POSIX-level companion.

Pure syntax: the library's default trees, the leaves its parser accepts, the leaf parameters and each
leaf's restrictions are passed in by MPICH's vendor adapter (in mpi/), which also holds the evaluator
that walks a tree as MPICH does.

The file is the library's own default MPIR tree with the `comm_type=intra`
subtree of each tuned collective replaced; everything else (untuned collectives, intercommunicators,
non-blocking collectives) stays the library's default. MPICH aborts on a tree that lacks a collective.

Facts this module relies on (MPICH 5.0.2; src/mpi/coll/src/csel.c, csel_container.c,
src/mpi/coll/coll_algorithms.txt of MPICH's repository; checked against the embedded library):

* Sibling keys are tried in file order, first match wins; `comm_size<=N`, `avg_msg_size<=N`, ... must
  have a following sibling (the `=any` key closes every list). Python dicts keep insertion order and
  json-c iterates objects in insertion order, so the order written is the order MPICH tries.
* Message size keys (csel.c get_avg_msgsize / get_total_msgsize):
  - `avg_msg_size` = type size x count for allreduce, bcast, reduce; type size x sendcount for alltoall.
    Defined for these four only: any other collective ASSERTS on it.
  - `total_msg_size` = avg x comm size for the four above; recvcount x type size x comm size for
    allgather; sum(recvcounts) x type size for reduce_scatter, recvcount x type size x comm size for
    reduce_scatter_block; sum(sendcounts) x type size for alltoallv; and for gather/scatter
    (send|recv)count x comm size WITHOUT the type size (the code overwrites it: bytes only for 1-byte
    types, which is what OSU's gather/scatter use).
  tunempi's bytes are OSU's (per-rank buffer for allreduce/bcast/reduce, per-destination block for
  allgather/alltoall/gather/scatter), so: avg key = OSU bytes (comm-size independent, used wherever
  defined); total key = OSU bytes x comm size for allgather/gather/scatter/alltoallv, = OSU bytes for
  reduce_scatter(_block) (OSU's size there is the per-rank send buffer). gatherv and scatterv have
  neither key (csel.c asserts on both): a file selects one algorithm per communicator size for them.
* `comm_avg_ppn<=N` (csel.c, 4.x and 5.0): true when the communicator knows its nodes and comm size <= N x
  its nodes; a communicator without node information (MPICH's internal node sub-communicators) fails it.
  Written only for a size whose layouts keep their own rules (CommBlock.by_ppn, `_ppn_subtree`).
* `count<pow2` is true when count < the largest power of two <= comm size (get_count: count for
  bcast/allreduce/reduce, recvcount for allgather, sum(recvcounts) for reduce_scatter).
* Leaves are `algorithm=MPIR_<Coll>_intra_<name>` (`MPIR_<Coll>_allcomm_nb` for `nb`; every gatherv and
  scatterv algorithm is an allcomm one, `MPIR_Gatherv_allcomm_linear`, and their default subtree is that
  leaf alone, with no `comm_type` key: a tuned file puts `comm_type=intra` before it); the parser
  asserts on unknown names. Parametrised algorithms read their parameters from child keys (`k=2`);
  the container is malloc'ed, NOT zeroed, so a missing parameter is garbage: they are required here.
* The selected algorithm's preconditions are NOT checked on this path (reduce_scatter_allgather with
  count < pow2 asserts), so every tuned leaf is wrapped in guards for its restrictions (`restrictions`:
  leaf function -> names from GUARDS, given by the adapter), and the guard's other branch is the
  library's own default subtree for the collective (valid for every call).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping

from tunempi.errors import UsageError
from tunempi.rules.ruleset import DEFAULT_ALGORITHM, CommBlock, MsgRule, RuleSet

#: collective -> (message key, whether tunempi's OSU bytes are multiplied by the comm size for it).
MSG_SEMANTICS: dict[str, tuple[str, bool]] = {
    "allreduce": ("avg_msg_size", False),
    "bcast": ("avg_msg_size", False),
    "reduce": ("avg_msg_size", False),
    "alltoall": ("avg_msg_size", False),
    "allgather": ("total_msg_size", True),
    "allgatherv": ("total_msg_size", True),
    "alltoallv": ("total_msg_size", True),
    "alltoallw": ("total_msg_size", True),  # csel.c: sum over peers of sendcounts[i] x sendtypes[i]'s size
    "gather": ("total_msg_size", True),
    "scatter": ("total_msg_size", True),
    "reduce_scatter": ("total_msg_size", False),
    "reduce_scatter_block": ("total_msg_size", False),
    "barrier": ("", False),  # no message size: one algorithm per communicator-size block
    "gatherv": ("", False),  # MPICH defines no message size for them (csel.c asserts): as barrier
    "scatterv": ("", False),
    # Non-blocking (issue 41): csel.c computes their keys as their blocking collective's (avg_msg_size for
    # iallreduce, ibcast, ialltoall; total_msg_size = recvcount x type size x comm size for iallgather).
    "iallreduce": ("avg_msg_size", False),
    "ibcast": ("avg_msg_size", False),
    "ialltoall": ("avg_msg_size", False),
    "iallgather": ("total_msg_size", True),
}

#: Collectives whose every algorithm is an `allcomm` function (intra- and intercommunicators alike).
ALLCOMM_COLLECTIVES: frozenset[str] = frozenset({"gatherv", "scatterv"})

#: Parameters a leaf must carry (csel_container.c parse_container_params, MPICH 5.0.2).
LEAF_PARAMETERS: dict[str, tuple[str, ...]] = {
    "MPIR_Bcast_intra_tree": ("tree_type", "k", "is_non_blocking", "topo_overhead", "topo_diff_groups",
                              "topo_diff_switches", "topo_same_switches"),
    "MPIR_Bcast_intra_pipelined_tree": ("tree_type", "k", "is_non_blocking", "chunk_size", "recv_pre_posted"),
    "MPIR_Allreduce_intra_recursive_multiplying": ("k",),
    "MPIR_Allreduce_intra_tree": ("tree_type", "k", "chunk_size", "buffer_per_child", "topo_overhead",
                                  "topo_diff_groups", "topo_diff_switches", "topo_same_switches"),
    "MPIR_Allreduce_intra_recexch": ("k", "single_phase_recv"),
    "MPIR_Allreduce_intra_k_reduce_scatter_allgather": ("k", "single_phase_recv"),
    "MPIR_Allreduce_intra_ccl": ("ccl",),
    "MPIR_Allgather_intra_k_brucks": ("k",),
    "MPIR_Allgather_intra_recexch_doubling": ("k", "single_phase_recv"),
    "MPIR_Allgather_intra_recexch_halving": ("k", "single_phase_recv"),
    "MPIR_Alltoall_intra_k_brucks": ("k",),
    "MPIR_Barrier_intra_k_dissemination": ("k",),
    "MPIR_Barrier_intra_recexch": ("k",),
    "MPIR_Iallreduce_intra_tsp_tree": ("tree_type", "k", "chunk_size", "buffer_per_child"),
    "MPIR_Iallreduce_intra_tsp_recexch_single_buffer": ("k",),
    "MPIR_Iallreduce_intra_tsp_recexch_multiple_buffer": ("k",),
    "MPIR_Iallreduce_intra_tsp_recexch_reduce_scatter_recexch_allgatherv": ("k",),
    "MPIR_Ibcast_intra_tsp_tree": ("tree_type", "k", "chunk_size"),
    "MPIR_Ibcast_intra_tsp_ring": ("chunk_size",),
    "MPIR_Ibcast_intra_tsp_scatterv_recexch_allgatherv": ("scatterv_k", "allgatherv_k"),
    # coll_algorithms.txt's extra_params (csel_container.c of some MPICH versions parses none of these: a
    # key a leaf does not read is ignored, one it reads and lacks is garbage, so they are all written).
    "MPIR_Iallgather_intra_tsp_brucks": ("k",),
    "MPIR_Iallgather_intra_tsp_recexch_doubling": ("k",),
    "MPIR_Iallgather_intra_tsp_recexch_halving": ("k",),
    "MPIR_Ialltoall_intra_tsp_brucks": ("k", "buffer_per_phase"),
    "MPIR_Ialltoall_intra_tsp_scattered": ("batch_size", "bblock"),
}

#: restriction -> (key where the tuned leaf may NOT run, key closing the pair, tuned leaf goes second).
GUARDS: dict[str, tuple[str, str, bool]] = {
    "size-ge-pof2": ("count<pow2", "count=any", True),
    "builtin-op": ("is_op_built_in=no", "is_op_built_in=yes", True),
    "commutative": ("is_commutative=no", "is_commutative=yes", True),
    "noinplace": ("is_sendbuf_inplace=yes", "is_sendbuf_inplace=no", True),
    "inplace": ("is_sendbuf_inplace=no", "is_sendbuf_inplace=yes", True),
    "power-of-two": ("comm_size=pow2", "comm_size=any", False),
    "at-most-four-ranks": ("comm_size<=4", "comm_size=any", False),
    "parent-comm": ("comm_hierarchy=parent", "comm_hierarchy=any", False),
    "block-regular": ("is_block_regular=yes", "is_block_regular=no", False),
}


def mpir_name(collective: str) -> str:
    """'allreduce' -> 'Allreduce', 'reduce_scatter_block' -> 'Reduce_scatter_block' (MPICH's spelling)."""
    return collective[:1].upper() + collective[1:]


def leaf_function(collective: str, algorithm: str) -> str:
    """The MPIR function a tunempi/cvar algorithm name selects ('nb' is an allcomm algorithm)."""
    kind = "allcomm" if algorithm == "nb" or collective in ALLCOMM_COLLECTIVES else "intra"
    return f"MPIR_{mpir_name(collective)}_{kind}_{algorithm}"


def library_bound(collective: str, osu_bytes: int, ranks: int) -> int:
    """tunempi's (OSU) byte bound -> the value MPICH compares its message key against."""
    if collective not in MSG_SEMANTICS:
        raise UsageError(f"MPICH has no message-size key for {collective}; tunable: {sorted(MSG_SEMANTICS)}")
    _, scaled = MSG_SEMANTICS[collective]
    return osu_bytes * ranks if scaled else osu_bytes


LeafFactory = Callable[[str], dict]


#: leaf function (`MPIR_Allreduce_intra_ring`) -> the restrictions (GUARDS keys) its calls must meet.
Restrictions = Mapping[str, tuple[str, ...]]
LeafParams = Mapping[tuple[str, str], Mapping[str, int | str]]


def _leaf(collective: str, algorithm: str, fallback: dict, params: Mapping[str, int | str] | None,
          known: frozenset[str] | None, restrictions: Restrictions) -> dict:
    if algorithm == DEFAULT_ALGORITHM:
        return copy.deepcopy(fallback)  # the library's own choice, i.e. its default subtree
    function = leaf_function(collective, algorithm)
    key = f"algorithm={function}"
    if known is not None and key not in known:
        kind = "allcomm" if collective in ALLCOMM_COLLECTIVES else "intra"
        offered = sorted(k.split(f"_{kind}_", 1)[1] for k in known
                         if k.startswith(f"algorithm=MPIR_{mpir_name(collective)}_{kind}_"))
        raise UsageError(f"MPICH has no JSON leaf {key} (MPI_Init would abort); {collective} offers: "
                         f"{', '.join(offered) or 'nothing'}")
    required = LEAF_PARAMETERS.get(function, ())
    given = dict(params or {})
    missing = [name for name in required if name not in given]
    if missing:
        raise UsageError(f"{function} needs parameters {', '.join(missing)} in the tuning file (MPICH leaves "
                         f"them uninitialised otherwise); pass them in params[({collective!r}, {algorithm!r})]")
    node: dict = {key: {f"{name}={given[name]}": {} for name in required}}
    for restriction in reversed(restrictions.get(function, ())):
        if restriction not in GUARDS:
            raise UsageError(f"{function}: no JSON guard for restriction {restriction!r}; known: {', '.join(GUARDS)}")
        blocked, other, tuned_second = GUARDS[restriction]
        if tuned_second:
            node = {blocked: copy.deepcopy(fallback), other: node}
        else:
            node = {blocked: node, other: copy.deepcopy(fallback)}
    return node


def _message_subtree(collective: str, rules: tuple[MsgRule, ...], ranks: int, leaf: LeafFactory) -> dict:
    key, _ = MSG_SEMANTICS[collective]
    if len(rules) == 1:
        return leaf(rules[0].algorithm)
    if not key:
        raise UsageError(f"MPICH selects {collective} without a message size; one algorithm per "
                         f"communicator size is all a tuning file can say")
    subtree = {}
    for rule in rules[:-1]:
        assert rule.max_bytes is not None
        subtree[f"{key}<={library_bound(collective, rule.max_bytes, ranks)}"] = leaf(rule.algorithm)
    subtree[f"{key}=any"] = leaf(rules[-1].algorithm)
    return subtree


def _ppn_subtree(collective: str, block: CommBlock, leaf: LeafFactory) -> dict:
    """One measured size whose layouts keep their own rules: a `comm_avg_ppn<=N` level.

    csel.c (MPICH 4.x and 5.0): `comm_avg_ppn<=N` holds when the communicator knows its nodes (every user
    communicator; not MPICH's internal node and node-roots sub-communicators) and size <= N x the nodes it
    spans, i.e. ceil(size / nodes) <= N. Keys are tried in order, so each measured ppn is matched exactly:
    `<=p-1` (the library's own) before `<=p` (the layout's rules); an any-key closes with the block's rules (the
    library's own) for every other ppn and for a communicator without node information. That key is
    `comm_size=any`: 5.0 takes any `...=any`, but 4.x's parser knows only five (comm_size, count, avg_msg_size,
    total_msg_size, comm_hierarchy) and asserts on `comm_avg_ppn=any` (measured on Debian's 4.0.2).
    """
    ranks = block.measured_ranks[-1] if block.measured_ranks else block.min_ranks
    subtree: dict = {}
    below = 0
    for variant in block.by_ppn:
        if variant.ppn - 1 > below:
            subtree[f"comm_avg_ppn<={variant.ppn - 1}"] = _message_subtree(collective, block.rules, ranks, leaf)
        subtree[f"comm_avg_ppn<={variant.ppn}"] = _message_subtree(collective, variant.rules, ranks, leaf)
        below = variant.ppn
    subtree["comm_size=any"] = _message_subtree(collective, block.rules, ranks, leaf)
    return subtree


def _block_subtree(collective: str, block: CommBlock, leaf: LeafFactory) -> dict:
    """Message rules of one block; split by measured comm size where bounds scale with it, by processes per
    node where the block's layouts keep their own rules."""
    if block.by_ppn:
        return _ppn_subtree(collective, block, leaf)
    _, scaled = MSG_SEMANTICS[collective]
    measured = block.measured_ranks or (block.min_ranks,)
    if not scaled or len(block.rules) == 1 or len(measured) == 1:
        return _message_subtree(collective, block.rules, measured[-1], leaf)
    # Total-bytes bound = OSU bound x comm size: exact at each measured size; sizes between two measured
    # ones use the next measured size's scaling (off by at most that ratio, e.g. 2 on a power-of-two grid).
    subtree = {}
    for ranks in measured[:-1]:
        subtree[f"comm_size<={ranks}"] = _message_subtree(collective, block.rules, ranks, leaf)
    subtree["comm_size=any"] = _message_subtree(collective, block.rules, measured[-1], leaf)
    return subtree


def _rule_set_subtree(rule_set: RuleSet, leaf: LeafFactory) -> dict:
    collective = rule_set.collective
    if collective not in MSG_SEMANTICS:
        raise UsageError(f"cannot write MPICH rules for {collective}; tunable: {', '.join(sorted(MSG_SEMANTICS))}")
    blocks = rule_set.blocks
    if len(blocks) == 1:
        return _block_subtree(collective, blocks[0], leaf)
    subtree = {}
    for block in blocks[:-1]:
        subtree[f"comm_size<={block.max_ranks}"] = _block_subtree(collective, block, leaf)
    subtree["comm_size=any"] = _block_subtree(collective, blocks[-1], leaf)
    return subtree


def tuned_intra_subtree(rule_set: RuleSet, default_intra: dict, *, restrictions: Restrictions,
                        params: LeafParams | None = None, known_leaves: frozenset[str] | None = None) -> dict:
    """The `comm_type=intra` subtree for one tuned collective, in numeric order.

    The algorithm name `default` (rules.DEFAULT_ALGORITHM) stands for the library's own choice: its
    default subtree is put there.
    """
    params = params or {}
    collective = rule_set.collective

    def leaf(algorithm: str) -> dict:
        return _leaf(collective, algorithm, default_intra, params.get((collective, algorithm)), known_leaves,
                     restrictions)

    return _rule_set_subtree(rule_set, leaf)


def build_selection_tree(default_tree: Mapping, rule_sets: Mapping[str, RuleSet] | list[RuleSet], *,
                         restrictions: Restrictions, params: LeafParams | None = None,
                         known_leaves: frozenset[str] | None = None) -> dict:
    """The complete tree: a deep copy of `default_tree` with each rule set's intra subtree in place."""
    tree = copy.deepcopy(dict(default_tree))
    sets = list(rule_sets.values()) if isinstance(rule_sets, Mapping) else list(rule_sets)
    for rule_set in sets:
        key = f"collective={rule_set.collective}"
        if key in tree and "comm_type=intra" not in tree[key] and _is_leaf(tree[key]):
            # one allcomm leaf for every communicator (gatherv, scatterv): intracommunicators get the tuned
            # subtree, intercommunicators keep the leaf
            tree[key] = {"comm_type=intra": copy.deepcopy(tree[key]), "comm_type=inter": tree[key]}
        if key not in tree or "comm_type=intra" not in tree[key]:
            raise UsageError(f"the library's default tree has no intra subtree for {rule_set.collective}; "
                             f"it has {', '.join(k.split('=', 1)[1] for k in tree)}")
        default_intra = tree[key]["comm_type=intra"]
        tree[key]["comm_type=intra"] = tuned_intra_subtree(rule_set, default_intra, restrictions=restrictions,
                                                           params=params, known_leaves=known_leaves)
    return tree


def _is_leaf(subtree: Mapping) -> bool:
    return len(subtree) == 1 and next(iter(subtree)).startswith(("algorithm=", "composition="))


def write_selection_json(default_tree: Mapping, rule_sets: Mapping[str, RuleSet] | list[RuleSet], *,
                         restrictions: Restrictions, params: LeafParams | None = None,
                         known_leaves: frozenset[str] | None = None) -> str:
    """The text of a complete MPICH tuning file (load it with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)."""
    tree = build_selection_tree(default_tree, rule_sets, restrictions=restrictions, params=params,
                                known_leaves=known_leaves)
    return json.dumps(tree, indent=1) + "\n"


# --- the POSIX (shared-memory) level ---------------------------------------------------------------


def _first_leaf(subtree: Mapping) -> str:
    for key, child in subtree.items():
        if key.startswith(("algorithm=", "composition=")):
            return key
        found = _first_leaf(child)
        if found:
            return found
    return ""


def build_posix_tree(default_posix_tree: Mapping,
                           rule_sets: Mapping[str, RuleSet] | list[RuleSet]) -> dict:
    """The POSIX-level tree that hands every tuned choice to the MPIR level.

    Measured on MPICH 5.0.2 (2 ranks, one node): once a communicator has made more than
    MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD bcast/reduce/barrier/allreduce calls, the POSIX level takes them
    over with its release_gather algorithms, and neither the MPIR JSON file nor
    MPIR_CVAR_<COLL>_INTRA_ALGORITHM is consulted any more. Where the POSIX search finds no leaf,
    MPICH calls MPIR_<Coll>_impl, i.e. the MPIR tree with the tuned rules. So: a tuned collective
    without any `default` rule is removed from the POSIX tree; one with `default` rules gets the same
    size rules here, with the library's POSIX subtree where the rule says `default` and a branch that
    never matches an intracommunicator (`comm_type=inter`) everywhere else.
    """
    tree = copy.deepcopy(dict(default_posix_tree))
    sets = list(rule_sets.values()) if isinstance(rule_sets, Mapping) else list(rule_sets)
    for rule_set in sets:
        key = f"collective={rule_set.collective}"
        if key not in tree:
            continue  # the POSIX level does not handle this collective: MPIR decides already
        default_intra = tree[key].get("comm_type=intra")
        if default_intra is None or DEFAULT_ALGORITHM not in rule_set.algorithms():
            del tree[key]
            continue
        to_mpir: dict = {"comm_type=inter": {_first_leaf(default_intra): {}}}

        def leaf(algorithm: str, default_intra: dict = default_intra, to_mpir: dict = to_mpir) -> dict:
            return copy.deepcopy(default_intra if algorithm == DEFAULT_ALGORITHM else to_mpir)

        tree[key] = {"comm_type=intra": _rule_set_subtree(rule_set, leaf)}
    if not tree:
        # MPICH cannot prune an empty object; keep one entry that never matches (POSIX sees no intercomms).
        tree = {"collective=barrier": {"comm_type=inter": {"algorithm=MPIDI_POSIX_mpi_barrier_release_gather": {}}}}
    return tree


def write_posix_json(default_posix_tree: Mapping, rule_sets: Mapping[str, RuleSet] | list[RuleSet]) -> str:
    """Text of the POSIX-level file (load it with MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE)."""
    return json.dumps(build_posix_tree(default_posix_tree, rule_sets), indent=1) + "\n"


def build_ch4_tree(default_ch4_tree: Mapping, compositions: Mapping[str, str]) -> dict:
    """The library's CH4-level tree with one composition forced for each given collective wherever the
    communicator spans several nodes; single-node communicators and untuned collectives keep the
    library's own choice.

    compositions: collective -> composition function ('MPIDI_Allreduce_intra_composition_beta').
    A collective's `comm_type=intra` subtree becomes: one node (`comm_size=node_comm_size`) -> the default
    subtree; several nodes (`comm_hierarchy=parent`) -> the composition; anything else -> the default.
    """
    tree = copy.deepcopy(dict(default_ch4_tree))
    for collective, function in compositions.items():
        key = f"collective={collective}"
        if key not in tree:
            raise UsageError(f"the library's CH4 tree has no {key}")
        default = tree[key]
        intra = default.get("comm_type=intra", default)
        tuned = {
            "comm_size=node_comm_size": copy.deepcopy(intra),
            "comm_size=any": {
                "comm_hierarchy=parent": {f"composition={function}": {}},
                "comm_hierarchy=any": copy.deepcopy(intra),
            },
        }
        tree[key] = {"comm_type=intra": tuned, **{k: v for k, v in default.items() if k != "comm_type=intra"}}
    return tree


def write_ch4_json(default_ch4_tree: Mapping, compositions: Mapping[str, str]) -> str:
    """Text of the CH4-level file (load it with MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE)."""
    return json.dumps(build_ch4_tree(default_ch4_tree, compositions), indent=1) + "\n"


# --- reading a file back ---------------------------------------------------------------------------

_CONDITION_KEY = re.compile(r"^(any|[a-z_]+(<=|<|=)[A-Za-z0-9_]+)$")


def read_selection_json(text: str, known: frozenset[str] | None = None) -> dict:
    """Parse a collective-selection JSON file; UsageError where MPICH would abort on it.

    MPICH asserts (an "Internal error" at MPI_Init) on a file that is no JSON object, on an unknown key,
    on a branch that reaches no leaf, and on a leaf the library does not have (`known`: every leaf key the
    library accepts, mpi.default_tree.known_leaves).
    """
    try:
        tree = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not valid JSON ({exc})") from None
    if not isinstance(tree, dict) or not tree:
        raise UsageError("not a JSON object of `collective=...` keys")
    for key in tree:
        if not key.startswith("collective="):
            raise UsageError(f"top-level key {key!r} is not `collective=NAME`")

    def walk(node: object, path: str) -> None:
        if not isinstance(node, dict) or not node:
            raise UsageError(f"{path} reaches no algorithm")
        for key, child in node.items():
            where = f"{path}/{key}"
            if key.startswith(("algorithm=", "composition=")):
                if known is not None and key not in known:
                    raise UsageError(f"{where}: this library has no {key.split('=', 1)[1]}")
                if not isinstance(child, dict):
                    raise UsageError(f"{where}: the parameters of a leaf must be a JSON object")
                continue
            if not _CONDITION_KEY.match(key.replace(" ", "")):
                raise UsageError(f"{where}: not a selection key")
            walk(child, where)

    for key, child in tree.items():
        walk(child, key)
    return tree
