"""Extension policies beyond a tuning's measured scales (issue 57, part 2): what each picks where, and the
guarantee of the library's policy on the shipped Peak sweeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tunempi.errors import UsageError
from tunempi.sim import (
    EXTENSION_POLICY,
    Evidence,
    Oracle,
    Prediction,
    ReplayBackend,
    extend,
    load_frame,
    simulate,
)
from tunempi.sim.synthetic import synthetic_frame
from tunempi.space import Cell

D = "default"


def _cell(nodes: int, size: int) -> Cell:
    return Cell("bcast", 2 * nodes, nodes, 2, size)


def _evidence(node_counts: tuple[int, ...] = (1, 2, 4)) -> Evidence:
    """Medians at 2 ppn on 1, 2 and 4 nodes (4 and 2 are the two largest), three sizes:

    8 B: a wins at 2 and 4 nodes, 1.5x then 2x faster than the default (a gain that grows).
    64 B: a wins at 2 and 4 nodes, but its gain over the default shrinks from 1.5x to 1.2x.
    1024 B: a wins at 2 nodes, b at 4 nodes, only 2 % faster than the default there.
    """
    table = {
        1: {8: {"a": 9, "b": 9.5, D: 9}, 64: {"a": 9, "b": 18, D: 9}, 1024: {"a": 30, "b": 35, D: 30}},
        2: {8: {"a": 10, "b": 11, D: 15}, 64: {"a": 10, "b": 20, D: 15}, 1024: {"a": 40, "b": 45, D: 60}},
        4: {8: {"a": 10, "b": 12, D: 20}, 64: {"a": 10, "b": 20, D: 12}, 1024: {"a": 60, "b": 50, D: 51}},
    }
    return Evidence({(_cell(n, size), algorithm): value for n in node_counts
                     for size, values in table[n].items() for algorithm, value in values.items()})


TARGETS = [_cell(8, 8), _cell(8, 64), _cell(8, 1024), _cell(8, 4096)]  # 4096 B: measured nowhere


def _picks(policy: str, evidence: Evidence | None = None, **kwargs: Any) -> list[str]:
    table = extend(policy, evidence or _evidence(), TARGETS, **kwargs)
    return [table[c] for c in TARGETS]


def test_default_and_last_winner_carried_up() -> None:
    assert _picks("default") == [D, D, D, D]
    # The winner at the largest measured node count (4), same size; a size not measured keeps the default.
    assert _picks("last") == ["a", "a", "b", D]


def test_held_keeps_a_winner_only_where_it_won_at_the_two_largest_node_counts() -> None:
    assert _picks("held") == ["a", "a", D, D]


def test_gaining_keeps_a_winner_only_where_it_beats_the_default_by_5_percent_and_its_gain_holds() -> None:
    # 8 B: gain 1.5 -> 2.0 (kept); 64 B: 1.5 -> 1.2 (shrinks: default); 1024 B: b 1.02x (under 5 %: default).
    assert _picks("gaining") == ["a", D, D, D]


def test_smoothed_judges_a_winners_gain_over_its_size_and_the_neighbouring_sizes() -> None:
    """At 4 nodes a beats the default 2x at 8 and 32 B and by 3 % at 16 B; at 2 nodes by 1.5x at all three.
    gaining looks at one cell: 16 B is under its 5 % (default), 8 B grew (a). smoothed looks at the size and
    one measured size each side (geometric mean): 16 B's neighbourhood gains 1.60x at 4 nodes against 1.5x
    (a), 8 B's 1.44x (it shrank: default); the same fixture as the others gives gaining's picks."""
    table = {2: {8: 15.0, 16: 15.0, 32: 15.0}, 4: {8: 20.0, 16: 10.3, 32: 20.0}}
    evidence = Evidence({key: value for n, sizes in table.items() for size, default in sizes.items()
                         for key, value in (((_cell(n, size), "a"), 10.0), ((_cell(n, size), D), default))})
    targets = [_cell(8, 8), _cell(8, 16), _cell(8, 32)]
    assert [extend("gaining", evidence, targets)[c] for c in targets] == ["a", D, "a"]
    assert [extend("smoothed", evidence, targets)[c] for c in targets] == [D, "a", D]
    assert _picks("smoothed") == _picks("gaining") == ["a", D, D, D]
    assert _picks("smoothed", _evidence(node_counts=(1,))) == [D, D, D, D]  # one node count: nothing extended


def test_the_tunings_selection_and_estimates_stand_in_where_it_measured_less() -> None:
    """A strategy measures contenders only: its selection names the winner, its estimate the latency of an
    algorithm it did not measure; a measured median still wins over an estimate."""
    top, below = _cell(4, 1024), _cell(2, 1024)
    medians = {key: v for key, v in _evidence().medians.items() if key not in ((top, "a"), (below, "a"))}
    # 1024 B: the tuning selected a at 2 and 4 nodes, estimated 2x / 1.25x faster than the measured default.
    evidence = Evidence(medians, selection={top: "a", below: "a"},
                        estimates={(top, "a"): 25.5, (below, "a"): 48.0, (top, "b"): 1.0})
    assert evidence.winner(top) == "a" and evidence.latency(top, "b") == 50  # measured, not the estimate
    assert _picks("held", evidence)[2] == "a" and _picks("gaining", evidence)[2] == "a"
    assert _picks("gaining")[2] == D  # measured only: b wins at 4 nodes by 2 %


def test_with_one_measured_node_count_held_and_gaining_extend_nothing() -> None:
    """One node's evidence says nothing of how a winner scales across nodes: the library keeps its own."""
    one_node = _evidence(node_counts=(1,))
    for policy in ("held", "gaining"):
        assert _picks(policy, one_node) == [D, D, D, D]
    assert _picks("last", one_node) == ["a", "a", "a", D]


