"""The profile reader, `tunempi profile show` and the `--` command parsing (no MPI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tunempi.cli.main import app
from tunempi.errors import UsageError
from tunempi.profile.reader import load_profile


def sample() -> dict[str, Any]:
    def coll(name: str, size: int, lo: int, hi: int, calls: int, time_ns: int, exact: Any) -> dict[str, Any]:
        return {"collective": name, "blocking": not name.startswith("i"), "comm_size": size, "nodes": 1,
                "ppn": size, "size_lo": lo, "size_hi": hi, "ranks": size, "calls": calls,
                "bytes": calls * hi, "time_ns": time_ns, "time_min_ns": 10, "time_max_ns": 900,
                "exact_sizes": exact}

    return {
        "schema": "tunempi-profile", "schema_version": 1,
        "header": {"library": "MPICH Version: 5.0.2\nMPICH Device: ch4:ucx", "command": ["./app", "-x"],
                   "ranks": 2, "nodes": 1, "hosts": {"n1": 2}, "settings": {"TUNEMPI_PROFILE_OUT": "p.json"},
                   "thread_level": "single", "started": "init"},
        "ranks": [
            {"rank": r, "host": "n1", "wall_ns": 1_000_000, "mpi_ns": 400_000, "collective_ns": 300_000,
             "p2p_ns": 50_000, "collective_calls": 30, "send_calls": 3} for r in range(2)],
        "totals": {"wall_ns": 2_000_000, "mpi_ns": 800_000, "collective_ns": 600_000, "p2p_ns": 100_000},
        "collectives": [
            coll("allreduce", 2, 5, 8, 20, 200_000, {"8": 20}),
            coll("allreduce", 2, 2049, 4096, 6, 300_000, {"3000": 2, "4000": 4}),
            coll("bcast", 2, 65, 128, 10, 100_000, None),
        ],
        "p2p_histogram": {"upper_bounds": [2048, 4096, 8192, 16384, 32768, 65536, None],
                          "calls": [5, 2, 0, 0, 0, 0, 1], "bytes": [300, 6000, 0, 0, 0, 0, 70000]},
    }


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return path


def test_load_profile_and_shares(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, sample()))
    assert profile.wall_s == pytest.approx(2e-3)
    assert profile.mpi_fraction == pytest.approx(0.4)
    assert profile.elapsed_s == pytest.approx(1e-3)
    assert profile.time_by_collective() == [("allreduce", 26, pytest.approx(5e-4)), ("bcast", 10, pytest.approx(1e-4))]
    assert [b.label for b in profile.p2p][:2] == ["<= 2KiB", "2KiB - 4KiB"]
    assert profile.p2p[-1].label == "> 64KiB" and profile.p2p[-1].bytes == 70000


def test_usage_splits_exact_sizes_and_falls_back_to_the_bucket(tmp_path: Path) -> None:
    rows = load_profile(write(tmp_path, sample())).usage()
    by_size = {(r.collective, r.msg_size): r for r in rows}
    assert by_size[("allreduce", 3000)].calls == 2
    assert by_size[("allreduce", 3000)].time_s == pytest.approx(1e-4)  # 2 of 6 calls of 300 us
    assert by_size[("allreduce", 4000)].time_s == pytest.approx(2e-4)
    assert by_size[("bcast", 128)].calls == 10  # no exact sizes: the bucket's upper bound


@pytest.mark.parametrize(
    ("change", "message"),
    [({"schema": "other"}, "not a tunempi profile"), ({"schema_version": 99}, "schema version 99")],
)
def test_load_profile_rejects_other_files(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_profile(write(tmp_path, {**sample(), **change}))


def test_load_profile_rejects_garbage_and_missing(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_profile(tmp_path / "bad.json")
    with pytest.raises(UsageError, match="cannot read"):
        load_profile(tmp_path / "absent.json")
    broken = sample()
    del broken["collectives"][0]["calls"]
    with pytest.raises(UsageError, match="malformed"):
        load_profile(write(tmp_path, broken))


def test_show_prints_where_the_time_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tunempi.cli.profile as cli_profile

    monkeypatch.setattr(cli_profile, "_out", Console(width=200))
    result = CliRunner().invoke(app, ["profile", "show", str(write(tmp_path, sample())), "--ranks"])
    assert result.exit_code == 0, result.output
    assert "time in MPI: 40.0%" in result.output
    assert "3000B, 4000B" in result.output
    assert "> 64KiB" in result.output
    assert "Per rank" in result.output


def test_profile_without_a_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["profile", "-o", "x.json"])
    assert isinstance(result.exception, UsageError)


def test_profile_passes_everything_after_dashes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import tunempi.mpi.discovery as discovery
    import tunempi.profile.run as run_module

    seen: dict[str, Any] = {}
    monkeypatch.setattr(discovery, "resolve_library", lambda spec: seen.setdefault("spec", spec))
    out = write(tmp_path, sample())

    def fake_run(argv: list[str], library: Any, output: Path) -> run_module.ProfileRun:
        seen["argv"], seen["output"] = argv, output
        return run_module.ProfileRun(0, Path(output), True)

    monkeypatch.setattr(run_module, "run_profiled", fake_run)
    result = CliRunner().invoke(
        app, ["profile", "-o", str(out), "--mpi", "openmpi", "--", "show", "-n", "4", "--", "x"])
    assert result.exit_code == 0, result.output
    # "show" after -- is the program to run, not the subcommand; a second -- belongs to the program
    assert seen == {"spec": "openmpi", "argv": ["show", "-n", "4", "--", "x"], "output": out}


def test_version_2_counts_calls_by_count_shape_and_version_1_reads_without(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tunempi.profile.reader import dominant_shape

    data = sample()
    data["schema_version"] = 2
    row = dict(data["collectives"][2], collective="alltoallv", size_lo=129, size_hi=256)
    data["collectives"] += [
        {**row, "count_shapes": {"uniform": 2, "skewed": 1, "sparse": 5}},
        {**row, "size_lo": 257, "size_hi": 512, "count_shapes": {"uniform": 0, "skewed": 4, "sparse": 0}},
        {**row, "collective": "gatherv", "count_shapes": {"uniform": 3, "skewed": 3, "sparse": 0}},
        {**row, "collective": "allgatherv"},  # no call classified (e.g. on intercommunicators only)
    ]
    profile = load_profile(write(tmp_path, data))
    assert profile.count_shapes() == {"alltoallv": {"uniform": 2, "skewed": 5, "sparse": 5},
                                      "gatherv": {"uniform": 3, "skewed": 3, "sparse": 0}}
    # most calls win; a tie goes to uniform before skewed before sparse
    assert profile.dominant_shapes() == {"alltoallv": "skewed", "gatherv": "uniform"}
    assert dominant_shape({"uniform": 0, "skewed": 0, "sparse": 0}) is None
    assert dominant_shape({"sparse": 1}) == "sparse"

    import tunempi.cli.profile as cli_profile

    monkeypatch.setattr(cli_profile, "_out", Console(width=200))
    shown = CliRunner().invoke(app, ["profile", "show", str(write(tmp_path, data))])
    assert shown.exit_code == 0, shown.output
    line = next(text for text in shown.output.splitlines() if "│ alltoallv" in text and "skewed" in text)
    assert [cell.strip() for cell in line.split("│")[2:6]] == ["2", "5", "5", "skewed"]

    old = load_profile(write(tmp_path, sample()))  # version 1: read, nothing classified
    assert old.count_shapes() == {} and all(r.count_shapes is None for r in old.collectives)
    shown = CliRunner().invoke(app, ["profile", "show", str(write(tmp_path, sample()))])
    assert shown.exit_code == 0 and "Vector collectives" not in shown.output


def test_a_rank_off_the_cpu_for_much_of_its_run_is_a_caution_on_the_shares(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MPI libraries poll while they wait: a rank on a CPU for much less than its run was descheduled, and the
    others' waiting for it counts as MPI time. show, advise and autotune's report say so; profiles from before
    the CPU time was recorded read as before, without it."""
    import tunempi.cli.profile as cli_profile
    from tunempi.profile.advise import ON_CPU_SHARE, shares_caveat

    data = sample()
    assert shares_caveat(load_profile(write(tmp_path, data))) is None  # not recorded: no claim either way
    for rank, share in ((0, 0.99), (1, 0.41)):
        data["ranks"][rank].update(cpu_ns=int(share * 1_000_000), span_ns=1_000_000)
    profile = load_profile(write(tmp_path, data))
    least = profile.least_on_cpu()
    assert least is not None and least.rank == 1 and least.on_cpu == pytest.approx(0.41)
    caveat = shares_caveat(profile)
    assert caveat is not None and caveat.startswith("rank 1 was on a CPU for 41% of its run")

    monkeypatch.setattr(cli_profile, "_out", Console(width=400))
    result = CliRunner().invoke(app, ["profile", "show", str(write(tmp_path, data))])
    assert result.exit_code == 0, result.output
    assert "caution: rank 1 was on a CPU for 41%" in result.output

    data["ranks"][1].update(cpu_ns=int(ON_CPU_SHARE * 1_000_000))  # at the bar: nothing to say
    assert shares_caveat(load_profile(write(tmp_path, data))) is None


