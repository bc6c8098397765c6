"""MPICH: algorithm catalogs from MPI_T cvar descriptions, forcing and run-time switching.

MPICH's `MPIR_CVAR_<COLL>_INTRA_ALGORITHM` cvars are plain ints through MPI_T (no MPI_T enum); the int
is the position of the name in the cvar's description (verified by setting the env var and reading the
value back, see discovery.verify_catalog_by_env). Two description formats exist:

- MPICH >= 4.1/5.x: one `name<spaces>- text` entry per line.
- MPICH 4.0.x: the generator glued the lines together (a backslash-newline inside a C string literal),
  e.g. "...algorithmauto - Internal ...FILE)nb                       - Force nonblocking algorithmsmp ...".
  The names are recovered from the column alignment of the separators and from words the descriptions
  use elsewhere (parse_glued_description); discovery then verifies every name by env var + readback.

An unknown name in the env var makes MPI_Init segfault, so every name is checked before use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tunempi.collectives import is_nonblocking
from tunempi.errors import TunempiError, TuningFileError, UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.mpich_selection import (
    TUNING_FILE_CVAR,
    DefaultTree,
    MpichCall,
    default_trees,
    find_libmpi,
    known_leaves,
    select_mpich,
)
from tunempi.mpi.restrictions import DATATYPE_REQUIREMENTS, REQUIREMENTS, file_exclusion
from tunempi.mpi.restrictions import RESTRICTIONS as ALGORITHM_RESTRICTIONS
from tunempi.mpi.ucx import UCX_TUNABLES
from tunempi.mpi.vendor import (
    DEFAULT_ALGORITHM,
    Algorithm,
    Composition,
    CvarSwitch,
    ThresholdKnob,
    Tunable,
    TuningFiles,
    VendorAdapter,
    format_parameter_value,
)
from tunempi.rules.ruleset import RuleSet
from tunempi.writers.selection_json import (
    GUARDS,
    leaf_function,
    mpir_name,
    read_selection_json,
    write_ch4_json,
    write_posix_json,
    write_selection_json,
)

#: The files written into a tuning directory (names kept stable: manifests name them).
MPIR_FILE = "mpich-mpir.json"
CH4_FILE = "mpich-ch4.json"
POSIX_FILE = "mpich-posix.json"

DEFAULT_NAME = "auto"

#: tunempi collective name -> the token MPICH uses in its cvar names.
COLLECTIVE_TOKENS: dict[str, str] = {
    "allreduce": "ALLREDUCE",
    "bcast": "BCAST",
    "allgather": "ALLGATHER",
    "alltoall": "ALLTOALL",
    "reduce": "REDUCE",
    "reduce_scatter": "REDUCE_SCATTER",
    "gather": "GATHER",
    "scatter": "SCATTER",
    "barrier": "BARRIER",
    "allgatherv": "ALLGATHERV",
    "alltoallv": "ALLTOALLV",
    "reduce_scatter_block": "REDUCE_SCATTER_BLOCK",
    "gatherv": "GATHERV",
    "scatterv": "SCATTERV",
    # MPIR_CVAR_ALLTOALLW_INTRA_ALGORITHM (5.0.2, 4.0.2): alltoallv's three, nb, pairwise_sendrecv_replace,
    # scattered; its JSON subtree keys on is_sendbuf_inplace and total_msg_size as alltoallv's (csel.c).
    "alltoallw": "ALLTOALLW",
    # Non-blocking (issue 41): MPIR_CVAR_I<COLL>_INTRA_ALGORITHM, described and enumerated as the blocking
    # ones (auto, then sched_auto, sched_* and tsp_* algorithms); MPIR_CVAR_IBCAST_POSIX_INTRA_ALGORITHM is
    # the one shared-memory-level cvar among them (pinned to mpir beside a forced algorithm, as bcast's).
    "iallreduce": "IALLREDUCE",
    "ibcast": "IBCAST",
    "ialltoall": "IALLTOALL",
    "iallgather": "IALLGATHER",
}

#: Tuning-file cvars, most general first (MPIR level, CH4 compositions, shared-memory level).
TUNING_FILE_CVARS: tuple[str, ...] = (
    "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE",
    "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE",
    "MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE",
)


#: Point-to-point protocol thresholds, by transport (cvar names as MPICH spells them; each is only
#: offered when the library's MPI_T lists it).
CMA_ENABLE_CVAR = "MPIR_CVAR_CH4_CMA_ENABLE"
CMA_THRESHOLD_CVAR = "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD"
IQUEUE_CELL_SIZE_CVAR = "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"
PACK_BUFFER_SIZE_CVAR = "MPIR_CVAR_CH4_PACK_BUFFER_SIZE"
OFI_EAGER_CVAR = "MPIR_CVAR_CH4_OFI_EAGER_THRESHOLD"
CH3_EAGER_CVAR = "MPIR_CVAR_CH3_EAGER_MAX_MSG_SIZE"
NEMESIS_SHM_EAGER_CVAR = "MPIR_CVAR_NEMESIS_SHM_EAGER_MAX_SZ"
#: UCX's own variable (not an MPI_T cvar): the size from which UCX uses its rendezvous protocol.
UCX_RNDV_THRESH = "UCX_RNDV_THRESH"


def device_parts(device: str) -> tuple[str, list[str]]:
    """('ch4', ['ucx', 'ofi']) from MPICH's device string 'ch4:ucx ofi' (netmods in build order; the
    first is used unless MPIR_CVAR_CH4_NETMOD says otherwise)."""
    channel, _, rest = device.strip().partition(":")
    return channel.strip(), rest.replace(",", " ").split()


#: What MPICH does when a forced algorithm does not fit the arguments (error | print | silent).
FALLBACK_CVAR = "MPIR_CVAR_COLLECTIVE_FALLBACK"


def algorithm_cvar(collective: str) -> str:
    return f"MPIR_CVAR_{COLLECTIVE_TOKENS[collective]}_INTRA_ALGORITHM"


def posix_cvar(collective: str) -> str:
    """The shared-memory (CH4 POSIX) level's algorithm cvar: it decides before the MPIR level does."""
    return f"MPIR_CVAR_{COLLECTIVE_TOKENS[collective]}_POSIX_INTRA_ALGORITHM"


