"""Selection -> rule sets -> the library's tuning files, smoke-checked in the real library before they count.

The vendor adapter writes its library's files (adapter.write_tuning_files: what they are and how they are
activated is its business) into a staging directory next to the output; tune/smoke.py loads them into the
real library (a short, checked run at every tuned communicator size, probing both sides of every rule
bound), and only then are they moved into place. A file the library rejects or crashes on is never left as
the result: `write_tuning_files` raises TuningFileError and the output directory keeps whatever it held
before. Beside them: an env file forcing the collectives that use one algorithm everywhere (the simple
alternative).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.errors import TuningFileError
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import TuningFiles, VendorAdapter
from tunempi.rules import (
    RuleSet,
    ScaledChoice,
    SelectionTable,
    build_rule_sets,
    check_equivalent,
)
from tunempi.rules.ruleset import Extension
from tunempi.space import Cell
from tunempi.tune.manifest import SmokeRecord
from tunempi.tune.smoke import PROBE_COLLECTIVES, probe_points, smoke_check
from tunempi.writers.env_file import write_env_file

ENV_FILE = "tuning.env"

__all__ = ["ENV_FILE", "SmokeRecord", "TuningFileError", "WrittenFiles", "extensions_for", "files_rule_sets",
           "rule_sets_for",
           "selection_table",
           "one_choice_per_scale", "smoke_points", "whole_collectives", "write_tuning_files"]


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
        return TuningFiles(self.files, self.env_files, self.env).activation_env(directory)


def whole_collectives(selection: Mapping[Cell, str], adapter: VendorAdapter,
                      medians: Mapping[tuple[Cell, str], float | None] | None = None) -> dict[Cell, str]:
    """The selection as the library's files can hold it. Where selecting any size of a collective replaces
    the library's own choice at every size (adapter.files_keep_library_choice_elsewhere() false: Intel MPI), a
    collective that keeps the default at some cells and not at others cannot be written as it is: each of its
    default cells takes the algorithm measured fastest there when that was measured no slower than the
    default (`medians`: (cell, algorithm) -> median us); if one cannot, the whole collective keeps the
    library's default, so no cell is left to a choice nobody measured."""
    if adapter.files_keep_library_choice_elsewhere():
        return dict(selection)
    by_cell: dict[Cell, list[tuple[float, str]]] = {}
    for (cell, algorithm), us in (medians or {}).items():
        if algorithm != DEFAULT_ALGORITHM and us is not None:
            by_cell.setdefault(cell, []).append((us, algorithm))
    defaults_us = {cell: us for (cell, algorithm), us in (medians or {}).items() if algorithm == DEFAULT_ALGORITHM}
    whole = dict(selection)
    for collective in sorted({cell.collective for cell in selection}):
        cells = [cell for cell in selection if cell.collective == collective]
        defaults = [cell for cell in cells if selection[cell] == DEFAULT_ALGORITHM]
        if not defaults or len(defaults) == len(cells):
            continue
        fills: dict[Cell, str] = {}
        for cell in defaults:
            default_us = defaults_us.get(cell)
            best = min(((us, algorithm) for us, algorithm in by_cell.get(cell, [])
                        if adapter.tuning_file_exclusion(collective, algorithm) is None), default=None)
            if best is None or default_us is None or best[0] > default_us:
                fills = {}
                break
            fills[cell] = best[1]
        if fills:
            whole.update(fills)
        else:
            whole.update({cell: DEFAULT_ALGORITHM for cell in cells})
    return whole


def one_choice_per_scale(selection: Mapping[Cell, str], adapter: VendorAdapter,
                         medians: Mapping[tuple[Cell, str], float | None] | None = None) -> dict[Cell, str]:
    """The selection as the library's files can hold it where they cannot choose by message size
    (adapter.selects_by_size false: alltoallv): at each layout whose sizes select different algorithms, one
    algorithm for every size of it, the one measured no slower than the default at any of its sizes with the
    lowest geometric mean of its medians (`medians`: (cell, algorithm) -> median us); where none is, or
    nothing was measured, the library's default. Where the files cannot choose by communicator size either
    (adapter.selects_by_communicator_size false: Open MPI's non-blocking collectives), the same for all of the
    collective's cells at once: the best single value."""
    fixed = dict(selection)
    groups: dict[tuple[str, tuple[int, int, int] | None], list[Cell]] = {}
    for cell in selection:
        if not adapter.selects_by_size(cell.collective):
            scale = cell.scale if adapter.selects_by_communicator_size(cell.collective) else None
            groups.setdefault((cell.collective, scale), []).append(cell)
    known = {key: us for key, us in (medians or {}).items() if us is not None and us > 0}
    for (collective, _), cells in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1] or ())):
        if len({selection[cell] for cell in cells}) == 1:
            continue
        candidates = {algorithm for cell in cells for c, algorithm in known if c == cell}
        best: tuple[float, str] | None = None
        for algorithm in sorted(candidates - {DEFAULT_ALGORITHM}):
            if adapter.tuning_file_exclusion(collective, algorithm) is not None:
                continue
            times = [known.get((cell, algorithm)) for cell in cells]
            defaults = [known.get((cell, DEFAULT_ALGORITHM)) for cell in cells]
            if any(t is None for t in times) or any(d is not None and t is not None and t > d
                                                    for t, d in zip(times, defaults, strict=True)):
                continue
            score = sum(math.log(t) for t in times if t is not None) / len(times)
            if best is None or score < best[0]:
                best = (score, algorithm)
        choice = best[1] if best is not None else DEFAULT_ALGORITHM
        fixed.update({cell: choice for cell in cells})
    return fixed


