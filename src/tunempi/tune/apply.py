"""Applying a tuning directory to a command (`tunempi run`, verify): the library it was tuned for, files
the library will accept, and a command line whose ranks run that library.

Every check here runs before anything is launched: a directory tuned for one library runs silently
untuned under another (Open MPI ignores MPICH's variables and the reverse), and MPICH aborts at MPI_Init
with "Internal error" on a corrupt selection file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from tunempi.errors import UsageError
from tunempi.launch import launcher_for_argv, own_launcher
from tunempi.launch.launchers import OpenMPILauncher, SrunLauncher
from tunempi.launch.layout import JobLayout, job_layout
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import VendorAdapter
from tunempi.rules import DEFAULT_ALGORITHM, INTERPOLATED, LIBRARY, RuleSet
from tunempi.rules.ruleset import EXTENDED
from tunempi.tune.manifest import Manifest


def tuning_library(manifest: Manifest, mpi: str | None = None) -> MPILibrary:
    """The library a tuning directory applies to: `mpi` if given, else the one it was tuned with; UsageError
    unless its fingerprint is the directory's (another library, version or rebuild)."""
    from tunempi.mpi.discovery import resolve_library

    recorded = manifest.library
    # The mpicc, not the prefix: Debian's MPICH and Open MPI share the prefix /usr.
    spec = mpi or recorded.mpicc or recorded.prefix
    try:
        library = resolve_library(spec)
    except UsageError as exc:
        raise UsageError(f"{manifest.directory} was tuned for {recorded.name} at {recorded.prefix}, "
                         f"which is not usable here ({exc}); give --mpi with that library") from None
    if library.fingerprint != recorded.fingerprint:
        raise UsageError(
            f"{manifest.directory} was tuned for {recorded.name} ({recorded.fingerprint}), not "
            f"{library.name} ({library.fingerprint}, {library.prefix}): its files would be ignored or "
            f"misread; give --mpi with the library it was tuned for, or tune again for this one")
    return library


def check_tuning_files(manifest: Manifest, library: MPILibrary) -> None:
    """UsageError if a file is missing or one the library would reject or abort on (read back strictly)."""
    from tunempi.mpi.discovery import adapter_for

    missing = manifest.missing_files()
    if missing:
        raise UsageError(f"{manifest.directory}: files named in the manifest are missing: {', '.join(missing)}")
    adapter = adapter_for(library)
    # Compositions have a reader of their own (Open MPI's is an env file, not a rules file).
    readers = [(manifest.files, adapter.read_back_tuning_file),
               (manifest.compositions.files, adapter.read_back_composition_file)]
    for files, read_back in readers:
        for role, name in files.items():
            path = manifest.directory / name
            try:
                read_back(path)
            except (UsageError, UnicodeDecodeError) as exc:
                raise UsageError(f"{path} ({role}) is corrupt: {exc}; {library.name} would abort or ignore it. "
                                 f"Write it again with `tunempi tune --out {manifest.directory}`") from None


def command_for_library(argv: Sequence[str], library: MPILibrary) -> tuple[list[str], dict[str, str]]:
    """`argv` with a bare mpiexec/mpirun made `library`'s own, and the variables its launcher needs (as root,
    Open MPI's permission to run); UsageError when the command names another MPI's launcher.

    srun and commands that start no launcher (a singleton program, a script) are taken as they are.
    """
    argv = own_launcher(argv, library)
    if not argv:
        raise UsageError("no command given; usage: tunempi run --tuning DIR -- mpiexec -n 8 ./app")
    launcher = launcher_for_argv(argv, library)
    if launcher is None or isinstance(launcher, SrunLauncher):
        return argv, {}
    found = shutil.which(argv[0])
    if found is None:
        raise UsageError(f"command not found: {argv[0]}")
    if os.path.realpath(found) != os.path.realpath(library.mpiexec):
        raise UsageError(
            f"{argv[0]} ({os.path.realpath(found)}) is not the launcher of {library.name}, which the tuning "
            f"is for: its ranks would run another MPI, untuned. Start the command with a bare `mpiexec` "
            f"(tunempi then uses {library.mpiexec}) or with that path")
    if isinstance(launcher, OpenMPILauncher) and launcher.as_root:
        return argv, dict(OpenMPILauncher.ROOT_ENV)
    return argv, {}


def layout_words(ranks: int, nodes: int, ppn: int) -> str:
    return f"{ranks} ranks on {nodes} node{'s' if nodes != 1 else ''}" + (f" ({ppn} per node)" if nodes > 1 else "")


def _measured_layouts(manifest: Manifest) -> list[tuple[int, int, int]]:
    return sorted({(scale[0], scale[1], scale[2]) for scale in manifest.scales if len(scale) >= 3})


