"""Intel MPI: presets from MPI_T, forcing through I_MPI_ADJUST_<COLL>, selection strings as tuning.

What the library says about itself (measured on the PyPI wheel 2021.19.0, docs/intel-mpi.md):
- Each collective's algorithm is a *preset* id, chosen by the string cvar MPIR_CVAR_USE_<COLL> whose
  description says `@Alias:# I_MPI_ADJUST_<COLL>` and `range: 0-N` (older releases list the cvar under
  its I_MPI_ name). Preset names are not in MPI_T: they are data (mpi/data/impi_presets.json, from Intel's
  developer reference, with the versions they were checked on); elsewhere a preset is "preset_N".
- The presets are honoured only from the environment at MPI_Init: an MPI_T write after MPI_Init is
  accepted and reads back, but the next calls (on MPI_COMM_WORLD or on a communicator duplicated after
  the write) keep the old algorithm (4 KiB allreduce, 2 ranks: 0.7 us whatever was written; 1.1-1.4 us
  with presets 2, 3, 5 from the environment). So every forced algorithm costs a launch
  (switches_at_run_time False): the bench engine keeps one session per forced preset.
- A value the library cannot use is reported at start ("Incorrect algorithm: ALLREDUCE=99, will be
  ignored", "Incorrect adjust value: ...") and ignored: the smoke check reads that message.
- Tuning: the selection string `I_MPI_ADJUST_<COLL>="<id>:<l>-<m>@<p>-<q>;..."` (writers/impi_adjust.py),
  written as an env file; Intel's binary tuning files (I_MPI_TUNING_BIN) have no published format.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from tunempi.collectives import COLLECTIVES
from tunempi.errors import MPIError, TuningFileError, UsageError
from tunempi.mpi.restrictions import file_exclusion
from tunempi.mpi.vendor import (
    Algorithm,
    CvarSwitch,
    ThresholdKnob,
    Tunable,
    TuningFiles,
    VendorAdapter,
    format_parameter_value,
)
from tunempi.rules.ruleset import RuleSet
from tunempi.writers.env_file import read_env_file
from tunempi.writers.impi_adjust import read_adjust_value, write_adjust_value

DEFAULT_NAME = "auto"
#: The file written into a tuning directory (name kept stable: manifests name it).
ADJUST_FILE = "impi-adjust.env"
PRESETS_DATA = Path(__file__).with_name("data") / "impi_presets.json"

#: tunempi collective name -> the token of Intel's I_MPI_ADJUST_<TOKEN>: the name in capitals for all of them.
COLLECTIVE_TOKENS: dict[str, str] = {collective: collective.upper() for collective in COLLECTIVES}

#: What the library prints at start for a selection it ignores (2021.19.0, with or without I_MPI_DEBUG).
IGNORED_SELECTION = re.compile(r"Incorrect (?:algorithm|adjust value): ([A-Z_]+)=(\S*), will be ignored")

_ALIAS = re.compile(r"@Alias:#\s*(I_MPI_[A-Z0-9_]+)")
_RANGE = re.compile(r"range:\s*0-(\d+)")


#: Curated run-time parameters (`search --space auto`), by their MPI_T names (Intel's I_MPI_ names in the
#: comments; `parameter_env` sets those). Their MPI_T default is -1 ("the library decides"), so the values are
#: explicit, and -1 joins them as the default. Every value below starts and runs (2021.19.0, 2 ranks).
TUNABLES: tuple[Tunable, ...] = (
    Tunable("MPIR_CVAR_INTEL_SHM_EAGER_THRESHOLD", "size",  # I_MPI_SHM_EAGER_THRESHOLD
            "shared-memory eager/rendezvous switch between ranks of a node", values=(4096, 16384, 65536, 262144)),
    Tunable("MPIR_CVAR_INTEL_SHM_CELL_FWD_SIZE", "size",  # I_MPI_SHM_CELL_FWD_SIZE
            "shared-memory forward cell: a message up to this size travels in one cell",
            values=(16384, 65536, 262144)),
    Tunable("MPIR_CVAR_INTEL_SHM_CMA_THRESHOLD", "size",  # I_MPI_SHM_CMA_THRESHOLD
            "intra-node messages from this size go by a single CMA copy", values=(4096, 65536, 1048576)),
    Tunable("MPIR_CVAR_IMPI_PROGRESS_SPIN_COUNT", "count",  # I_MPI_SPIN_COUNT
            "polls before a waiting rank yields the core: matters where ranks share cores", values=(1, 100, 10000)),
    Tunable("MPIR_CVAR_IMPI_WAIT_MODE", "bool",  # I_MPI_WAIT_MODE
            "wait for messages asleep instead of busy-polling (oversubscribed nodes)", values=(0, 1)),
)


def adjust_variable(collective: str) -> str:
    return f"I_MPI_ADJUST_{COLLECTIVE_TOKENS[collective]}"


def aliases(cvars: Iterable[dict]) -> dict[str, str]:
    """I_MPI_ name -> the MPI_T cvar that holds it (the cvar itself where it carries the I_MPI_ name)."""
    found: dict[str, str] = {}
    for cvar in cvars:
        name = cvar["name"]
        if name.startswith("I_MPI_"):
            found.setdefault(name, name)
        match = _ALIAS.search(cvar.get("description", ""))
        if match:
            found.setdefault(match.group(1), name)
    return found


@cache
def _preset_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PRESETS_DATA.read_text(encoding="utf-8"))
    return data


def preset_names(collective: str, version: str) -> dict[int, str]:
    """preset id -> tunempi's name for it, for the versions the table was checked on ({} elsewhere)."""
    data = _preset_data()
    if not any(version.startswith(prefix) for prefix in data["versions"]):
        return {}
    return {int(k): v for k, v in data["collectives"].get(collective, {}).items()}


