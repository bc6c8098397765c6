"""How each algorithm is selected at run time, from the vendor adapter (the only place cvars are known).

Algorithm 0 of every collective is the library's default: the algorithm cvar (and any extra cvar) at
the value it had when the run started ("orig"), i.e. exactly what the run would do untouched. Every
other algorithm is `adapter.runtime_switch(collective, name)`: its cvar write, plus the extra writes
that make it effective (MPICH on one node: the POSIX-level cvar to `mpir`, else release_gather takes
bcast/reduce/barrier/allreduce over after a few calls and the algorithm cvar is ignored).

Each algorithm carries the requirements a call must meet for it (mpi/restrictions.py, as the
interposer's bit mask): the interposer draws among the algorithms the call meets, so a non-commutative
op never runs an algorithm that is only correct for commutative ones.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tunempi.collectives import DEFAULT_ALGORITHM, ONLINE_SWITCHABLE, is_nonblocking
from tunempi.mpi.restrictions import ONLINE_NEVER, online_mask
from tunempi.mpi.vendor import VendorAdapter
from tunempi.online.state import AlgorithmSwitch, CollectiveSwitch

_log = logging.getLogger(__name__)

#: Algorithms that only work on communicators of a given size (they return an error otherwise,
#: measured for Open MPI's two_proc variants: "two_proc" forced on 4 ranks fails the call).
RANKS_ONLY: dict[str, int] = {"two_proc": 2}

#: Algorithms that call their own collective again on sub-communicators (MPICH's smp): never run with
#: the strict selection (below).
SELF_NESTING: frozenset[str] = frozenset({"smp"})


def collective_switches(adapter: VendorAdapter, collectives: Iterable[str]) -> list[CollectiveSwitch]:
    """The switches of the requested collectives the library can switch (others skipped with a warning)."""
    out = []
    for collective in collectives:
        if collective not in ONLINE_SWITCHABLE:
            _log.warning("%s cannot be switched online (ranks see different sizes); skipped", collective)
            continue
        if collective not in adapter.collectives() or not adapter.algorithms(collective):
            _log.warning("%s has no selectable algorithms in %s; skipped%s", collective, adapter.library.name,
                         " (not switched per call: its calls run the library's own choice)"
                         if is_nonblocking(collective) else "")
            continue
        if not adapter.switches_collective_at_run_time(collective):
            # Its cvar cannot be written after MPI_Init (Open MPI 5.0.11's allgatherv): a draw would run the
            # library's own choice and be recorded under the drawn name.
            _log.warning("%s cannot switch %s after MPI_Init; skipped", adapter.library.name, collective)
            continue
        algorithms: list[AlgorithmSwitch] = []
        cvars: list[str] = []
        chosen = []
        # Where the library can refuse an algorithm that does not fit the call instead of silently running
        # another (MPICH: fallback=error), every drawn algorithm switches that on for its call: the
        # interposer then reruns the call as the library's choice and records nothing under the drawn name.
        # Not for algorithms that run the SAME collective inside on the library's own sub-communicators
        # (MPICH's smp: the inner call reads the same algorithm cvar and must fall back there; with
        # fallback=error it fails half-way, after some ranks communicated: measured as a hang).
        strict = adapter.strict_selection_switch()
        strict_writes = ((strict.cvar, strict.value),) if strict is not None else ()
        for algorithm in adapter.algorithms(collective):
            switch = adapter.runtime_switch(collective, algorithm.name)
            extra = strict_writes if algorithm.name not in SELF_NESTING else ()
            writes = ((switch.cvar, switch.value), *switch.also, *extra)
            for cvar, _ in writes:
                if cvar not in cvars:
                    cvars.append(cvar)
            chosen.append((algorithm.name, writes, switch.needs_new_communicator))
        needs_new = any(needs for _, _, needs in chosen)
        algorithms.append(AlgorithmSwitch(DEFAULT_ALGORITHM, tuple((cvar, "orig") for cvar in cvars)))
        library = adapter.library
        for name, writes, _ in chosen:
            requires = online_mask(library.vendor, library.version, collective, name)
            if strict is not None and name in SELF_NESTING:
                # no strict selection for it, so a silent fallback could not be told apart: never drawn
                requires |= ONLINE_NEVER
            algorithms.append(AlgorithmSwitch(name, tuple(writes), RANKS_ONLY.get(name, 0), requires))
        out.append(CollectiveSwitch(collective, needs_new, tuple(algorithms)))
    return out
