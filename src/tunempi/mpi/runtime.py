"""Run-time parameters of a library: which names exist, how values reach the ranks, an automatic space.

A run-time parameter is one of
- an MPI_T control variable the library reports (MPICH `MPIR_CVAR_...`, Open MPI MCA names such as
  `btl_sm_eager_limit`; the Open MPI environment spelling `OMPI_MCA_btl_sm_eager_limit` is accepted too);
- a UCX knob (`UCX_...`), for libraries that use UCX (names asked from UCX itself, mpi/ucx.py).

Settable means "can be given at launch": every cvar whose scope is not `constant`. Open MPI reports
many MCA parameters as `readonly` (MPI_T cannot change them after MPI_Init) but reads them from the
environment at start (measured: OMPI_MCA_btl_sm_eager_limit=8192 reads back 8192 through MPI_T), so
they are settable here.

`check_parameters` rejects unknown or constant names before anything runs, naming close matches.
The spelling of each value (env var name, boolean form) is the vendor adapter's
`parameter_env(name, value)`. The curated list of name patterns worth tuning is each adapter's
(`MpichAdapter.TUNABLES`, `OpenMPIAdapter.TUNABLES`); search/auto_space.py turns it into a space.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tunempi.errors import UsageError
from tunempi.mpi.discovery import LibraryInfo
from tunempi.mpi.ucx import ucx_knobs
from tunempi.mpi.vendor import VendorAdapter

UCX_PREFIX = "UCX_"


@dataclass(frozen=True)
class RuntimeParameters:
    """Every run-time parameter name of one library, with what is known about each."""

    library_name: str
    cvars: Mapping[str, dict]        # MPI_T name -> probe record (datatype, scope, value, enum, description)
    ucx: Mapping[str, str]           # UCX_NAME -> default ({} when the library does not use UCX)

    @classmethod
    def of(cls, info: LibraryInfo, adapter: VendorAdapter) -> RuntimeParameters:
        knobs = ucx_knobs(info.library) if adapter.uses_ucx() else {}
        return cls(info.library.name, {c["name"]: c for c in info.cvars}, knobs)

    def settable(self, name: str) -> bool:
        record = self.cvars.get(name)
        return record is not None and record.get("scope") != "constant"

    def known_names(self) -> list[str]:
        return [n for n in self.cvars if self.settable(n)] + list(self.ucx)


def check_parameters(names: Iterable[str], params: RuntimeParameters, adapter: VendorAdapter) -> None:
    """UsageError (exit 2) listing every name the library does not have, or cannot take at launch."""
    problems: list[str] = []
    known = params.known_names()
    for name in names:
        canonical = adapter.canonical_parameter(name)
        if canonical.startswith(UCX_PREFIX):
            if not params.ucx:
                problems.append(f"{name}: {params.library_name} does not use UCX")
            elif canonical not in params.ucx:
                problems.append(f"{name}: not a UCX knob{_close(canonical, params.ucx)}")
            continue
        record = params.cvars.get(canonical)
        if record is None:
            problems.append(f"{name}: {params.library_name} has no such control variable{_close(canonical, known)}")
        elif record.get("scope") == "constant":
            problems.append(f"{name}: a constant of {params.library_name} (scope constant), it cannot be set")
    if problems:
        raise UsageError("unknown run-time parameter(s), checked against the library before any run:\n  "
                         + "\n  ".join(problems))


def _close(name: str, candidates: Iterable[str]) -> str:
    pool = list(candidates)
    matches = difflib.get_close_matches(name, pool, n=4, cutoff=0.6)
    if not matches:  # a misspelt word inside a long name: try the names sharing the most words
        words = set(name.lower().split("_"))
        scored = sorted(pool, key=lambda c: -len(words & set(c.lower().split("_"))))
        matches = [c for c in scored[:3] if words & set(c.lower().split("_"))]
    return f"; close matches: {', '.join(matches)}" if matches else ""
