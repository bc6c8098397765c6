"""Selection -> rule sets -> the library's tuning files, smoke-checked in the real library before they count.

The files are written into a staging directory next to the output, loaded into the real library by
writers.smoke.smoke_check (a short, checked run at every tuned communicator size, probing both sides
of every rule bound), and only then moved into place. A file the library rejects or crashes on is never
left as the result: `write_tuning_files` raises TuningFileError and the output directory keeps whatever
it held before.

Per library:
- MPICH: the complete MPIR-level JSON tree (the library's own default tree with the tuned subtrees in
  place) and its POSIX-level companion (without it MPICH's shared-memory release_gather algorithms take
  bcast/reduce/barrier/allreduce over after a few calls on one node and the MPIR tree is never asked).
- Open MPI: a dynamic rules file, read back by the strict reader first (Open MPI drops a file it cannot
  parse without a word, so a clean smoke run alone proves nothing).
- Both: an env file forcing the collectives that use one algorithm everywhere (the simple alternative).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tunempi.errors import TunempiError
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import VendorAdapter
from tunempi.rules import (
    DEFAULT_ALGORITHM,
    RuleSet,
    ScaledChoice,
    SelectionTable,
    build_rule_sets,
    check_equivalent,
)
from tunempi.space import Cell
from tunempi.writers.env_file import write_env_file
from tunempi.writers.smoke import PROBE_COLLECTIVES, probe_points, smoke_check

MPICH_MPIR_FILE = "mpich-mpir.json"
MPICH_POSIX_FILE = "mpich-posix.json"
OPENMPI_RULES_FILE = "openmpi.rules"
ENV_FILE = "tuning.env"


class TuningFileError(TunempiError):
    """A tuning file could not be written, or the library rejected it in the smoke run."""


@dataclass(frozen=True)
class SmokeRecord:
    ranks: int
    ok: bool
    argv: tuple[str, ...]
    points: int
    message: str = ""

    def to_dict(self) -> dict:
        return {"ranks": self.ranks, "ok": self.ok, "argv": list(self.argv), "points": self.points,
                "message": self.message}


@dataclass(frozen=True)
class WrittenFiles:
    """What was written into the output directory and how to activate it."""

    files: dict[str, str]  # role -> file name inside the output directory
    env_files: dict[str, str]  # environment variable -> file name inside the output directory
    env: dict[str, str]  # other variables the files need (e.g. Open MPI's use_dynamic_rules)
    env_file: str
    needs_file: tuple[str, ...]  # collectives the env file cannot express (size-dependent choice)
    smoke: tuple[SmokeRecord, ...] = field(default_factory=tuple)

    def activation_env(self, directory: Path) -> dict[str, str]:
        """Every variable to set, with file variables pointing into `directory`."""
        return {**self.env, **{name: str((directory / file).resolve()) for name, file in self.env_files.items()}}


def selection_table(selection: Mapping[Cell, str], *, preferred_ppn: int | None = None) -> SelectionTable:
    """The strategy's cell -> algorithm map as a rules table (layouts of one size agree, see from_scaled)."""
    return SelectionTable.from_scaled(
        (ScaledChoice(c.collective, c.nodes, c.ppn, c.msg_bytes, algorithm) for c, algorithm in selection.items()),
        preferred_ppn=preferred_ppn,
    )


def rule_sets_for(table: SelectionTable) -> dict[str, RuleSet]:
    """Minimal, complete rule sets; proven to pick the table's algorithm at every table point."""
    rule_sets = build_rule_sets(table)
    check_equivalent(table, rule_sets)
    return rule_sets


def mpich_leaf_params(library: MPILibrary, rule_sets: Mapping[str, RuleSet]) -> dict[tuple[str, str], dict]:
    """Parameters of every tuned leaf, from the values the library's cvars had while benchmarking."""
    from tunempi.mpi.discovery import library_info
    from tunempi.mpi.mpich import leaf_parameters

    info = library_info(library)

    def value(name: str) -> object:
        cvar = info.cvar(name)
        return None if cvar is None else cvar.get("value")

    params: dict[tuple[str, str], dict] = {}
    for collective, rule_set in rule_sets.items():
        for algorithm in rule_set.algorithms():
            if algorithm == DEFAULT_ALGORITHM:
                continue
            found = leaf_parameters(collective, algorithm, value)
            if found is None:
                raise TuningFileError(f"cannot state the tuning-file parameters of MPICH {collective} {algorithm}")
            if found:
                params[(collective, algorithm)] = found
    return params


