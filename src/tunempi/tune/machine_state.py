"""The machine's state across launches (issue 39): compare launches only where the machine was the same.

On the VMs of this project, transfers between cores were 4x slower for seconds at a time while each core
alone kept its speed (docs/measurements/tune.md "Two tunes, and a machine with two speeds"), and the fastest
algorithm differs between the two states: MPICH's default bcast loses to binomial at 16-256 KiB in the slow
state and beats it in the fast one. A verify whose launches all met the slow state kept binomial (1.97x), the
next one, in the fast state, sent it back (0.79x), so two tunes wrote different files.

Every point the bench engine measures carries a probe taken just before it (`PointReply.probe_us`: the
fastest one-way time of a 256 KiB ping-pong between the first and the last rank). The machine's **reference
state** is the fastest seen (the tune's own points and the verifying launches): a launch is in it when its
probe is within `STATE_RATIO` of the fastest, and verify judges a rule by the launches in it, waiting for the
machine to come back to it when none were (verify_run.py), so two tunes judge their rules on the same machine
whatever state each met first.

Inside that band the probe reads two states, about 25 and about 44 us: in the rarer 25 the bulk ping-pong is
faster but small collectives ran 1.2-1.4x slower than at 44 (2026-11-28). Launches compared with each other
(verify's pair, the default's and the contenders' launches of one of tune's deciding blocks) must have met one
state (`same_state`, within `SAME_STATE_RATIO`): a block whose default launch met 44 and whose contender
launch met 25 read a 1.5x alltoall gain as a tie. A launch's probe for that is the median of its points'
(`launch_probes`), the state it spent its points in.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

#: Launches whose probes differ by more than this met the machine in different states. The probe's states
#: read 40-60 and 120-170 us here (2026-11-28, 200 launches, a loaded machine; the bcast default 4x apart),
#: and a rarer third about 25 us (a tune's fastest point; its verify's launches then read 1.9x that): 2.5
#: keeps those two together and the slow one 3x apart.
STATE_RATIO = 2.5
#: Two launches compared with each other met one state where their probes are within this: the launches'
#: median probes read 25-26, 42-48 and 120-170 us here (2026-11-28), 1.4 keeps each together and the three
#: apart (44/25 = 1.76).
SAME_STATE_RATIO = 1.4
#: A launch whose median probe is above this times its fastest was disturbed (launch_probes).
STEADY_RATIO = 1.5
#: How long tune's deciding launches and verify wait, at most, for the machine to come back to its fastest
#: state where fewer than two launches (pairs) of a layout met it (the slow state lasted 2-30 s here), and
#: the pause between tries.
STATE_WAIT_S = 30.0
STATE_PAUSE_S = 2.0


def launch_probes(probes: Iterable[tuple[K, float | None]]) -> dict[K, float]:
    """launch key -> the median of its points' probes, for the launches whose probes were steady (points
    without one left out; launches without any, or unsteady, are absent: their state is unknown).

    The median: the state the launch spent its points in (a launch at 44 us can read one point at 36, and
    the band's two states are 1.76x apart). Steady: with three points or more, the median within
    `STEADY_RATIO` of the fastest. In one state the probes of a launch are that close (42-48 us, with three
    busy loops beside it as without); where other jobs' ranks take turns on the cores they spread (44 to
    1,388 us in one launch), and a launch that changed state half-way reads both: such a launch says
    nothing about its state."""
    found: dict[K, list[float]] = {}
    for key, probe in probes:
        if probe is not None and probe > 0:
            found.setdefault(key, []).append(probe)
    return {key: statistics.median(values) for key, values in found.items() if steady(values)}


def steady(probes: Sequence[float]) -> bool:
    """A launch's probes that tell its state (launch_probes)."""
    return len(probes) < 3 or statistics.median(probes) <= STEADY_RATIO * min(probes)


def takes_turns(ranks_on_cores: int, cores: int | None = None) -> bool:
    """More ranks on a node's cores (ranks_sharing_cores) than it has (None: this process's CPUs): they take
    turns on the cores."""
    return ranks_on_cores > (cores if cores is not None else len(os.sched_getaffinity(0)))


def ranks_sharing_cores(ranks: int, ranks_per_node: int, emulated: bool) -> int:
    """The ranks of a layout that share one set of cores: a node's, or every rank where the nodes are emulated
    on this one machine (launch/cluster.py). 2 emulated nodes x 2 and 4 x 1 put 4 ranks on 2 cores: their probe
    read the turns (a quiet machine's tunes there added 1-3 blocks for the machine's state in three of four
    rounds, docs/measurements/tune.md "Plan, quiet"), as one node's 4 ranks do."""
    return ranks if emulated else ranks_per_node


def layout_takes_turns(ranks: int, ranks_per_node: int, emulated: bool = False, cores: int | None = None) -> bool:
    """A layout's ranks take turns on the cores they share (ranks_sharing_cores, takes_turns)."""
    return takes_turns(ranks_sharing_cores(ranks, ranks_per_node, emulated), cores)


def usable_probe(probe: float | None, ranks_on_cores: int, cores: int | None = None) -> float | None:
    """The probe where it says something about the machine: None where the layout's ranks take turns on the
    cores (the probe reads the turns: Open MPI at 4 ranks on 2 cores read launches 6x apart with no change of
    state) or where there is none."""
    if probe is None or probe <= 0 or takes_turns(ranks_on_cores, cores):
        return None
    return probe


def same_state(a: float | None, b: float | None, ratio: float = SAME_STATE_RATIO) -> bool:
    """Two probes of one state (unknown ones are taken as the same: an engine without the probe)."""
    if a is None or b is None:
        return True
    return max(a, b) <= ratio * min(a, b)


def in_reference(probe: float | None, reference: float | None, ratio: float = STATE_RATIO) -> bool:
    """A launch in the machine's reference (fastest) state; True where either is unknown."""
    if probe is None or reference is None:
        return True
    return probe <= ratio * reference


@dataclass(frozen=True)
class StatesMet:
    """What verify's launch pairs met: how many were in the reference state of their layout, how many in one
    other state, how many mixed (the two launches in different states), and the slowest launch's probe over
    its layout's reference."""

    reference_pairs: int = 0
    other_pairs: int = 0
    mixed_pairs: int = 0
    slowest_ratio: float = 1.0

    @property
    def changed(self) -> bool:
        return self.other_pairs > 0 or self.mixed_pairs > 0

    def to_dict(self) -> dict:
        return {"reference_pairs": self.reference_pairs, "other_pairs": self.other_pairs,
                "mixed_pairs": self.mixed_pairs, "slowest_ratio": round(self.slowest_ratio, 3)}

    @classmethod
    def from_dict(cls, data: Mapping) -> StatesMet:
        return cls(int(data.get("reference_pairs", 0)), int(data.get("other_pairs", 0)),
                   int(data.get("mixed_pairs", 0)), float(data.get("slowest_ratio", 1.0)))

    def line(self) -> str:
        """What verify prints when the machine changed speed under it ("" when it did not)."""
        if not self.changed:
            return ""
        return (f"the machine changed speed during verify (cross-core probe up to {self.slowest_ratio:.1f}x its "
                f"fastest): rules judged on the {self.reference_pairs} launch pair(s) in the fastest state; "
                f"{self.other_pairs} in a slower state only veto a rule slower there; {self.mixed_pairs} pair(s) "
                "whose two launches met different states left out")
