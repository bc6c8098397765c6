"""`catalog coverage`: how much of the site's work the catalog's rules reach, weighted by node-hours.

Each job layout (nodes, ppn) is classified by the rule sets `catalog build` writes for the catalog
(build.catalog_rules, for the catalog's library: its files key on processes per node or not), as one of:
`measured` (the catalog measured that very layout and the files hold its winners), `measured at another ppn`
(its communicator size was measured at another ppn, or this layout's winners are shadowed there: the size-keyed
files act on another layout's evidence; not where the rule sets key that size on ppn, MPICH's where its layouts
measured different winners: there a ppn nobody measured is the library's default), `interpolated` (between two
measured sizes whose winners agree, RuleSet.coverage), `extended` (above the largest measured size, where the
extension policy's rules act), or `library default` (the files leave it to the library). The layouts worth tuning
next are those without measured evidence of their own with the most node-hours.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tunempi.errors import UsageError
from tunempi.rules import INTERPOLATED, MEASURED, RuleSet
from tunempi.rules.ruleset import EXTENDED

if TYPE_CHECKING:
    from tunempi.catalog.store import Catalog

MEASURED_LAYOUT, OTHER_PPN, INTERPOLATED_LAYOUT, EXTENDED_LAYOUT, DEFAULT = (
    "measured", "measured at another ppn", "interpolated", "extended", "library default")
BASES = (MEASURED_LAYOUT, OTHER_PPN, INTERPOLATED_LAYOUT, EXTENDED_LAYOUT, DEFAULT)
JOB_COLUMNS = ("nodes", "ppn", "node_hours")


@dataclass(frozen=True)
class JobLayout:
    nodes: int
    ppn: int
    node_hours: float
    jobs: int = 1

    @property
    def ranks(self) -> int:
        return self.nodes * self.ppn


@dataclass(frozen=True)
class LayoutCoverage:
    layout: JobLayout
    basis: str  # one of BASES


@dataclass(frozen=True)
class CoverageReport:
    layouts: tuple[LayoutCoverage, ...]

    def shares(self) -> dict[str, float]:
        """Each basis's share of all node-hours (0..1)."""
        total = sum(c.layout.node_hours for c in self.layouts)
        return {basis: (sum(c.layout.node_hours for c in self.layouts if c.basis == basis) / total if total else 0.0)
                for basis in BASES}

    def next_to_tune(self, count: int = 5) -> list[LayoutCoverage]:
        """The layouts without measured evidence of their own, most node-hours first."""
        open_ = [c for c in self.layouts if c.basis not in (MEASURED_LAYOUT, INTERPOLATED_LAYOUT)]
        return sorted(open_, key=lambda c: (-c.layout.node_hours, c.layout.ranks, c.layout.ppn))[:count]


def combine(layouts: Iterable[JobLayout]) -> list[JobLayout]:
    """One row per (nodes, ppn), node-hours and jobs summed."""
    found: dict[tuple[int, int], JobLayout] = {}
    for job in layouts:
        key = (job.nodes, job.ppn)
        old = found.get(key)
        found[key] = job if old is None else JobLayout(job.nodes, job.ppn, old.node_hours + job.node_hours,
                                                       old.jobs + job.jobs)
    return [found[key] for key in sorted(found)]


def read_jobs_csv(path: Path) -> list[JobLayout]:
    """A CSV with the columns nodes, ppn, node_hours (a header row; other columns ignored)."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in JOB_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise UsageError(f"{path}: missing column(s) {', '.join(missing)}; it needs {', '.join(JOB_COLUMNS)}")
            jobs = []
            for number, row in enumerate(reader, start=2):
                try:
                    job = JobLayout(int(row["nodes"]), int(row["ppn"]), float(row["node_hours"]))
                except (TypeError, ValueError):
                    raise UsageError(f"{path}:{number}: nodes and ppn must be whole numbers and node_hours a "
                                     f"number, got {row['nodes']!r}, {row['ppn']!r}, {row['node_hours']!r}") from None
                if job.nodes < 1 or job.ppn < 1 or job.node_hours < 0:
                    raise UsageError(f"{path}:{number}: nodes and ppn must be >= 1 and node_hours >= 0")
                jobs.append(job)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return combine(jobs)


def classify(job: JobLayout, measured_layouts: Iterable[tuple[int, int, int]],
             rule_sets: Mapping[str, RuleSet]) -> str:
    """How the built rules reach the job's communicator (MPI_COMM_WORLD: nodes x ppn ranks)."""
    if (job.ranks, job.nodes, job.ppn) in set(measured_layouts):
        return MEASURED_LAYOUT
    bases: set[str] = set()
    for rule_set in rule_sets.values():
        ppns = rule_set.measured_ppns(job.ranks)
        if ppns and job.ppn not in ppns:
            continue  # a size the files key on ppn (MPICH): the library's own choice at a ppn not measured
        bases |= {c.basis for c in rule_set.coverage() if c.contains(job.ranks)}
    if MEASURED in bases:
        return OTHER_PPN
    if INTERPOLATED in bases:
        return INTERPOLATED_LAYOUT
    return EXTENDED_LAYOUT if EXTENDED in bases else DEFAULT


def coverage(jobs: Iterable[JobLayout], measured_layouts: Iterable[tuple[int, int, int]],
             rule_sets: Mapping[str, RuleSet]) -> CoverageReport:
    measured = list(measured_layouts)
    return CoverageReport(tuple(LayoutCoverage(job, classify(job, measured, rule_sets)) for job in combine(jobs)))


def catalog_coverage(catalog: Catalog, jobs: Iterable[JobLayout], *, mpi: str | None = None) -> CoverageReport:
    """The coverage of `jobs` by the files `catalog build` would write for `catalog` (its library, `mpi` if given,
    must be usable here: whether its files key on processes per node decides what they hold)."""
    from tunempi.catalog.build import catalog_library, catalog_rules

    if not catalog.entries:
        return coverage(jobs, [], {})
    _, adapter = catalog_library(catalog, mpi)
    rules = catalog_rules(catalog.entries, adapter)
    return coverage(jobs, rules.measured_layouts(), rules.rule_sets)
