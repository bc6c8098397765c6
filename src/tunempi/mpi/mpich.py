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
from collections import Counter
from collections.abc import Iterable

from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import Algorithm, CvarSwitch, VendorAdapter

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
}

#: Tuning-file cvars, most general first (MPIR level, CH4 compositions, shared-memory level).
TUNING_FILE_CVARS: tuple[str, ...] = (
    "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE",
    "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE",
    "MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE",
)


def algorithm_cvar(collective: str) -> str:
    return f"MPIR_CVAR_{COLLECTIVE_TOKENS[collective]}_INTRA_ALGORITHM"


def composition_cvar(collective: str) -> str:
    return f"MPIR_CVAR_{COLLECTIVE_TOKENS[collective]}_COMPOSITION"


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

    Each separator ' - ' is preceded by `<previous entry's text><name><padding>`. The names were padded to
    a common column width W, so len(name) = W - len(padding). W is estimated from the entries whose name
    splits cleanly off a word the descriptions use elsewhere ("algorithm" + "smp"); the entries are then
    cut at that width. An unpadded entry (MPICH writes "auto - ..." unaligned) keeps its word split.
    """
    words = set(vocabulary) | {m.group(0) for m in _WORD.finditer(description)} | {"algorithm"}
    # Words that only occur glued to a name are not in `words`: only whole words of other text count.
    separators = list(_SEPARATOR.finditer(description))
    entries: list[tuple[str, int, str | None]] = []  # (trailing identifier, padding, word-split name)
    for sep in separators:
        head = description[: sep.start()]
        match = _TRAILING_IDENTIFIER.search(head)
        if not match:
            continue
        run = match.group(0)
        entries.append((run, len(sep.group(1)), _split_after_word(run, words)))
    widths = Counter(len(name) + pad for run, pad, name in entries if name is not None and pad > 1)
    width = widths.most_common(1)[0][0] if widths else None
    names: list[str] = []
    for run, pad, split_name in entries:
        name = split_name
        if width is not None and (pad > 1 or split_name is None) and 0 < width - pad <= len(run):
            name = run[len(run) - (width - pad):]
        if name is None:
            name = run
        if not re.fullmatch(_NAME, name):
            lowercase_tail = re.search(rf"{_NAME}$", name)
            if not lowercase_tail:
                continue
            name = lowercase_tail.group(0)
        names.append(name)
    return names


def _split_after_word(run: str, words: set[str]) -> str | None:
    """'algorithmsmp' -> 'smp' when 'algorithm' is a known word (the longest such prefix wins)."""
    for cut in range(len(run) - 1, 0, -1):
        if run[:cut] in words and re.fullmatch(_NAME, run[cut:]):
            return run[cut:]
    return None


_COMPOSITION_ENTRY = re.compile(r"(?:^|\s)(\d+)\s+(.+?)(?=\s+\d+\s+\D|$)", re.S)


def parse_composition_description(description: str) -> list[tuple[int, str]]:
    """'Select ... for Allreduce 0 Auto selection 1 NM + SHM with reduce + bcast 2 NM only ...'
    -> [(0, 'Auto selection'), (1, 'NM + SHM with reduce + bcast'), (2, 'NM only ...')]."""
    text = " ".join(description.split())
    first = re.search(r"(?:^|\s)0\s", text)
    if not first:
        return []
    return [(int(m.group(1)), m.group(2).strip()) for m in _COMPOSITION_ENTRY.finditer(text[first.start():])]


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
        names = parse_algorithm_description(cvar.get("description", ""), vocabulary)
        algorithms = [Algorithm(name, value) for value, name in enumerate(names)]
        for algorithm in algorithms:
            if algorithm.name == DEFAULT_NAME:
                defaults[collective] = algorithm
        catalog[collective] = [a for a in algorithms if a.name != DEFAULT_NAME]
    return catalog, defaults


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
    ) -> None:
        super().__init__(library, catalog, defaults)
        self.cvar_names = frozenset(cvar_names)
        self._compositions = compositions or {}

    def default_name(self) -> str:
        return DEFAULT_NAME

    def check_algorithm(self, collective: str, name: str) -> Algorithm:
        return self._check(collective, name)

    def force_env(self, collective: str, name: str) -> dict[str, str]:
        algorithm = self.check_algorithm(collective, name)
        return {algorithm_cvar(collective): algorithm.name}

    def runtime_switch(self, collective: str, name: str) -> CvarSwitch:
        algorithm = self.check_algorithm(collective, name)
        return CvarSwitch(cvar=algorithm_cvar(collective), value=algorithm.value, needs_new_communicator=False)

    def launch_env(self) -> dict[str, str]:
        return {}

    def tuning_file_mechanisms(self) -> list[str]:
        if not self.cvar_names:
            return list(TUNING_FILE_CVARS)
        return [name for name in TUNING_FILE_CVARS if name in self.cvar_names]

    def compositions(self, collective: str) -> list[tuple[int, str]]:
        """MPICH 5 inter-/intra-node compositions (value, description); empty where there are none."""
        return list(self._compositions.get(collective, []))

    def algorithm_cvar(self, collective: str) -> str:
        self._check_collective(collective)
        return algorithm_cvar(collective)