def composition_cvar(collective: str) -> str:
    return f"MPIR_CVAR_{COLLECTIVE_TOKENS[collective]}_COMPOSITION"


#: MPICH names the compositions of ch4_coll.h by Greek letter in the order of the cvar's values (1 = alpha).
_GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")


def composition_name(value: int) -> str:
    """1 -> 'alpha', 2 -> 'beta', ... (value 0 is 'auto': the CH4 selection tree decides)."""
    if not 1 <= value <= len(_GREEK):
        raise UsageError(f"no MPICH composition name for value {value}")
    return _GREEK[value - 1]


def composition_function(collective: str, name: str) -> str:
    """('allreduce', 'beta') -> 'MPIDI_Allreduce_intra_composition_beta' (the CH4 tree's leaf)."""
    return f"MPIDI_{mpir_name(collective)}_intra_composition_{name}"


_NAME = r"[a-z][a-z0-9_]*"
_LINE_ENTRY = re.compile(rf"^\s*({_NAME})\s+-\s")
# A separator between an entry's name (plus its alignment padding) and its text.
_SEPARATOR = re.compile(r"( +)-\s")
_TRAILING_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+$")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def parse_algorithm_description(description: str, vocabulary: Iterable[str] = ()) -> list[str]:
    """Algorithm names in the order of their ints (position 0 first), from an ALGORITHM cvar description.

    `vocabulary`: words used elsewhere in the library's descriptions; only needed for the glued 4.0.x format.
    """
    lines = description.splitlines()
    if len(lines) > 1:
        return [m.group(1) for line in lines[1:] if (m := _LINE_ENTRY.match(line))]
    return parse_glued_description(description, vocabulary)


def parse_glued_description(description: str, vocabulary: Iterable[str] = ()) -> list[str]:
    """Names from a 4.0.x description whose entries run together.

    Each separator ' - ' is preceded by `<previous entry's text><name><padding>`, e.g.
    "...Force smp algorithmrecursive_doubling       - Force recursive doubling algorithm...". Two clues
    recover the names:
    - alignment: MPICH padded the names to a common column width W, so len(name) = W - len(padding)
      (the longest name has one space; "auto" is often left unpadded);
    - words: a name usually reappears in its own entry's text ("recursive_doubling" - "Force recursive
      doubling"), and the text glued in front of it ends with a word used elsewhere ("algorithm" + "smp").
    W is the width that agrees best with these clues; entries with one space (the longest name, or an
    unpadded one) pick the candidate their own text supports, else the word split.
    """
    words = set(vocabulary) | {m.group(0) for m in _WORD.finditer(description)} | {"algorithm"}
    separators = list(_SEPARATOR.finditer(description))
    entries: list[tuple[str, int, set[str], str | None]] = []  # (run, padding, own words, word split)
    for i, sep in enumerate(separators):
        match = _TRAILING_IDENTIFIER.search(description[: sep.start()])
        if not match:
            continue
        run = match.group(0)
        text_end = separators[i + 1].start() if i + 1 < len(separators) else len(description)
        own_words = {w.lower() for w in _WORD.findall(description[sep.end():text_end])}
        entries.append((run, len(sep.group(1)), own_words, _split_after_word(run, words)))

    def cut(run: str, pad: int, width: int) -> str | None:
        length = width - pad
        return run[len(run) - length:] if 0 < length <= len(run) else None

    def supported(name: str | None, own: set[str]) -> bool:
        return name is not None and bool(name) and name.split("_")[0] in own

    width: int | None = None
    padded = [e for e in entries if e[1] > 1]
    if padded:
        low = max(pad for _, pad, _, _ in padded) + 1
        high = min(len(run) + pad for run, pad, _, _ in padded)  # no name longer than its run

        def score(w: int) -> int:
            total = 0
            for run, pad, own, split in entries:
                name = cut(run, pad, w)
                total += 2 * supported(name, own) + (name is not None and name == split)
            return total

        width = max(range(low, high + 1), key=score, default=None)
    names: list[str] = []
    for run, pad, own, split in entries:
        aligned = cut(run, pad, width) if width is not None else None
        if pad > 1 and aligned is not None:
            name = aligned
        else:
            candidates = [c for c in (split, aligned, run) if c]
            name = next((c for c in candidates if supported(c, own)), candidates[0])
        lowercase_tail = re.search(rf"{_NAME}$", name)
        if lowercase_tail:
            names.append(lowercase_tail.group(0))
    return names


def _split_after_word(run: str, words: set[str]) -> str | None:
    """'algorithmsmp' -> 'smp' when 'algorithm' is a known word (the longest such prefix wins)."""
    for cut in range(len(run) - 1, 0, -1):
        if run[:cut] in words and re.fullmatch(_NAME, run[cut:]):
            return run[cut:]
    return None