def test_commutative_ops_only_where_every_reduction_recorded_a_commutative_op(tmp_path: Path) -> None:
    """tune --from-profile vouches for commutative operations (mpi/restrictions.COMMUTATIVE_OPS) only where
    the profile recorded every reduction's op and none was non-commutative; an older profile says nothing."""
    data = sample()
    assert not load_profile(write(tmp_path, data)).commutative_ops_only()  # version 1: ops not recorded
    for row in data["collectives"]:
        if row["collective"] == "allreduce":
            row.update(op_calls=row["calls"], noncommutative_calls=0)
    assert load_profile(write(tmp_path, data)).commutative_ops_only()
    data["collectives"][1]["noncommutative_calls"] = 1
    profile = load_profile(write(tmp_path, data))
    assert not profile.commutative_ops_only() and profile.commutative_ops_only(["bcast"])


def test_predefined_types_only_where_every_call_s_datatypes_were_seen_and_predefined(tmp_path: Path) -> None:
    """The datatype vouch (contiguous, true lower bound 0, same counts): every collective call passed predefined
    datatypes and the interposer saw every one that counted; a gather's root-only datatype it never reads."""
    data = sample()
    assert not load_profile(write(tmp_path, data)).predefined_types_only()  # not recorded
    for row in data["collectives"]:
        row.update(typed_calls=row["calls"], derived_type_calls=0)
    assert load_profile(write(tmp_path, data)).predefined_types_only()
    data["collectives"][2]["derived_type_calls"] = 1
    assert not load_profile(write(tmp_path, data)).predefined_types_only()
    data["collectives"][2].update(collective="gather", derived_type_calls=0)
    assert not load_profile(write(tmp_path, data)).predefined_types_only()


