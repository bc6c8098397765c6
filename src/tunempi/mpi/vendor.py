"""The interface every vendor adapter implements: the ONLY place that spells cvars, env vars and flags.

Implementations: mpi/mpich.py (MpichAdapter), mpi/openmpi.py (OpenMPIAdapter); `adapter_for(library)`
in mpi/discovery.py returns the right one. Algorithm names and ints are discovered from the library
at run time (MPI_T), never from a hard-coded table, and cached per library fingerprint.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunempi.collectives import ALL_TO_ALL_VECTOR_COLLECTIVES, DEFAULT_ALGORITHM, ROOTED_VECTOR_COLLECTIVES
from tunempi.errors import TuningFileError, UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.rules.ruleset import RuleSet


@dataclass(frozen=True)
class Algorithm:
    """One algorithm a library offers for a collective: its own name and the int its cvar uses."""

    name: str
    value: int


@dataclass(frozen=True)
class CvarSwitch:
    """How to make the NEXT collective use an algorithm without relaunching, through MPI_T.

    Every rank writes `value` to control variable `cvar` (an int cvar) after MPI_Init; when
    `needs_new_communicator` is true the library only honours the value on communicators created after
    the write (Open MPI), so the caller duplicates its communicator after writing.
    """

    cvar: str
    value: int
    needs_new_communicator: bool
    #: Further (cvar, int) writes that belong to this selection and are made before it, e.g. MPICH's
    #: shared-memory level pinned to "mpir" so that the forced MPIR algorithm really runs.
    also: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Tunable:
    """A curated run-time parameter pattern for `--space auto` (mpi/runtime.py builds the space).

    pattern: regex matched (whole name) against the library's cvar names, or against UCX knob names
    when it starts with UCX_. kind: "size" (bytes/thresholds: ladder default/16..default*16), "count"
    (default/4..default*4), "bool" (0/1). values: explicit choices (UCX knobs whose default is `auto`).
    why: one line for the docs and the space file: why it matters for performance.
    """

    pattern: str
    kind: str
    why: str
    values: tuple[int | str, ...] | None = None
    minimum: int = 1


@dataclass(frozen=True)
class ThresholdKnob:
    """A run-time parameter that moves a point-to-point protocol switch-over (eager -> rendezvous or
    single copy) for the transport a library uses between ranks on one node or across nodes.

    `name` is the environment variable that sets it at launch (what `tunempi search` applies); `default`
    is the library's value in bytes where the library reports it (None: set elsewhere, e.g. UCX's "auto");
    `powers_of_two` when the library only accepts powers of two; `maximum` the largest value the library
    starts with (None: no known limit).
    """

    name: str
    transport: str  # for people: which path it governs ("POSIX shared memory (ch4 shm)", "UCX", ...)
    locality: str  # "intra-node" or "inter-node"
    default: int | None = None
    powers_of_two: bool = False
    maximum: int | None = None


@dataclass(frozen=True)
class FileAlgorithms:
    """Which of a collective's algorithms a tuning file of this library can select, and why not the others.

    `excluded`: algorithm -> the reason a file cannot select it (a leaf the library's parser lacks,
    parameters tunempi cannot state, a restriction the file cannot express for the calls it will meet).
    """

    collective: str
    selectable: tuple[str, ...]
    excluded: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TuningFiles:
    """Tuning files an adapter wrote into a directory for a rule set, and how a launch activates them."""

    files: Mapping[str, str]  # role (e.g. "openmpi-rules") -> file name inside the directory
    env_files: Mapping[str, str]  # environment variable -> the file name it must point to
    env: Mapping[str, str] = field(default_factory=dict)  # further variables the files need

    def activation_env(self, directory: Path) -> dict[str, str]:
        """Every variable to set, with file variables pointing into `directory`."""
        return {**self.env, **{name: str((directory / file).resolve()) for name, file in self.env_files.items()}}


@dataclass(frozen=True)
class Composition:
    """A hierarchical way to run a collective across nodes (inter-node part + intra-node part), chosen
    by the library's composition control; a candidate only where a layout spans several nodes."""

    collective: str
    name: str  # the library's own name for it, e.g. MPICH's "beta"
    description: str
    env: Mapping[str, str]  # forces it for a whole launch


