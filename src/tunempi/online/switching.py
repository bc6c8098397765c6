"""How each algorithm is selected at run time, from the vendor adapter (the only place cvars are known).

Algorithm 0 of every collective is the library's default: the algorithm cvar (and any extra cvar) at
the value it had when the run started ("orig"), i.e. exactly what the run would do untouched. Every
other algorithm is `adapter.runtime_switch(collective, name)`: its cvar write, plus the extra writes
that make it effective (MPICH on one node: the POSIX-level cvar to `mpir`, else release_gather takes
bcast/reduce/barrier/allreduce over after a few calls and the algorithm cvar is ignored).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.mpi.vendor import VendorAdapter
from tunempi.online.state import SWITCHABLE, AlgorithmSwitch, CollectiveSwitch

_log = logging.getLogger(__name__)

#: Algorithms that only work on communicators of a given size (they return an error otherwise,
#: measured for Open MPI's two_proc variants: "two_proc" forced on 4 ranks fails the call).
RANKS_ONLY: dict[str, int] = {"two_proc": 2}


def collective_switches(adapter: VendorAdapter, collectives: Iterable[str]) -> list[CollectiveSwitch]:
    """The switches of the requested collectives the library can switch (others skipped with a warning)."""
    out = []
    for collective in collectives:
        if collective not in SWITCHABLE:
            _log.warning("%s cannot be switched online (ranks see different sizes); skipped", collective)
            continue
        if collective not in adapter.collectives() or not adapter.algorithms(collective):
            _log.warning("%s has no selectable algorithms in %s; skipped", collective, adapter.library.name)
            continue
        algorithms: list[AlgorithmSwitch] = []
        cvars: list[str] = []
        chosen = []
        for algorithm in adapter.algorithms(collective):
            switch = adapter.runtime_switch(collective, algorithm.name)
            writes = ((switch.cvar, switch.value), *switch.also)
            for cvar, _ in writes:
                if cvar not in cvars:
                    cvars.append(cvar)
            chosen.append((algorithm.name, writes, switch.needs_new_communicator))
        needs_new = any(needs for _, _, needs in chosen)
        algorithms.append(AlgorithmSwitch(DEFAULT_ALGORITHM, tuple((cvar, "orig") for cvar in cvars)))
        for name, writes, _ in chosen:
            algorithms.append(AlgorithmSwitch(name, tuple(writes), RANKS_ONLY.get(name, 0)))
        out.append(CollectiveSwitch(collective, needs_new, tuple(algorithms)))
    return out