def test_each_vouched_assume_flag_names_the_profile_evidence_for_it(tmp_path: Path) -> None:
    """autotune added --assume-contiguous-datatypes --assume-same-counts --assume-commutative-ops on its own with
    no word of why (issue 58): each flag comes with what the profile recorded that vouches for it."""
    from tunempi.profile.advise import vouched_evidence

    data = sample()
    assert vouched_evidence(load_profile(write(tmp_path, data))) == {}  # nothing recorded: nothing vouched
    for row in data["collectives"]:
        row.update(typed_calls=row["calls"], derived_type_calls=0)
        if row["collective"] == "allreduce":
            row.update(op_calls=row["calls"], noncommutative_calls=0)
    profile = load_profile(write(tmp_path, data))
    found = vouched_evidence(profile)
    typed = sum(r.calls for r in profile.collectives if r.collective != "barrier")
    reductions = sum(r.calls for r in profile.collectives if r.collective == "allreduce")
    assert set(found) == {"--assume-commutative-ops", "--assume-contiguous-datatypes", "--assume-same-counts"}
    assert found["--assume-commutative-ops"] == (f"every reduction the profile recorded passed a commutative "
                                                 f"operation ({reductions} calls of allreduce)")
    assert found["--assume-same-counts"] == found["--assume-contiguous-datatypes"]
    assert found["--assume-same-counts"].startswith(f"every collective call the profile recorded passed "
                                                    f"predefined datatypes ({typed} calls of ")