def parse_composition_description(description: str) -> list[tuple[int, str]]:
    """'Select ... for Allreduce 0 Auto selection 1 NM + SHM with reduce + bcast 2 NM only ...'
    -> [(0, 'Auto selection'), (1, 'NM + SHM with reduce + bcast'), (2, 'NM only ...')].

    Values are looked for in sequence (0, 1, 2, ...), so a number inside an entry's text
    ("between rank 0 and root") is not taken for the start of an entry.
    """
    text = " ".join(description.split())
    starts: list[tuple[int, int, int]] = []  # (value, start of the number, start of the text)
    position = 0
    while match := re.compile(rf"(?:^|\s){len(starts)}\s").search(text, position):
        starts.append((len(starts), match.start(), match.end()))
        position = match.end()
    return [
        (value, text[text_start:(starts[i + 1][1] if i + 1 < len(starts) else len(text))].strip())
        for i, (value, _, text_start) in enumerate(starts)
    ]


def posix_values(cvars: Iterable[dict]) -> dict[str, dict[str, int]]:
    """collective -> {'mpir': 0, 'release_gather': 1, 'auto': 2, ...} from the POSIX-level cvars' descriptions.

    Why it matters (measured on 5.0.2, one node): after MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD (5) calls of
    bcast/reduce/barrier/allreduce on a communicator, the shared-memory level runs its own release_gather
    algorithm and never asks the MPIR level, so a forced MPIR algorithm (env var, MPI_T or tuning file) is
    silently ignored unless this level says "mpir".
    """
    by_name = {cvar["name"]: cvar for cvar in cvars}
    values: dict[str, dict[str, int]] = {}
    for collective in COLLECTIVE_TOKENS:
        cvar = by_name.get(posix_cvar(collective))
        if cvar is not None:
            names = parse_algorithm_description(cvar.get("description", ""))
            values[collective] = {name: value for value, name in enumerate(names)}
    return values


def fallback_values(cvars: Iterable[dict]) -> dict[str, int]:
    """{'error': 0, 'print': 1, 'silent': 2} from MPIR_CVAR_COLLECTIVE_FALLBACK's description ({} if absent)."""
    for cvar in cvars:
        if cvar["name"] == FALLBACK_CVAR:
            names = parse_algorithm_description(cvar.get("description", ""))
            return {name: value for value, name in enumerate(names)}
    return {}


def description_vocabulary(cvars: Iterable[dict]) -> set[str]:
    """Every whole word of every cvar description (helps split the glued 4.0.x format)."""
    words: set[str] = set()
    for cvar in cvars:
        words.update(m.group(0) for m in _WORD.finditer(cvar.get("description", "")))
    return words


def catalog_from_cvars(cvars: Iterable[dict]) -> tuple[dict[str, list[Algorithm]], dict[str, Algorithm]]:
    """(collective -> algorithms without 'auto', collective -> the 'auto' entry), from probed cvars."""
    cvars = list(cvars)
    by_name = {cvar["name"]: cvar for cvar in cvars}
    vocabulary = description_vocabulary(cvars)
    catalog: dict[str, list[Algorithm]] = {}
    defaults: dict[str, Algorithm] = {}
    for collective in COLLECTIVE_TOKENS:
        cvar = by_name.get(algorithm_cvar(collective))
        if cvar is None:
            continue
        description = cvar.get("description", "")
        if not readable_description(collective, description):
            continue
        names = parse_algorithm_description(description, vocabulary)
        algorithms = [Algorithm(name, value) for value, name in enumerate(names)]
        for algorithm in algorithms:
            if algorithm.name == DEFAULT_NAME:
                defaults[collective] = algorithm
        catalog[collective] = [a for a in algorithms
                               if a.name != DEFAULT_NAME and not is_selection_entry(description, a.name)]
    return catalog, defaults


def readable_description(collective: str, description: str) -> bool:
    """Whether the algorithm names of `collective` can be read from its cvar's description. Not the
    non-blocking collectives' in MPICH 4.0.x's glued format: their sched_/tsp_ names run into the text before
    them, which the column heuristic does not undo (Debian's 4.0.2: "p_tree", "ithmtsp_ring"); they are left
    out there rather than offered under wrong names (docs/mpi-discovery.md)."""
    return not is_nonblocking(collective) or "\n" in description


def is_selection_entry(description: str, name: str) -> bool:
    """Whether `name` is, by its own entry's text, a further "Internal algorithm selection" besides auto: the
    non-blocking cvars' `sched_auto` ("Internal algorithm selection for sched-based algorithms"). It is no
    algorithm to force: written to MPIR_CVAR_I<COLL>_INTRA_ALGORITHM, MPICH 5.0.2 aborts in the call
    ("Assertion failed in file src/mpi/coll/mpir_coll.c", measured for iallreduce, ibcast, ialltoall and
    iallgather at 2 ranks), so it stays out of the catalog."""
    return name != DEFAULT_NAME and bool(
        re.search(rf"(?:^|[^a-z0-9_]){re.escape(name)}\s*-\s*Internal algorithm selection", description))