class VendorAdapter(ABC):
    """Vendor-specific knowledge about one library. Stateless apart from the discovered catalog."""

    vendor: str

    def __init__(
        self,
        library: MPILibrary,
        catalog: dict[str, list[Algorithm]],
        defaults: dict[str, Algorithm] | None = None,
        cvar_names: Iterable[str] = (),
        cvar_values: Mapping[str, Any] | None = None,
    ) -> None:
        self.library = library
        self.catalog = catalog  # collective -> algorithms, discovered from the library
        # collective -> the library's own "let the library choose" entry (MPICH auto, Open MPI ignore)
        self.defaults = dict(defaults or {})
        self.cvar_values = dict(cvar_values or {})  # name -> default value read through MPI_T
        self.cvar_names = frozenset(cvar_names) | frozenset(self.cvar_values)  # empty: not discovered
        # Requirements (mpi/restrictions.py) the user vouches every call of the application meets, so a
        # tuning file may select the algorithms that need them although it cannot state them.
        self.assumed: frozenset[str] = frozenset()

    def assuming(self, requirements: Iterable[str]) -> VendorAdapter:
        """A copy of this adapter whose tuning files may select algorithms needing `requirements`
        (UsageError for a requirement the restriction table does not know)."""
        import copy

        from tunempi.mpi.restrictions import REQUIREMENTS

        wanted = frozenset(requirements)
        unknown = sorted(wanted - set(REQUIREMENTS))
        if unknown:
            raise UsageError(f"unknown requirement(s) {', '.join(unknown)}; valid: {', '.join(REQUIREMENTS)}")
        other = copy.copy(self)
        other.assumed = wanted
        return other

    def collectives(self) -> list[str]:
        """The collectives (tunempi names) whose algorithm this library lets us choose."""
        return list(self.catalog)

    def algorithms(self, collective: str) -> list[Algorithm]:
        """The library's own algorithms for a collective, without the automatic choice."""
        return list(self.catalog.get(collective, []))

    def default_algorithm(self, collective: str) -> Algorithm:
        """The automatic choice, under the library's own name and int (e.g. Algorithm("auto", 0))."""
        self._check_collective(collective)
        return self.defaults.get(collective, Algorithm(self.default_name(), 0))

    def algorithm_names(self, collective: str) -> list[str]:
        """Every name check_algorithm accepts for the collective: the default first, then the library's."""
        return [DEFAULT_ALGORITHM, self.default_name()] + [a.name for a in self.algorithms(collective)]

    def _check_collective(self, collective: str) -> None:
        if collective not in self.catalog:
            valid = ", ".join(self.catalog) or "none"
            raise UsageError(
                f"{self.library.name} has no selectable algorithms for collective {collective!r}; valid: {valid}"
            )

    def check_algorithm(self, collective: str, name: str) -> Algorithm:
        """Return the algorithm or raise UsageError naming the valid ones (MPICH segfaults otherwise).

        'default' (tunempi's name) and default_name() both return default_algorithm(collective); any other
        name must be in the discovered catalog.
        """
        self._check_collective(collective)
        if name in (DEFAULT_ALGORITHM, self.default_name()):
            return self.default_algorithm(collective)
        for algorithm in self.catalog[collective]:
            if algorithm.name == name:
                return algorithm
        raise UsageError(
            f"unknown {collective} algorithm {name!r} for {self.library.name}; "
            f"valid: {', '.join(self.algorithm_names(collective))}"
        )

    @abstractmethod
    def default_name(self) -> str:
        """The name of 'let the library choose' (MPICH: 'auto'; Open MPI: 'ignore')."""

    @abstractmethod
    def force_env(self, collective: str, name: str) -> dict[str, str]:
        """Environment that forces `name` for `collective` for a whole launch (one-shot mode)."""

    @abstractmethod
    def runtime_switch(self, collective: str, name: str) -> CvarSwitch:
        """How to switch to `name` at run time through MPI_T (see CvarSwitch)."""

    def switches_at_run_time(self) -> bool:
        """Whether runtime_switch works: a library that reads its algorithm choice only at MPI_Init (Intel
        MPI) is forced per launch through force_env instead, and has no online per-call mode."""
        return True

    def switches_collective_at_run_time(self, collective: str) -> bool:
        """Whether runtime_switch works for this collective (switches_at_run_time, unless the library's
        cvar for it cannot be written after MPI_Init): where not, its algorithms are forced per launch."""
        return self.switches_at_run_time()

    def files_keep_library_choice_elsewhere(self) -> bool:
        """Whether sizes a tuning file leaves to the library keep the library's own (tuned) choice. False
        where selecting any size of a collective replaces the library's choice at every size (Intel MPI: with
        I_MPI_ADJUST_<COLL> set, a size no condition matches takes the nearest condition's preset); tune and
        verify then select for a collective as a whole (tune.files.whole_collectives)."""
        return True

    def unbounded_selection_env(self, collective: str) -> tuple[str, ...]:
        """The variables carrying `collective`'s tuned rules where the library cannot leave a communicator
        size no rule covers to its own choice (Intel MPI: such a call takes the nearest condition's preset;
        Open MPI's non-blocking collectives: coll/libnbc's one value for every call). `tunempi run` and
        `compare` leave them out of a job outside the layouts the collective measured, so the library keeps
        its own choice there (tune.apply.left_to_library); `catalog module` always. Empty where the files
        bound themselves."""
        return ()

    def selects_by_size(self, collective: str) -> bool:
        """Whether this library's tuning files can choose `collective`'s algorithm by message size the same
        way on every rank. Not alltoallv nor alltoallw (collectives.ALL_TO_ALL_VECTOR_COLLECTIVES), in any
        library here: their counts differ between ranks, and MPICH keys its JSON on each rank's own
        sum(sendcounts) (x each peer's type size: alltoallw; ranks of one call could pick different algorithms), Open MPI's rules file sees size 0 (only the first rule applies) and Intel MPI documents
        no message size for it. Nor gatherv and scatterv (collectives.ROOTED_VECTOR_COLLECTIVES): only the root
        knows every count, MPICH's JSON has no message-size key for them (csel.c asserts) and Open MPI's
        coll/tuned has no algorithm for them. tune then writes one algorithm per communicator size for it
        (tune.files.one_choice_per_scale)."""
        return collective not in ALL_TO_ALL_VECTOR_COLLECTIVES and collective not in ROOTED_VECTOR_COLLECTIVES

    def selects_by_communicator_size(self, collective: str) -> bool:
        """Whether this library's tuning files can choose `collective`'s algorithm by communicator size. Not
        where the only selection is one value per collective for every call (Open MPI's libnbc variables for
        the non-blocking collectives: no rules file reaches them); tune then writes one algorithm for all of
        the collective's cells (tune.files.one_choice_per_scale)."""
        return True

    def selects_by_ppn(self) -> bool:
        """Whether this library's tuning files can give two layouts of one communicator size (2 nodes x 1 and 1
        node x 2) their own rules: MPICH's `comm_avg_ppn<=N` keys. Where not (Open MPI's sections and Intel MPI's
        `@p-q` ranges key on communicator size only), layouts of one size share one rule
        (rules.SelectionTable.from_scaled)."""
        return False

    def ignored_by_library(self, output: str) -> list[str]:
        """The selections a run's output says the library ignored (e.g. an id it does not know): a tuning
        whose launch prints any is rejected by the smoke check. Empty where the library says nothing."""
        return []

    @abstractmethod
    def launch_env(self) -> dict[str, str]:
        """Environment every launch of this library needs for tunempi's runs (e.g. Open MPI's dynamic rules)."""

    @abstractmethod
    def tuning_file_mechanisms(self) -> list[str]:
        """Names of the tuning-file mechanisms this library offers (for `tunempi info`)."""

    def strict_selection_switch(self) -> CvarSwitch | None:
        """A run-time write that makes a forced algorithm which cannot take the call's arguments FAIL
        (an error code, with MPI_ERRORS_RETURN on the communicator) instead of silently running another
        algorithm; None where the library has no such control.

        Write it after MPI_Init on every rank, never through the environment (MPICH: MPI_Init's own
        collectives would then fail when an ill-fitting algorithm is forced).
        """
        return None

    def refusal_messages(self) -> tuple[str, ...]:
        """Texts of the library's error string (MPI_Error_string) that mean a forced algorithm refused the
        call's arguments under `strict_selection_switch`, before any communication and on every rank of the
        call alike (the online mode reruns only such calls as the library's choice; any other error is the
        application's). Empty where the library has no strict selection."""
        return ()

    def composition_candidates(self, collective: str, nodes: int) -> list[Composition]:
        """The compositions worth measuring for `collective` at a layout of `nodes` nodes: none on one
        node (a composition only differs in how it splits work between nodes), none where the library has
        no composition control or a tuning file could not select it."""
        return []

    def write_composition_file(self, choices: Mapping[str, Composition], directory: Path) -> TuningFiles:
        """Writes the chosen composition per collective into `directory` in the library's own form."""
        raise TuningFileError(f"{self.library.name}: tunempi cannot write compositions for this library")

    def composition_applies_to_all(self) -> bool:
        """Whether the library takes one composition for every collective (then one is written only where
        every tuned collective chose it) rather than one per collective."""
        return False

    def read_back_composition_file(self, path: Path) -> None:
        """UsageError if a composition file this adapter wrote would be rejected or misread (checked before
        every run, as read_back_tuning_file is for the algorithm files)."""
        raise UsageError(f"{self.library.name}: tunempi writes no composition file for this library ({path.name})")

    def says_not_usable(self, reason: str) -> bool:
        """Whether a failed point's message is the library saying the forced algorithm cannot take this
        call (under strict_selection_switch): not usable here, as opposed to a real failure."""
        return False

    def eager_threshold_knobs(self, *, intra_node: bool = True, inter_node: bool = False) -> list[ThresholdKnob]:
        """The knobs of the eager/rendezvous threshold for messages between ranks on one node
        (`intra_node`) and across nodes (`inter_node`), for the transport the library selects at run time;
        the first of each locality is the main one. Empty where nothing is known."""
        return []

    def default_choice(self, collective: str, msg_bytes: int, ranks: int, nodes: int) -> str | None:
        """The algorithm the library's own selection picks for a call (OSU size convention), when that can
        be known without running it; None otherwise (e.g. Open MPI's fixed decision rules are C code)."""
        return None

    def single_node_env(self) -> dict[str, str]:
        """Environment that makes launches confined to ONE node start faster without changing collectives.

        Only for single-node runs (it may disable a network transport); empty where nothing is known.
        """
        return {}

    def tuning_file_env(self, mechanism: str, path: str) -> dict[str, str]:
        """Environment that makes a launch read tuning file `path` through `mechanism`
        (one of tuning_file_mechanisms())."""
        raise NotImplementedError(f"{type(self).__name__} has no tuning-file mechanisms")

    # -- tuning files (the whole mechanism: what a file can select, writing it, the library's own choice) --
    def read_back_tuning_file(self, path: Path) -> None:
        """UsageError if a tuning file this adapter wrote would be rejected, misread or aborted on by the
        library (read back as strictly as the library reads it); checked before every run."""
        raise NotImplementedError(f"{type(self).__name__} cannot read its tuning files back")

    def tuning_file_exclusion(self, collective: str, algorithm: str) -> str | None:
        """Why a tuning file cannot select `algorithm` for `collective` (None: it can)."""
        return None

    def tuning_file_algorithms(self, collective: str) -> FileAlgorithms:
        """The library's algorithms a tuning file can select, each other one with its reason."""
        selectable: list[str] = []
        excluded: dict[str, str] = {}
        for algorithm in self.algorithms(collective):
            reason = self.tuning_file_exclusion(collective, algorithm.name)
            if reason is None:
                selectable.append(algorithm.name)
            else:
                excluded[algorithm.name] = reason
        return FileAlgorithms(collective, tuple(selectable), excluded)

    def check_tuning_file_algorithms(self, rule_sets: Mapping[str, RuleSet]) -> None:
        """TuningFileError when a rule set selects an algorithm no tuning file of this library can select."""
        for collective, rule_set in sorted(rule_sets.items()):
            for algorithm in rule_set.algorithms():
                if algorithm == DEFAULT_ALGORITHM:
                    continue
                reason = self.tuning_file_exclusion(collective, algorithm)
                if reason is not None:
                    raise TuningFileError(f"a {self.library.name} tuning file cannot select {collective} "
                                          f"{algorithm}: {reason}")

    def write_tuning_files(self, rule_sets: Mapping[str, RuleSet], directory: Path) -> TuningFiles:
        """Write the library's tuning files for `rule_sets` into `directory` (TuningFileError if it cannot)."""
        raise TuningFileError(f"{self.library.name}: tunempi writes no tuning files for {self.vendor}")

    def _check_mechanism(self, mechanism: str) -> None:
        """UsageError unless `mechanism` is one of tuning_file_mechanisms()."""
        valid = self.tuning_file_mechanisms()
        if mechanism not in valid:
            raise UsageError(f"unknown tuning-file mechanism {mechanism!r} for {self.library.name}; "
                             f"valid: {', '.join(valid) or 'none'}")

    # -- run-time parameters (tunempi search; names checked by mpi/runtime.check_parameters) -------------
    def canonical_parameter(self, name: str) -> str:
        """The MPI_T (or UCX) name of a parameter as a user may spell it (Open MPI: OMPI_MCA_x -> x)."""
        return name

    @abstractmethod
    def parameter_env(self, name: str, value: bool | int | float | str) -> dict[str, str]:
        """Environment variables that give run-time parameter `name` the value `value` at launch."""

    def uses_ucx(self) -> bool:
        """Whether this library's point-to-point path may go through UCX (so UCX_* knobs matter)."""
        return False

    def tunables(self) -> list[Tunable]:
        """Curated run-time parameters known to matter for performance (`--space auto`)."""
        return []

    def parameter_constraints(self) -> list[str]:
        """Constraints the library imposes between tunables (space expressions); measured, see docs."""
        return []


def format_parameter_value(value: bool | int | float | str) -> str:
    """Booleans as 1/0 (both MPICH and Open MPI parse them), floats without trailing noise."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)