def measured_layouts_words(manifest: Manifest) -> str:
    """The layouts the tuning measured, in words ("" for none): what the lines on bounds name."""
    return "; ".join(layout_words(*scale) for scale in _measured_layouts(manifest))


def _tuned_sets(manifest: Manifest) -> dict[str, RuleSet]:
    return {c: rule_set for c, rule_set in manifest.rule_sets.items()
            if set(rule_set.algorithms()) != {DEFAULT_ALGORITHM}}


def _nodes_measured_near(measured: Sequence[tuple[int, int, int]], ranks: int) -> list[int]:
    """Node counts measured at `ranks`, else at the measured sizes just below and above it."""
    same = [nodes for size, nodes, _ in measured if size == ranks]
    if same:
        return same
    below = max((size for size, _, _ in measured if size < ranks), default=None)
    above = min((size for size, _, _ in measured if size > ranks), default=None)
    return [nodes for size, nodes, _ in measured if size in (below, above)]


def left_to_library(manifest: Manifest, layout: JobLayout, adapter: VendorAdapter) -> dict[str, tuple[str, ...]]:
    """collective -> its variables that `run` leaves out of this job: the library's files cannot leave an
    unmeasured size to its own choice (`VendorAdapter.unbounded_selection_env`: Intel MPI's strings, Open
    MPI's libnbc values), and the job's
    layout lies outside what the collective's rules measured or interpolated (issue 57).

    Outside: its rank count gets the library's own choice in the rule set's coverage; or, its node count
    known, no layout measured at that size (between two measured sizes: at either neighbour) has as few or as
    many nodes, i.e. it lies beyond the node counts measured there. A line that does not say its ranks is
    not judged: the files are exported as they are.
    """
    if layout.ranks is None:
        return {}
    ranks = layout.ranks
    near = _nodes_measured_near(_measured_layouts(manifest), ranks)
    off_nodes = layout.nodes is not None and bool(near) and not min(near) <= layout.nodes <= max(near)
    left: dict[str, tuple[str, ...]] = {}
    for collective, rule_set in sorted(_tuned_sets(manifest).items()):
        variables = adapter.unbounded_selection_env(collective)
        basis = next((c.basis for c in rule_set.coverage() if c.contains(ranks)), LIBRARY)
        if variables and (basis == LIBRARY or off_nodes):
            left[collective] = variables
    return left


def unbounded_env(manifest: Manifest, adapter: VendorAdapter) -> tuple[str, ...]:
    """The tuning's variables whose rules act at every communicator size (`VendorAdapter.unbounded_selection_env`:
    Intel MPI's strings, Open MPI's libnbc values): what `run` leaves out of a job off the measured layouts,
    and a module always."""
    names = {name for collective in manifest.rule_sets for name in adapter.unbounded_selection_env(collective)}
    return tuple(sorted(names & set(manifest.activation_env())))


def every_size_line(manifest: Manifest, names: Sequence[str]) -> str:
    """What `run --print-env` says of `unbounded_env` printed with no launch line to judge."""
    tuned = measured_layouts_words(manifest) or "no layout"
    them = "it" if len(names) == 1 else "them"
    return (f"{', '.join(names)} act{'s' if len(names) == 1 else ''} at every communicator size, measured or not "
            f"(this library cannot bound {them}); give the job's launch line after -- to have {them} left out of a "
            f"job outside the layouts measured ({tuned})")


def left_out_line(manifest: Manifest, layout: JobLayout, left: dict[str, tuple[str, ...]]) -> str:
    """The one line that says which variables `left_to_library` left out of the job, and why."""
    variables = ", ".join(v for names in left.values() for v in names)
    tuned = measured_layouts_words(manifest) or "no layout"
    nodes = layout.nodes
    job = f"{layout.ranks} ranks" + (f" on {nodes} node{'s' if nodes != 1 else ''}" if nodes is not None else "")
    return (f"{variables} not exported: the job ({job}) lies outside the layouts {', '.join(left)} measured "
            f"({tuned}), and this library's files cannot leave other sizes to it: it keeps its own choice for "
            f"every call of them in this job, sub-communicators included")


def command_left_to_library(manifest: Manifest, command: Sequence[str], library: MPILibrary
                            ) -> tuple[dict[str, tuple[str, ...]], str]:
    """`left_to_library` for a launch line (compare applies a tuning as `run` does), with its line ('' where
    nothing is left out)."""
    from tunempi.mpi.discovery import adapter_for

    layout = job_layout(command, library)
    left = left_to_library(manifest, layout, adapter_for(library))
    return left, left_out_line(manifest, layout, left) if left else ""