def test_model_and_agree_follow_the_prediction_and_its_uncertainty() -> None:
    mean = {(TARGETS[0], "a"): 2.0, (TARGETS[0], "b"): 1.0,  # the model says b where a won: agree keeps default
            (TARGETS[1], "a"): 1.0, (TARGETS[1], "b"): 2.0,  # a by 1.0 log units, std 0.1 each: clear
            (TARGETS[2], "a"): 3.1, (TARGETS[2], "b"): 3.0}  # b by 0.1 < hypot(0.1, 0.1): within its doubt
    prediction = Prediction(mean, {key: 0.1 for key in mean})
    assert _picks("model", prediction=prediction) == ["b", "a", "b", D]
    assert _picks("agree", prediction=prediction) == [D, "a", D, D]
    assert _picks("model") == [D, D, D, D]  # no model: nothing predicted


def test_strategy_policy_takes_the_strategys_selection_and_unknown_policies_are_refused() -> None:
    assert _picks("strategy", strategy_choice={TARGETS[1]: "b"}) == [D, "b", D, D]
    with pytest.raises(UsageError, match="unknown extension policy 'bogus'"):
        extend("bogus", _evidence(), TARGETS)


@pytest.mark.parametrize("which", ["peak", "pr7730"])
def test_library_policy_trained_on_one_node_is_the_default_in_every_cell_above(
        which: str, peak_dataset: Path, peak_pr7730_dataset: Path) -> None:
    """The guarantee by construction: trained on <= 32 ranks (one node of Peak), the library's policy names
    the default in every cell at 64-512 ranks of every collective, so its slowdown there is the default's,
    cell for cell (the same medians: no float order can move it)."""
    frame = load_frame(peak_dataset if which == "peak" else peak_pr7730_dataset)
    for collective in sorted(frame["collective"].unique()):
        backend = ReplayBackend(frame, collective, seed=1)
        evidence = Evidence.from_records([*backend.prior_records(32), *backend.default_records(32)])
        assert evidence.node_counts == [1]
        oracle = Oracle(backend, above_ranks=32)
        picks = extend(EXTENSION_POLICY, evidence, oracle.cells)
        assert set(picks.values()) == {D}, collective
        scored = oracle.slowdowns_with_default(picks)
        measured = np.isfinite(oracle.default_us) & oracle.known
        assert np.array_equal(scored[measured], oracle.default_slowdowns()[measured]), collective


