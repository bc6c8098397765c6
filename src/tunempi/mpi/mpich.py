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
from collections.abc import Iterable

from tunempi.errors import UsageError
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


#: What MPICH does when a forced algorithm does not fit the arguments (error | print | silent).
FALLBACK_CVAR = "MPIR_CVAR_COLLECTIVE_FALLBACK"


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
        return bool(name) and name.split("_")[0] in own  # type: ignore[union-attr]

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
        fallback_values: dict[str, int] | None = None,
    ) -> None:
        super().__init__(library, catalog, defaults)
        self.cvar_names = frozenset(cvar_names)
        self._compositions = compositions or {}
        self._fallback_values = fallback_values or {}  # MPIR_CVAR_COLLECTIVE_FALLBACK: name -> int

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

    def strict_selection_switch(self) -> CvarSwitch | None:
        # Measured on 5.0.2: with "error" written after MPI_Init and MPI_ERRORS_RETURN, a forced
        # reduce_scatter_allgather returns an error for count < pof2 or a user-defined op, and the run goes
        # on; the default ("silent") runs another algorithm without a word.
        if "error" not in self._fallback_values:
            return None
        return CvarSwitch(cvar=FALLBACK_CVAR, value=self._fallback_values["error"], needs_new_communicator=False)

    def tuning_file_mechanisms(self) -> list[str]:
        if not self.cvar_names:
            return list(TUNING_FILE_CVARS)
        return [name for name in TUNING_FILE_CVARS if name in self.cvar_names]

    def tuning_file_env(self, mechanism: str, path: str) -> dict[str, str]:
        valid = self.tuning_file_mechanisms()
        if mechanism not in valid:
            raise UsageError(f"unknown tuning-file mechanism {mechanism!r} for {self.library.name}; "
                             f"valid: {', '.join(valid)}")
        return {mechanism: path}

    def compositions(self, collective: str) -> list[tuple[int, str]]:
        """MPICH 5 inter-/intra-node compositions (value, description); empty where there are none."""
        return list(self._compositions.get(collective, []))

    def algorithm_cvar(self, collective: str) -> str:
        self._check_collective(collective)
        return algorithm_cvar(collective)


def posix_algorithm_cvar(collective: str) -> str:
    return f"MPIR_CVAR_{COLLECTIVE_TOKENS[collective]}_POSIX_INTRA_ALGORITHM"


def posix_mpir_writes(cvars: Iterable[dict], collective: str) -> tuple[tuple[str, int], ...]:
    """The extra MPI_T write that makes a forced MPIR-level algorithm effective on ONE node.

    Measured on 5.0.2: after MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD calls on a communicator, the POSIX
    level serves bcast/reduce/barrier/allreduce with release_gather and ignores the MPIR algorithm
    cvar, unless MPIR_CVAR_<COLL>_POSIX_INTRA_ALGORITHM is `mpir`. Its int is the position of `mpir`
    in the cvar's description (0 on 5.0.2, where auto is listed last), so it is read, not assumed.
    Empty when the library has no such cvar for the collective.

    TODO(lead): superseded by CvarSwitch.also once runtime_switch returns these writes itself.
    """
    name = posix_algorithm_cvar(collective)
    for cvar in cvars:
        if cvar.get("name") == name:
            names = parse_algorithm_description(cvar.get("description", ""))
            if "mpir" in names:
                return ((name, names.index("mpir")),)
    return ()