#: MPICH ch4 parameters that decide how point-to-point messages travel (measured on 5.0.2, docs/search.md).
TUNABLES: tuple[Tunable, ...] = (
    Tunable("MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", "size",
            "intra-node messages from this size go by single-copy CMA rendezvous instead of eager cells"),
    Tunable("MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE", "size",
            "shared-memory eager cell: a message up to this size travels in one cell", minimum=1024),
    # 5.0.2 ch4:ucx aborts in MPI_Init with 4096 even with 1 KiB cells (the netmod's active-message limit
    # counts too); 8192 works.
    Tunable("MPIR_CVAR_CH4_PACK_BUFFER_SIZE", "size", "active-message pack buffers; must be >= the cell size",
            minimum=8192),
    Tunable("MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS", "count", "depth of the shared-memory queue", minimum=2),
    Tunable("MPIR_CVAR_CH4_OFI_EAGER_THRESHOLD", "size", "OFI netmod eager/rendezvous switch"),
)

#: MPICH 5.0.2 aborts in MPI_Init (mpidig_init.c:36) when the cell is larger than the pack buffer.
CONSTRAINTS: tuple[str, ...] = (
    "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE <= MPIR_CVAR_CH4_PACK_BUFFER_SIZE",
)


#: What MPICH says when a forced algorithm cannot take a call and the fallback is "error".
NOT_USABLE_MESSAGES = ("algorithm is not usable", "cannot be applied")
CUT_NOT_USABLE = "User set collective algorithm"
#: The engine's report of a call that failed on some ranks only, whose MPICH error stack (cut at
#: MPI_MAX_ERROR_STRING) ends in a bare frame, before its cause. Seen for smp forced through MPI_T on one
#: node: smp calls the collective again on its node sub-communicator, where the forced smp is refused on
#: that communicator's ranks only ("User set collective algorithm is not usable" when forced through the
#: environment, where the stack is short enough to keep it).
_ONE_SIDED_CUT_REFUSAL = re.compile(
    r"a collective call failed here \(Other MPI error, error stack:.*\.\.\. MPI[DR]_\w+\(\d+\)\.*:?\s*\) "
    r"but other ranks did not follow")