def _write_mpich(library: MPILibrary, adapter: VendorAdapter, rule_sets: Mapping[str, RuleSet],
                 staging: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    from tunempi.mpi.default_tree import TUNING_FILE_CVAR, default_trees, find_libmpi, known_leaves
    from tunempi.writers.mpich_json import write_mpich_json, write_mpich_posix_json

    libmpi = find_libmpi(library.prefix)
    trees = default_trees(libmpi)
    (staging / MPICH_MPIR_FILE).write_text(write_mpich_json(
        trees["mpir"].tree, rule_sets, params=mpich_leaf_params(library, rule_sets),
        known_leaves=known_leaves(libmpi)))
    files = {"mpich-mpir": MPICH_MPIR_FILE}
    env_files: dict[str, str] = {}
    mechanisms = adapter.tuning_file_mechanisms()
    for level, name in (("mpir", MPICH_MPIR_FILE), ("posix", MPICH_POSIX_FILE)):
        if level == "posix":
            if "posix" not in trees:
                continue
            (staging / name).write_text(write_mpich_posix_json(trees["posix"].tree, rule_sets))
            files["mpich-posix"] = name
        cvar = TUNING_FILE_CVAR[level]
        if cvar not in mechanisms:
            raise TuningFileError(f"{library.name} has no {cvar}; valid mechanisms: {', '.join(mechanisms)}")
        for variable in adapter.tuning_file_env(cvar, str(staging / name)):
            env_files[variable] = name
    return files, env_files, {}


def _write_openmpi(adapter: VendorAdapter, rule_sets: Mapping[str, RuleSet],
                   staging: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    from tunempi.writers.openmpi_rules import read_openmpi_rules, write_openmpi_rules

    ids = {collective: {a.name: a.value for a in adapter.algorithms(collective)} for collective in rule_sets}
    text = write_openmpi_rules(rule_sets, ids)
    read_openmpi_rules(text)  # Open MPI would drop a bad file silently: refuse it here instead
    path = staging / OPENMPI_RULES_FILE
    path.write_text(text)
    mechanisms = adapter.tuning_file_mechanisms()
    if not mechanisms:
        raise TuningFileError(f"{adapter.library.name} offers no tuning-file mechanism")
    env_files, env = {}, {}
    for variable, value in adapter.tuning_file_env(mechanisms[0], str(path)).items():
        if value == str(path):
            env_files[variable] = OPENMPI_RULES_FILE
        else:
            env[variable] = value
    return {"openmpi-rules": OPENMPI_RULES_FILE}, env_files, env


def smoke_points(rule_sets: Mapping[str, RuleSet]) -> list[tuple[str, int]]:
    """Sizes on both sides of every bound of every rule set the probe can run."""
    return [(c, size) for c, rule_set in sorted(rule_sets.items()) if c in PROBE_COLLECTIVES
            for size in probe_points(rule_set)]


def _refuse_restricted(library: MPILibrary, adapter: VendorAdapter, rule_sets: Mapping[str, RuleSet]) -> None:
    """TuningFileError if a rule selects an algorithm the file cannot restrict to the calls it is correct
    for (tune.job.file_exclusions; e.g. an older manifest, or a selection made elsewhere)."""
    from tunempi.tune.job import file_exclusions

    for collective, rule_set in rule_sets.items():
        excluded = file_exclusions(library, adapter, collective)
        for algorithm in rule_set.algorithms():
            if algorithm in excluded:
                raise TuningFileError(f"{library.name}: a tuning file must not select {collective} {algorithm}: "
                                      f"{excluded[algorithm]}")


def write_tuning_files(
    out_dir: Path,
    library: MPILibrary,
    adapter: VendorAdapter,
    rule_sets: Mapping[str, RuleSet],
    *,
    smoke_ranks: Iterable[int] = (2,),
    smoke: bool = True,
    smoke_timeout_s: float = 120.0,
) -> WrittenFiles:
    """Write, smoke-check at every size in `smoke_ranks`, then move the files into `out_dir`.

    TuningFileError when writing fails or the library rejects a file; `out_dir` is then untouched.
    """
    _refuse_restricted(library, adapter, rule_sets)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out_dir))
    try:
        if library.vendor == "mpich":
            files, env_files, env = _write_mpich(library, adapter, rule_sets, staging)
        elif library.vendor == "openmpi":
            files, env_files, env = _write_openmpi(adapter, rule_sets, staging)
        else:
            raise TuningFileError(f"no tuning-file writer for vendor {library.vendor!r}")
        env_text = write_env_file(rule_sets, adapter.force_env, title=f"tunempi tuning for {library.name}")
        (staging / ENV_FILE).write_text(env_text.text)
        staged_env = {**env, **{k: str(staging / v) for k, v in env_files.items()}}
        records: list[SmokeRecord] = []
        if smoke:
            points = smoke_points(rule_sets)
            run_env = {**adapter.launch_env(), **adapter.single_node_env(), **staged_env}
            for ranks in sorted(set(smoke_ranks)):
                result = smoke_check(library, run_env, points, ranks=ranks, timeout=smoke_timeout_s)
                records.append(SmokeRecord(ranks, result.ok, result.argv, len(points), result.summary()))
                if not result.ok:
                    raise TuningFileError(f"{library.name} rejected the tuning files at {ranks} ranks: "
                                          f"{result.summary()}")
        for name in [*files.values(), ENV_FILE]:
            (staging / name).replace(out_dir / name)
        return WrittenFiles(files=files, env_files=env_files, env=env, env_file=ENV_FILE,
                            needs_file=env_text.needs_file, smoke=tuple(records))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