@pytest.mark.parametrize("which", ["peak", "pr7730"])
def test_policies_are_scored_only_where_the_sweep_knows_the_best(
        which: str, peak_dataset: Path, peak_pr7730_dataset: Path) -> None:
    """Above 32 ranks every cell of both Peak files has its oracle, except PR 7730's alltoall at 512 ranks,
    where the sweep ran `linear` alone: there no pick is scored (not even the default), so an extension of
    another algorithm is not charged linear's time as if it were its own."""
    frame = load_frame(peak_dataset if which == "peak" else peak_pr7730_dataset)
    for collective in sorted(frame["collective"].unique()):
        oracle = Oracle(ReplayBackend(frame, collective, seed=0), above_ranks=32)
        unknown = [c for c, known in zip(oracle.cells, oracle.known, strict=True) if not known]
        if which == "pr7730" and collective == "alltoall":
            assert unknown and {c.ranks for c in unknown} == {512}
            assert set(oracle.cells) - set(unknown) >= {c for c in oracle.cells if c.ranks < 512}
            elsewhere = [c for c in oracle.cells if c.ranks < 512 and c.msg_bytes == 16]
            scored = oracle.slowdowns_with_default(
                {c: "modified_bruck" for c in oracle.cells} | {c: D for c in elsewhere})
            assert np.isnan(scored[~oracle.known]).all()
            assert np.isfinite(scored[[oracle.cells.index(c) for c in elsewhere]]).all()
        else:
            assert not unknown, collective


def test_simulate_scores_policies_above_the_training_ranks() -> None:
    summaries, traces = simulate(synthetic_frame(), "allreduce", ["tunempi"], seeds=2, max_ranks=8,
                                 prior_max_ranks=8, policies=("default", "last", "gaining"))
    figures = summaries[0]["policies"]
    assert list(figures) == ["default", "last", "gaining"]
    default = figures["default"]
    assert default["mean"] == pytest.approx(default["default_mean"]) and default["slower_share"] == 0.0
    assert default["cells"] == 16  # 16 and 32 ranks x 8 sizes
    worst = figures["last"]["worst"]
    assert worst["ranks"] > 8 and worst["vs_default"] == pytest.approx(worst["slowdown"] / worst["default_slowdown"])
    # Cells at <= 8 ranks are not scored.
    inside = [i for i, c in enumerate(Oracle(ReplayBackend(synthetic_frame(), "allreduce"),
                                             above_ranks=8).cells) if c.ranks <= 8]
    assert not inside and np.isfinite(traces["tunempi"][0].policy_slowdowns["last"]).all()


def _app() -> typer.Typer:
    from tunempi.cli import simulate as simulate_cli

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """tunempi (test stand-in: a callback keeps `simulate` a subcommand)."""

    simulate_cli.register(app)
    return app


def test_cli_policy_table_json_and_usage_errors(tmp_path: Path) -> None:
    from tunempi.errors import UsageError as Usage
    from tunempi.store.dataset import DatasetRow, write_dataset

    frame = synthetic_frame(ranks=(2, 4, 8, 16, 32), msg_sizes=(4, 64, 1024))
    path = tmp_path / "synthetic.csv.gz"
    write_dataset((DatasetRow(system="synthetic", library="none", **row) for row in frame.to_dict("records")),
                  path)
    runner = CliRunner()
    base = ["simulate", "--dataset", str(path), "--seeds", "1", "--train-max-ranks", "8"]
    table = runner.invoke(_app(), [*base, "--policy", "all"])
    assert table.exit_code == 0, table.output
    assert f"{EXTENSION_POLICY} (the library's)" in table.stdout and "held" in table.stdout
    data = json.loads(runner.invoke(_app(), [*base, "--policy", "default,held", "--format", "json"]).stdout)
    assert list(data[0]["policies"]) == ["default", "held"] and data[0]["evaluated_above_ranks"] == 8
    for args, message in ((["--policy", "bogus"], "unknown policy bogus"),):
        bad = runner.invoke(_app(), [*base, *args])
        assert isinstance(bad.exception, Usage) and message in str(bad.exception)
    no_train = runner.invoke(_app(), ["simulate", "--dataset", str(path), "--policy", "all"])
    assert isinstance(no_train.exception, Usage) and "--train-max-ranks" in str(no_train.exception)