def selection_table(selection: Mapping[Cell, str], *, preferred_ppn: int | None = None,
                    by_ppn: bool = False) -> SelectionTable:
    """The strategy's cell -> algorithm map as a rules table (layouts of one size agree, see from_scaled; with
    `by_ppn`, adapter.selects_by_ppn(), layouts of one size with different winners keep their own)."""
    return SelectionTable.from_scaled(
        (ScaledChoice(c.collective, c.nodes, c.ppn, c.msg_bytes, algorithm) for c, algorithm in selection.items()),
        preferred_ppn=preferred_ppn, by_ppn=by_ppn,
    )


def extensions_for(selection: Mapping[Cell, str], medians: Mapping[tuple[Cell, str], float | None],
                   adapter: VendorAdapter, policy: str | None = None) -> dict[str, Extension]:
    """Per collective, what the extension policy (`sim.extend.EXTENSION_POLICY` unless `policy`) names above
    its largest measured communicator size (issue 57 part 2), from the selection and every median measured
    (the default's and the other algorithms' too): a winner only where the policy keeps it, the library's
    choice elsewhere. With
    one measured node count the policy names the default everywhere (nothing above is extended). None for a
    collective whose files cannot hold a choice by message size and communicator size, nor where the files
    replace the library's choice at every size (Intel MPI): there the sizes above stay the library's own."""
    from tunempi.sim.extend import EXTENSION_POLICY, Evidence, extend  # lazily: sim brings numpy

    policy = policy or EXTENSION_POLICY
    if not adapter.files_keep_library_choice_elsewhere():
        return {}
    extensions: dict[str, Extension] = {}
    for collective in sorted({cell.collective for cell in selection}):
        if not adapter.selects_by_size(collective) or not adapter.selects_by_communicator_size(collective):
            continue
        cells = [cell for cell in selection if cell.collective == collective]
        # Only the selection is carried beyond the measured sizes (a cell where tune kept the default has no
        # winner: Evidence), but its gain over the default is read from every median measured, where it was
        # not selected too: at the second-largest node count and the neighbouring sizes. With only the
        # selection's and the default's medians, `smoothed` missed issue 57's goal on 10-11 of the 20 Peak rows
        # replayed at <= 128 ranks, against 2-3 so (docs/measurements/strategies.md, "The evidence tune
        # gives the policy").
        cell_set = set(cells)
        evidence = Evidence({(cell, a): us for (cell, a), us in medians.items() if cell in cell_set and us is not None},
                            selection={cell: selection[cell] for cell in cells})
        top = max(cells, key=lambda cell: (cell.ranks, cell.nodes))
        # The policy reads only the measured cells of the same message size; the target's layout beyond them
        # (twice the largest) names no size the rules are bound to: they act at every size above.
        beyond = [Cell(collective, top.ranks * 2, top.nodes * 2, top.ppn, size)
                  for size in sorted({cell.msg_bytes for cell in cells if cell.ranks == top.ranks})]
        picks = extend(policy, evidence, beyond)
        extensions[collective] = Extension(policy, tuple((cell.msg_bytes, picks[cell]) for cell in beyond))
    return extensions


def rule_sets_for(table: SelectionTable, extensions: Mapping[str, Extension] | None = None) -> dict[str, RuleSet]:
    """Minimal, complete rule sets; proven to pick the table's algorithm at every table point. `extensions`
    (extensions_for): the rules above each collective's largest measured size."""
    rule_sets = build_rule_sets(table, extensions)
    check_equivalent(table, rule_sets)
    return rule_sets


def files_rule_sets(selection: Mapping[Cell, str], adapter: VendorAdapter,
                    medians: Mapping[tuple[Cell, str], float | None], *, preferred_ppn: int | None = None
                    ) -> dict[str, RuleSet]:
    """The rule sets a selection's files hold, as tune, verify's rewrite and catalog build write them: layouts of
    one size with different winners kept apart where the library's files key on processes per node
    (adapter.selects_by_ppn: MPICH), else collapsed (`preferred_ppn`, else the fullest nodes); above the largest
    measured size what the extension policy keeps (extensions_for)."""
    table = selection_table(selection, preferred_ppn=preferred_ppn, by_ppn=adapter.selects_by_ppn())
    return rule_sets_for(table, extensions_for(selection, medians, adapter))


def smoke_points(rule_sets: Mapping[str, RuleSet]) -> list[tuple[str, int]]:
    """Sizes on both sides of every bound of every rule set the probe can run."""
    return [(c, size) for c, rule_set in sorted(rule_sets.items()) if c in PROBE_COLLECTIVES
            for size in probe_points(rule_set)]


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
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out_dir))
    try:
        written = adapter.write_tuning_files(rule_sets, staging)
        files, env_files, env = dict(written.files), dict(written.env_files), dict(written.env)
        env_text = write_env_file(rule_sets, adapter.force_env, title=f"tunempi tuning for {library.name}")
        (staging / ENV_FILE).write_text(env_text.text)
        staged_env = written.activation_env(staging)
        records: list[SmokeRecord] = []
        if smoke:
            points = smoke_points(rule_sets)
            run_env = {**adapter.launch_env(), **adapter.single_node_env(), **staged_env}
            for ranks in sorted(set(smoke_ranks)):
                result = smoke_check(library, run_env, points, ranks=ranks, timeout=smoke_timeout_s,
                                     ignored_by_library=adapter.ignored_by_library)
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