def catalog_from_cvars(cvars: Iterable[dict], version: str) -> tuple[dict[str, list[Algorithm]], dict[str, Algorithm]]:
    """(collective -> presets 1..N, collective -> the default entry) from the I_MPI_ADJUST cvars' ranges."""
    cvars = list(cvars)
    by_name = {cvar["name"]: cvar for cvar in cvars}
    holders = aliases(cvars)
    catalog: dict[str, list[Algorithm]] = {}
    defaults: dict[str, Algorithm] = {}
    for collective in COLLECTIVE_TOKENS:
        holder = holders.get(adjust_variable(collective))
        match = _RANGE.search(by_name[holder].get("description", "")) if holder else None
        if match is None:
            continue
        names = preset_names(collective, version)
        catalog[collective] = [Algorithm(names.get(i, f"preset_{i}"), i) for i in range(1, int(match.group(1)) + 1)]
        defaults[collective] = Algorithm(DEFAULT_NAME, 0)
    return catalog, defaults


def ignored_selections(output: str) -> list[str]:
    """`VAR=value` for every selection the library said it ignores in a run's output."""
    return [f"I_MPI_ADJUST_{m.group(1)}={m.group(2)}" for m in IGNORED_SELECTION.finditer(output)]


class IntelMPIAdapter(VendorAdapter):
    vendor = "impi"

    def __init__(self, *args: Any, aliases: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # VendorAdapter's
        self.aliases = dict(aliases or {})  # I_MPI_ name -> MPI_T cvar name

    def default_name(self) -> str:
        return DEFAULT_NAME

    def force_env(self, collective: str, name: str) -> dict[str, str]:
        algorithm = self.check_algorithm(collective, name)
        if algorithm.name == DEFAULT_NAME:
            return {}  # the library's own selection (its tuning files)
        return {adjust_variable(collective): str(algorithm.value)}

    def switches_at_run_time(self) -> bool:
        return False  # measured: only the environment at MPI_Init counts (module docstring)

    def runtime_switch(self, collective: str, name: str) -> CvarSwitch:
        self.check_algorithm(collective, name)
        raise MPIError(f"{self.library.name} takes {adjust_variable(collective)} only from the environment at "
                       f"MPI_Init: an MPI_T write changes no later call (measured); force it per launch")

    def launch_env(self) -> dict[str, str]:
        return {}

    def eager_threshold_knobs(self, *, intra_node: bool = True, inter_node: bool = False) -> list[ThresholdKnob]:
        """Between ranks of a node: its shared-memory eager threshold (default decided at start: -1). Across
        nodes the libfabric provider decides; no knob is known to be honoured there."""
        knobs = []
        if intra_node and "MPIR_CVAR_INTEL_SHM_EAGER_THRESHOLD" in self.cvar_names:
            knobs.append(ThresholdKnob("I_MPI_SHM_EAGER_THRESHOLD", "Intel MPI shared memory", "intra-node"))
        return knobs

    def files_keep_library_choice_elsewhere(self) -> bool:
        # Measured (2 ranks, allreduce): unset 0.27 us at 8 B, 36.6 us at 512 KiB; with
        # I_MPI_ADJUST_ALLREDUCE="27:3072-6143@1-..." (or "0") 0.57 and 52.9 us: Intel's tuned choice is gone.
        return False

    def unbounded_selection_env(self, collective: str) -> tuple[str, ...]:
        # Measured (2021.19, test_tuning_bounds): a call no condition of the string matches takes the
        # nearest condition's preset, so a string's `@p-q` ranges do not bound it; its JSON (I_MPI_TUNING)
        # replaces the collective's whole tree the same way (docs/tuning-files.md, "Where a rule acts").
        return (adjust_variable(collective),) if collective in COLLECTIVE_TOKENS else ()

    def tuning_file_mechanisms(self) -> list[str]:
        return ["I_MPI_ADJUST"]

    def tuning_file_env(self, mechanism: str, path: str) -> dict[str, str]:
        """The selection strings are the environment itself: the variables the env file at `path` sets
        (a description of them where no such file exists yet, e.g. for `tunempi info`)."""
        self._check_mechanism(mechanism)
        if Path(path).is_file():
            return read_adjust_file(Path(path).read_text(encoding="utf-8"))
        return {"I_MPI_ADJUST_<COLL>": f"<presetid>:<l>-<m>@<p>-<q>;... (from {path})"}

    def tuning_file_exclusion(self, collective: str, algorithm: str) -> str | None:
        # A selection string conditions on message and communicator size only, like Open MPI's rules file.
        return file_exclusion(self.vendor, self.library.version, collective, algorithm, frozenset(), self.assumed)

    def presets(self, collective: str) -> dict[str, int]:
        return {a.name: a.value for a in self.algorithms(collective)}

    def write_tuning_files(self, rule_sets: Mapping[str, RuleSet], directory: Path) -> TuningFiles:
        """One I_MPI_ADJUST_<COLL> selection string per collective that selects a preset somewhere, in an
        env file (read back strictly) and as the launch environment."""
        self.check_tuning_file_algorithms(rule_sets)
        env: dict[str, str] = {}
        for collective, rule_set in sorted(rule_sets.items()):
            self._check_collective(collective)
            value = write_adjust_value(rule_set, self.presets(collective))
            if value is not None:
                env[adjust_variable(collective)] = value
        text = f"# tunempi tuning for {self.library.name}: Intel MPI selection strings\n" + "".join(
            f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
        self.check_adjust_env(read_adjust_file(text))
        (directory / ADJUST_FILE).write_text(text, encoding="utf-8")
        return TuningFiles(files={"impi-adjust": ADJUST_FILE}, env_files={}, env=env)

    def check_adjust_env(self, env: Mapping[str, str]) -> None:
        """TuningFileError for a variable or preset id this library does not have."""
        variables = {adjust_variable(c): c for c in self.catalog}
        for name, value in env.items():
            if name not in variables:
                raise TuningFileError(f"{self.library.name} has no selectable presets for {name}")
            valid = {0, *self.presets(variables[name]).values()}
            for condition in read_adjust_value(value):
                if condition.preset not in valid:
                    raise TuningFileError(f"{name}: preset {condition.preset} is not one of {self.library.name}'s "
                                          f"({min(valid)}-{max(valid)})")

    def read_back_tuning_file(self, path: Path) -> None:
        try:
            self.check_adjust_env(read_adjust_file(path.read_text(encoding="utf-8")))
        except TuningFileError as exc:
            raise UsageError(f"{path}: {exc}") from None

    def ignored_by_library(self, output: str) -> list[str]:
        return ignored_selections(output)

    # -- run-time parameters ---------------------------------------------------------------------------
    def canonical_parameter(self, name: str) -> str:
        """Intel's documented I_MPI_ names map to the MPI_T cvar that holds them."""
        return self.aliases.get(name, name)

    def parameter_env(self, name: str, value: bool | int | float | str) -> dict[str, str]:
        # Intel reads its I_MPI_ spelling from the environment; a cvar without one by its MPI_T name.
        public = next((alias for alias, cvar in self.aliases.items() if cvar == name), name)
        return {public: format_parameter_value(value)}

    def tunables(self) -> list[Tunable]:
        return list(TUNABLES)


def read_adjust_file(text: str) -> dict[str, str]:
    """The variables of an env file written by write_tuning_files, every value parsed (TuningFileError)."""
    try:
        env = read_env_file(text)
    except (UsageError, ValueError) as exc:  # ValueError: shlex on an unclosed quote
        raise TuningFileError(str(exc)) from None
    for name, value in env.items():
        if not name.startswith("I_MPI_ADJUST_"):
            raise TuningFileError(f"not an I_MPI_ADJUST variable: {name}")
        read_adjust_value(value)
    return env