class MpichAdapter(VendorAdapter):
    """MPICH (and derivatives that keep MPICH's cvar names)."""

    vendor = "mpich"

    def __init__(
        self,
        library: MPILibrary,
        catalog: dict[str, list[Algorithm]],
        defaults: dict[str, Algorithm] | None = None,
        cvar_names: Iterable[str] = (),
        compositions: dict[str, list[tuple[int, str]]] | None = None,
        fallback_values: dict[str, int] | None = None,
        posix_values: dict[str, dict[str, int]] | None = None,
        cvar_values: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(library, catalog, defaults, cvar_names, cvar_values)
        self._compositions = compositions or {}
        self._fallback_values = fallback_values or {}  # MPIR_CVAR_COLLECTIVE_FALLBACK: name -> int
        self._posix_values = posix_values or {}  # collective -> POSIX-level algorithm name -> int
        self._trees: dict[str, DefaultTree] | None = None  # built-in selection trees, read on first use
        self._leaves: frozenset[str] | None = None  # leaf keys the library's JSON parser accepts

    def default_name(self) -> str:
        return DEFAULT_NAME

    def force_env(self, collective: str, name: str) -> dict[str, str]:
        algorithm = self.check_algorithm(collective, name)
        env = {algorithm_cvar(collective): algorithm.name}
        if algorithm.name != DEFAULT_NAME and "mpir" in self._posix_values.get(collective, {}):
            env[posix_cvar(collective)] = "mpir"  # else the shared-memory level overrides the forced choice
        return env

    def runtime_switch(self, collective: str, name: str) -> CvarSwitch:
        algorithm = self.check_algorithm(collective, name)
        posix = self._posix_values.get(collective, {})
        # The library's own choice leaves the shared-memory level on auto; a forced algorithm pins it to mpir.
        level = "auto" if algorithm.name == DEFAULT_NAME else "mpir"
        also = ((posix_cvar(collective), posix[level]),) if level in posix else ()
        return CvarSwitch(cvar=algorithm_cvar(collective), value=algorithm.value, needs_new_communicator=False,
                          also=also)

    def launch_env(self) -> dict[str, str]:
        return {}

    def strict_selection_switch(self) -> CvarSwitch | None:
        # Measured on 5.0.2: with "error" written after MPI_Init and MPI_ERRORS_RETURN, a forced
        # reduce_scatter_allgather returns an error for count < pof2 or a user-defined op, and the run goes
        # on; the default ("silent") runs another algorithm without a word.
        if "error" not in self._fallback_values:
            return None
        return CvarSwitch(cvar=FALLBACK_CVAR, value=self._fallback_values["error"], needs_new_communicator=False)

    def refusal_messages(self) -> tuple[str, ...]:
        # MPII_COLLECTIVE_FALLBACK_CHECK under fallback=error: "**collalgo", whose text is "User set collective
        # algorithm is not usable for the provided arguments" (in the error strings of 5.0.2 and 4.0.2).
        return (NOT_USABLE_MESSAGES[0],) if self.strict_selection_switch() is not None else ()

    def says_not_usable(self, reason: str) -> bool:
        # MPICH's message under fallback=error: "User set collective algorithm is not usable for the
        # provided arguments", the end of its error stack (the engine keeps it; MPICH may cut it short).
        # MPICH cuts a long stack inside that line (an alltoallv's: "User set collective algorithm is n"):
        # its start is the fallback check's own wording, so it says the same (issue 40).
        return (any(text in reason for text in NOT_USABLE_MESSAGES) or CUT_NOT_USABLE in reason
                or bool(_ONE_SIDED_CUT_REFUSAL.search(reason)))

    def tuning_file_mechanisms(self) -> list[str]:
        if not self.cvar_names:
            return list(TUNING_FILE_CVARS)
        return [name for name in TUNING_FILE_CVARS if name in self.cvar_names]

    def tuning_file_env(self, mechanism: str, path: str) -> dict[str, str]:
        self._check_mechanism(mechanism)
        return {mechanism: path}

    def _knob(self, cvar: str, transport: str, locality: str, powers_of_two: bool = False,
              maximum: int | None = None) -> ThresholdKnob | None:
        if cvar not in self.cvar_names:
            return None
        value = self.cvar_values.get(cvar)
        default = int(value) if isinstance(value, int) and value >= 0 else None  # -1: "the library decides"
        return ThresholdKnob(cvar, transport, locality, default, powers_of_two, maximum)

    def eager_threshold_knobs(self, *, intra_node: bool = True, inter_node: bool = False) -> list[ThresholdKnob]:
        """ch4, same node: the POSIX shm module sends a message in iqueue cells (eager, payload up to a
        cell) and, from the CMA threshold on, by a single copy after a handshake (rendezvous); both are
        MPI_T cvars. ch4 across nodes: the netmod's threshold (UCX: UCX_RNDV_THRESH; OFI: its eager cvar).
        ch3: its eager cvars."""
        channel, netmods = device_parts(self.library.device)
        knobs: list[ThresholdKnob | None] = []
        if channel == "ch3":
            if intra_node:
                knobs.append(self._knob(NEMESIS_SHM_EAGER_CVAR, "Nemesis shared memory", "intra-node"))
            if inter_node:
                knobs.append(self._knob(CH3_EAGER_CVAR, "ch3 network module", "inter-node"))
            return [k for k in knobs if k is not None]
        if intra_node:
            cma_enabled = self.cvar_values.get(CMA_ENABLE_CVAR, 1) not in (0, False)
            if cma_enabled:
                knobs.append(self._knob(CMA_THRESHOLD_CVAR, "POSIX shared memory: CMA single copy from this size",
                                        "intra-node"))
            # MPICH 5 aborts MPI_Init on a cell size that is not a power of two, and (measured on 5.0.2:
            # 32 KiB cells abort, with a 32 KiB pack buffer they run) on cells larger than the pack buffer.
            pack = self.cvar_values.get(PACK_BUFFER_SIZE_CVAR)
            knobs.append(self._knob(IQUEUE_CELL_SIZE_CVAR, "POSIX shared memory: eager iqueue cell size",
                                    "intra-node", powers_of_two=True,
                                    maximum=int(pack) if isinstance(pack, int) and pack > 0 else None))
        if inter_node and netmods:
            if netmods[0] == "ucx":
                knobs.append(ThresholdKnob(UCX_RNDV_THRESH, "UCX netmod (ch4:ucx)", "inter-node"))
            elif netmods[0] == "ofi":
                knobs.append(self._knob(OFI_EAGER_CVAR, "OFI netmod (ch4:ofi)", "inter-node"))
        return [k for k in knobs if k is not None]

    # -- tuning files --------------------------------------------------------------------------------
    def default_trees(self) -> dict[str, DefaultTree]:
        """level ("mpir", "ch4", "posix") -> the library's built-in selection tree (read once)."""
        if self._trees is None:
            self._trees = default_trees(find_libmpi(self.library))
        return self._trees

    def known_leaves(self) -> frozenset[str]:
        """Every `algorithm=...`/`composition=...` leaf key the library's JSON parser accepts (read once)."""
        if self._leaves is None:
            # The scan of the library's strings misses some keys (MPICH 4.0.2 stores
            # algorithm=MPIR_Allgather_intra_recursive_doubling so that no NUL precedes it); every leaf of
            # the library's own built-in trees is one its parser accepts.
            own = {key for tree in self.default_trees().values() for key in _leaf_keys(tree.tree)}
            self._leaves = known_leaves(find_libmpi(self.library)) | own
        return self._leaves

    def read_back_tuning_file(self, path: Path) -> None:
        # MPICH aborts at MPI_Init ("Internal error") on a file it cannot parse or a leaf it does not have.
        read_selection_json(path.read_text(encoding="utf-8"), self.known_leaves() or None)

    def tuning_file_exclusion(self, collective: str, algorithm: str) -> str | None:
        if (collective, algorithm) in UNWRITABLE_ALGORITHMS:
            return UNWRITABLE_ALGORITHMS[(collective, algorithm)]
        restricted = file_exclusion(self.vendor, self.library.version, collective, algorithm,
                                    file_expressible(collective), self.assumed)
        if restricted is not None:
            return restricted
        leaf = f"algorithm={leaf_function(collective, algorithm)}"
        if leaf not in self.known_leaves():
            return f"the library's JSON parser has no leaf {leaf} (MPI_Init would abort)"
        try:
            leaf_parameters(collective, algorithm, self.cvar_values.get)
        except TuningFileError as exc:
            return str(exc)
        return None

    def write_tuning_files(self, rule_sets: Mapping[str, RuleSet], directory: Path) -> TuningFiles:
        """The complete MPIR-level tree (the library's own default tree with the tuned subtrees in place,
        every leaf guarded by its restrictions, leaf parameters as the benchmarks ran them) and its
        POSIX-level companion (without it the shared-memory release_gather algorithms take bcast/reduce/
        barrier/allreduce over after a few calls on one node and the MPIR tree is never asked)."""
        self.check_tuning_file_algorithms(rule_sets)
        params = {(collective, algorithm): found
                  for collective, rule_set in rule_sets.items() for algorithm in rule_set.algorithms()
                  if algorithm != DEFAULT_ALGORITHM
                  and (found := leaf_parameters(collective, algorithm, self.cvar_values.get))}
        trees = self.default_trees()
        written = {"mpir": MPIR_FILE}
        (directory / MPIR_FILE).write_text(write_selection_json(
            trees["mpir"].tree, rule_sets, restrictions=LEAF_RESTRICTIONS, params=params,
            known_leaves=self.known_leaves()))
        if "posix" in trees:
            (directory / POSIX_FILE).write_text(write_posix_json(trees["posix"].tree, rule_sets))
            written["posix"] = POSIX_FILE
        mechanisms = self.tuning_file_mechanisms()
        env_files: dict[str, str] = {}
        for level, name in written.items():
            cvar = TUNING_FILE_CVAR[level]
            if cvar not in mechanisms:
                raise TuningFileError(f"{self.library.name} has no {cvar}; valid mechanisms: {', '.join(mechanisms)}")
            env_files.update(dict.fromkeys(self.tuning_file_env(cvar, name), name))
        return TuningFiles(files={f"mpich-{level}": name for level, name in written.items()}, env_files=env_files)

    def selects_by_ppn(self) -> bool:
        """`comm_avg_ppn<=N` keys (csel.c, parsed by 4.0.2 and 5.0.2): each measured layout of a size its own
        rules, an unmeasured ppn the library's own choice (writers.selection_json._ppn_subtree)."""
        return True

    def default_choice(self, collective: str, msg_bytes: int, ranks: int, nodes: int) -> str | None:
        """Evaluates the library's built-in selection trees (default_trees) the way MPICH walks them.

        On one node the CH4 level hands allreduce, bcast, reduce and barrier to the POSIX tree, whose
        only leaves are `release_gather` (after MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD calls on the
        communicator); everywhere else the MPIR tree's leaf is the algorithm (reductions assume 4-byte
        elements, as the benchmarks do). None where the trees cannot be read or do not decide.
        """
        try:
            trees = {level: found.tree for level, found in self.default_trees().items()}
            type_size = 4 if collective in ("allreduce", "reduce", "reduce_scatter", "reduce_scatter_block") else 1
            if msg_bytes % type_size:
                type_size = 1
            call = MpichCall.from_osu(collective, msg_bytes, ranks, type_size=type_size, hierarchical=nodes > 1,
                                      nodes=nodes)
            if nodes == 1 and "posix" in trees:
                leaf = select_mpich(trees["posix"], call)
                if leaf:
                    return leaf.rsplit(f"_{collective}_", 1)[-1]
            leaf = select_mpich(trees["mpir"], call)
        except (TunempiError, OSError, KeyError, ZeroDivisionError):
            return None
        if not leaf:
            return None
        for marker in ("_intra_", "_allcomm_"):
            if marker in leaf:
                return leaf.split(marker, 1)[1]
        return leaf

    def compositions(self, collective: str) -> list[tuple[int, str]]:
        """MPICH 5 inter-/intra-node compositions (value, description); empty where there are none."""
        return list(self._compositions.get(collective, []))

    def composition_candidates(self, collective: str, nodes: int) -> list[Composition]:
        """Every composition of `collective` (value >= 1) whose CH4 tree leaf the library's parser knows,
        forced by MPIR_CVAR_<COLL>_COMPOSITION; none on one node. Whether one is usable at a layout is
        the library's to say (the engine's strict selection: "not usable" under COLLECTIVE_FALLBACK=error,
        e.g. allreduce's SHM-only gamma across nodes)."""
        if nodes <= 1:
            return []
        leaves = self.known_leaves()
        found = []
        for value, description in self.compositions(collective):
            if value == 0 or value > len(_GREEK):
                continue
            name = composition_name(value)
            if f"composition={composition_function(collective, name)}" not in leaves:
                continue  # a tuning file could not select it (MPI_Init would abort on the leaf)
            found.append(Composition(collective, name, description, {composition_cvar(collective): str(value)}))
        return found

    def write_composition_file(self, choices: Mapping[str, Composition], directory: Path) -> TuningFiles:
        """The library's CH4-level tree with each chosen composition in force on multi-node communicators
        (writers.selection_json.build_ch4_tree), checked against the leaves the library's parser accepts."""
        trees = self.default_trees()
        if "ch4" not in trees:
            raise TuningFileError(f"{self.library.name} has no built-in CH4 selection tree")
        cvar = TUNING_FILE_CVAR["ch4"]
        if cvar not in self.tuning_file_mechanisms():
            raise TuningFileError(f"{self.library.name} has no {cvar}")
        functions = {collective: composition_function(collective, choice.name) for collective, choice in choices.items()}
        text = write_ch4_json(trees["ch4"].tree, functions)
        read_selection_json(text, self.known_leaves() or None)
        (directory / CH4_FILE).write_text(text)
        return TuningFiles(files={"mpich-ch4": CH4_FILE}, env_files={cvar: CH4_FILE})

    def read_back_composition_file(self, path: Path) -> None:
        # The CH4-level tree is a selection JSON like the others: MPI_Init aborts on one it cannot parse.
        self.read_back_tuning_file(path)

    def algorithm_cvar(self, collective: str) -> str:
        self._check_collective(collective)
        return algorithm_cvar(collective)

    def parameter_env(self, name: str, value: bool | int | float | str) -> dict[str, str]:
        # MPICH reads every cvar from the environment under its MPI_T name; UCX reads UCX_* itself.
        return {name: format_parameter_value(value)}

    def uses_ucx(self) -> bool:
        return "ucx" in self.library.device.lower()

    def tunables(self) -> list[Tunable]:
        return list(TUNABLES) + (list(UCX_TUNABLES) if self.uses_ucx() else [])

    def parameter_constraints(self) -> list[str]:
        return list(CONSTRAINTS)

#: Parameters of JSON tuning-file leaves (writers.selection_json.LEAF_PARAMETERS) -> the cvar whose value the
#: benchmark ran with. A file must carry the same values, or it would run a different algorithm than the
#: one measured. Leaves with other parameters (tree_type, topology weights, ccl) are not listed: tunempi
#: cannot state them faithfully, so the tuner leaves those algorithms out of its candidates.
LEAF_PARAMETER_CVARS: dict[tuple[str, str], dict[str, str]] = {
    ("allreduce", "recursive_multiplying"): {"k": "MPIR_CVAR_ALLREDUCE_RECURSIVE_MULTIPLYING_KVAL"},
    ("allreduce", "recexch"): {"k": "MPIR_CVAR_ALLREDUCE_RECEXCH_KVAL",
                               "single_phase_recv": "MPIR_CVAR_ALLREDUCE_RECEXCH_SINGLE_PHASE_RECV"},
    ("allreduce", "k_reduce_scatter_allgather"): {
        "k": "MPIR_CVAR_ALLREDUCE_RECEXCH_KVAL",
        "single_phase_recv": "MPIR_CVAR_ALLREDUCE_RECEXCH_SINGLE_PHASE_RECV"},
    ("allgather", "k_brucks"): {"k": "MPIR_CVAR_ALLGATHER_BRUCKS_KVAL"},
    ("allgather", "recexch_doubling"): {"k": "MPIR_CVAR_ALLGATHER_RECEXCH_KVAL",
                                        "single_phase_recv": "MPIR_CVAR_ALLGATHER_RECEXCH_SINGLE_PHASE_RECV"},
    ("allgather", "recexch_halving"): {"k": "MPIR_CVAR_ALLGATHER_RECEXCH_KVAL",
                                       "single_phase_recv": "MPIR_CVAR_ALLGATHER_RECEXCH_SINGLE_PHASE_RECV"},
    ("alltoall", "k_brucks"): {"k": "MPIR_CVAR_ALLTOALL_BRUCKS_KVAL"},
    ("barrier", "k_dissemination"): {"k": "MPIR_CVAR_BARRIER_DISSEM_KVAL"},
    ("barrier", "recexch"): {"k": "MPIR_CVAR_BARRIER_RECEXCH_KVAL"},
    # Non-blocking (issue 41; MPICH's coll_algorithms.txt extra_params and cvar_params): the leaves that may
    # read parameters from the file, each with the cvar the benchmark ran with.
    ("iallreduce", "tsp_recexch_single_buffer"): {"k": "MPIR_CVAR_IALLREDUCE_RECEXCH_KVAL"},
    ("iallreduce", "tsp_recexch_multiple_buffer"): {"k": "MPIR_CVAR_IALLREDUCE_RECEXCH_KVAL"},
    ("iallreduce", "tsp_recexch_reduce_scatter_recexch_allgatherv"): {"k": "MPIR_CVAR_IALLREDUCE_RECEXCH_KVAL"},
    ("ibcast", "tsp_ring"): {"chunk_size": "MPIR_CVAR_IBCAST_RING_CHUNK_SIZE"},
    ("ibcast", "tsp_scatterv_recexch_allgatherv"): {"scatterv_k": "MPIR_CVAR_IBCAST_SCATTERV_KVAL",
                                                    "allgatherv_k": "MPIR_CVAR_IBCAST_ALLGATHERV_RECEXCH_KVAL"},
    ("iallgather", "tsp_brucks"): {"k": "MPIR_CVAR_IALLGATHER_BRUCKS_KVAL"},
    ("iallgather", "tsp_recexch_doubling"): {"k": "MPIR_CVAR_IALLGATHER_RECEXCH_KVAL"},
    ("iallgather", "tsp_recexch_halving"): {"k": "MPIR_CVAR_IALLGATHER_RECEXCH_KVAL"},
    ("ialltoall", "tsp_brucks"): {"k": "MPIR_CVAR_IALLTOALL_BRUCKS_KVAL",
                                  "buffer_per_phase": "MPIR_CVAR_IALLTOALL_BRUCKS_BUFFER_PER_NBR"},
    ("ialltoall", "tsp_scattered"): {"batch_size": "MPIR_CVAR_IALLTOALL_SCATTERED_BATCH_SIZE",
                                     "bblock": "MPIR_CVAR_IALLTOALL_SCATTERED_OUTSTANDING_TASKS"},
}

_TREE_PARAMETERS = "its tuning-file leaf takes tree_type and topology weights, which tunempi cannot state"
_FILE_PATH_FAILS = ("selected by a tuning file it hangs or fails in MPICH 5.0.2 (forced through the environment "
                    "it runs): measured, issue 41")
#: Algorithms a tuning file cannot select, and why (see LEAF_PARAMETER_CVARS).
UNWRITABLE_ALGORITHMS: dict[tuple[str, str], str] = {
    ("allreduce", "tree"): _TREE_PARAMETERS,
    ("bcast", "tree"): _TREE_PARAMETERS,
    ("bcast", "pipelined_tree"): _TREE_PARAMETERS,
    ("allreduce", "ccl"): "its leaf names a CCL component, which this build may lack",
    ("iallreduce", "tsp_tree"): "its tuning-file leaf takes tree_type, which tunempi cannot state",
    ("ibcast", "tsp_tree"): "its tuning-file leaf takes tree_type, which tunempi cannot state",
    # Measured (MPICH 5.0.2, 2 ranks, the smoke probe: two outstanding requests, ialltoall also in place):
    # forced through the environment each runs and checks; selected by a JSON file (its parameters written as
    # the benchmark ran them) the iallgather and ialltoall tsp_scattered ones hang and ialltoall tsp_brucks
    # fails: the file's leaf does not run them as the cvar path does.
    ("iallgather", "tsp_recexch_doubling"): _FILE_PATH_FAILS,
    ("iallgather", "tsp_recexch_halving"): _FILE_PATH_FAILS,
    ("ialltoall", "tsp_brucks"): _FILE_PATH_FAILS,
    ("ialltoall", "tsp_scattered"): _FILE_PATH_FAILS,
    # Measured (MPICH 5.0.2, 2 ranks, the smoke probe, 2026-12-06): selected by a JSON file with k=2 (the
    # benchmark's MPIR_CVAR_IALLGATHER_BRUCKS_KVAL) every rank dies of SIGFPE from 28 B up; forced through the
    # cvar it runs and checks. A tune that chose it (a busy machine tips the choice there) failed its smoke check.
    ("iallgather", "tsp_brucks"): "selected by a tuning file MPICH 5.0.2 dies of a floating-point exception "
                                  "(SIGFPE) at 2 ranks from 28 B (forced through the environment it runs): measured",
}


def leaf_parameters(collective: str, algorithm: str, cvar_value: Callable[[str], object]) -> dict[str, int]:
    """The tuning-file parameters of one algorithm's leaf, from the library's cvar values ({} when it takes
    none); TuningFileError, saying why, when tunempi cannot state them."""
    if (collective, algorithm) in UNWRITABLE_ALGORITHMS:
        raise TuningFileError(UNWRITABLE_ALGORITHMS[(collective, algorithm)])
    params: dict[str, int] = {}
    for parameter, cvar in LEAF_PARAMETER_CVARS.get((collective, algorithm), {}).items():
        value = cvar_value(cvar)
        why = (f"its leaf parameter {parameter} comes from {cvar}, which the library does not report as an "
               f"integer ({value!r})")
        if not isinstance(value, (int, float, str)):
            raise TuningFileError(why)  # the library lacks the cvar (None) or gave something that is not a number
        try:
            params[parameter] = int(value)
        except ValueError:
            raise TuningFileError(why) from None
    return params


#: Preconditions per tuning-file leaf (writers.selection_json.GUARDS turns each into a guard), from the
#: restriction table (mpi/restrictions.py: MPICH's coll_algorithms.txt `restrictions`, its fallback
#: checks, and the conformance suite), in the guards' spelling.
_GUARD_NAMES = {"count-ge-pow2": "size-ge-pof2", "not-inplace": "noinplace"}


def _leaf_restrictions() -> dict[str, tuple[str, ...]]:
    """Every requirement of each leaf, merged over the table's entries for it (a leaf can have several: the
    fallback checks, and the datatype findings of issue 25). Datatype requirements have no guard: an
    algorithm needing one reaches a file only when the user vouched for it (tune
    --assume-contiguous-datatypes), and then needs none."""
    leaves: dict[str, list[str]] = {}
    for r in ALGORITHM_RESTRICTIONS:
        if r.vendor != "mpich":
            continue
        merged = leaves.setdefault(leaf_function(r.collective, r.algorithm), [])
        merged += [_GUARD_NAMES.get(q, q) for q in r.requires
                   if q not in DATATYPE_REQUIREMENTS and _GUARD_NAMES.get(q, q) not in merged]
    return {leaf: tuple(requirements) for leaf, requirements in leaves.items() if requirements}


LEAF_RESTRICTIONS: dict[str, tuple[str, ...]] = _leaf_restrictions()
#: csel.c's MPIR_Csel_sendbuf_inplace is defined for these only and ASSERTS for any other collective
#: (measured: a guard on reduce_scatter crashed every reduce_scatter call).
_INPLACE_KEY_COLLECTIVES = frozenset({"alltoall", "alltoallv", "alltoallw", "ialltoall"})


def file_expressible(collective: str) -> frozenset[str]:
    """The requirements (mpi/restrictions.py names) a JSON guard can state for this collective."""
    names = {_GUARD_NAMES.get(q, q): q for q in REQUIREMENTS}
    out = frozenset(names[g] for g in GUARDS if g in names)
    if collective not in _INPLACE_KEY_COLLECTIVES:
        out -= {"inplace", "not-inplace"}
    return out


def _leaf_keys(tree: object) -> set[str]:
    """Every `algorithm=...`/`composition=...` key in a selection tree (nested dicts)."""
    if not isinstance(tree, dict):
        return set()
    keys = {k for k in tree if k.startswith(("algorithm=", "composition="))}
    for child in tree.values():
        keys |= _leaf_keys(child)
    return keys