def layout_notes(manifest: Manifest, layout: JobLayout, adapter: VendorAdapter) -> tuple[list[str], list[str]]:
    """What `run` says of the job's layout against the layouts the tuning measured: (notes, warnings).

    The files act only at the communicator sizes measured, interpolated between two that agree (issue 57):
    a job outside them still runs, with the library's own choice on MPI_COMM_WORLD, and is told so. Where
    the library's files cannot bound themselves, `run` leaves their variables out (`left_to_library`): one
    line names them.
    """
    measured = _measured_layouts(manifest)
    tuned = measured_layouts_words(manifest) or "no layout"
    notes = [f"the job: {layout.text()}; the tuning measured {tuned}"]
    left = left_to_library(manifest, layout, adapter)
    tuned_sets = {c: rule_set for c, rule_set in _tuned_sets(manifest).items() if c not in left}
    warnings: list[str] = []
    if left:
        warnings.append(left_out_line(manifest, layout, left))
    if layout.ranks is None or not tuned_sets:
        if tuned_sets:
            unbounded = [c for c in tuned_sets if adapter.unbounded_selection_env(c)]
            notes.append("the launch line does not say how many ranks: the tuned rules act only at the "
                         "communicator sizes `tunempi report` shows" + (
                             f" ({', '.join(unbounded)}: at every communicator size, measured or not: this "
                             f"library cannot bound them; give -n to have them left out off those sizes)"
                             if unbounded else ""))
        return notes, warnings
    ranks = layout.ranks
    # what the library cannot bound (Intel's strings, Open MPI's libnbc values) was left out above off the
    # measured layouts: what is left acts where its rules measured or interpolated, as the bounded ones
    basis = {collective: next(c.basis for c in rule_set.coverage() if c.contains(ranks))
             for collective, rule_set in tuned_sets.items()}
    outside = sorted(c for c, how in basis.items() if how == LIBRARY)
    if outside:
        warnings.append(f"{ranks} ranks lies outside what the tuning measured ({tuned}): {', '.join(outside)} "
                        f"run the library's own choice on MPI_COMM_WORLD; communicators of a measured size keep "
                        f"the tuned rules")
    between = sorted(c for c, how in basis.items() if how == INTERPOLATED)
    if between:
        notes.append(f"{ranks} ranks lies between measured sizes: {', '.join(between)} take the rules both "
                     f"neighbours measured alike, the library's own choice where they differ")
    # above the largest measured size, an extension policy's rules (issue 57 part 2): outside what was measured
    extended = {c: next(r.policy for r in tuned_sets[c].coverage() if r.contains(ranks))
                for c, how in basis.items() if how == EXTENDED}
    for policy in sorted(set(extended.values())):
        named = sorted(c for c, p in extended.items() if p == policy)
        warnings.append(f"{ranks} ranks lies above what the tuning measured ({tuned}): {', '.join(named)} take "
                        f"the rules the extension policy {policy} kept from the largest measured sizes, the "
                        f"library's own choice where it kept none")
    same_size = [scale for scale in measured if scale[0] == ranks]
    other_nodes = layout.nodes is not None and all(scale[1] != layout.nodes for scale in same_size)
    # MPICH's files key a size on processes per node where its layouts measured different winners
    # (comm_avg_ppn<=N: ceil(ranks / nodes) <= N); a ppn not measured there gets the library's own choice
    by_ppn = {c: rule_set.measured_ppns(ranks) for c, rule_set in tuned_sets.items()
              if rule_set.measured_ppns(ranks)}
    if same_size and other_nodes and layout.nodes:
        ppn = -(-ranks // layout.nodes)
        spans = f"this job spans {layout.nodes} node{'s' if layout.nodes != 1 else ''}"
        measured_as = '; '.join(layout_words(*s) for s in same_size)
        own = sorted(c for c, ppns in by_ppn.items() if ppn in ppns)
        if own:
            notes.append(f"{ranks} ranks on {layout.nodes} nodes average {ppn} per node: {', '.join(own)} take the "
                         f"rules measured at {ppn} per node")
        left_alone = sorted(c for c, ppns in by_ppn.items() if ppn not in ppns)
        if left_alone:
            warnings.append(f"{ranks} ranks were measured as {measured_as}, {spans} ({ppn} per node): "
                            f"{', '.join(left_alone)} key this size on processes per node and run the library's "
                            "own choice at a ppn not measured")
        if not by_ppn or set(tuned_sets) - set(by_ppn):
            warnings.append(f"{ranks} ranks were measured as {measured_as}, {spans}: the files tell "
                            f"communicator sizes apart, not layouts, so the rules measured there act here unmeasured")
    return notes, warnings
