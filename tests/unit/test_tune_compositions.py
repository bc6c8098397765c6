"""`tunempi tune`'s composition step below the engine: the choice rule (the margin over the library's
default, unavailable compositions never chosen, Open MPI's one choice for all collectives), the manifest
record and its activation, and the read-back routing of composition files (fakes only at the adapter)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.openmpi import COMPOSITION_ENV, OpenMPIAdapter
from tunempi.mpi.vendor import Algorithm
from tunempi.report.tuning import composition_line, composition_lines
from tunempi.tune import apply
from tunempi.tune.compositions import (
    COMPOSITION_MARGIN,
    DEFAULT,
    CompositionChoice,
    CompositionResult,
    choose_composition,
    choose_compositions,
)
from tunempi.tune.job import composition_scale, composition_sizes
from tunempi.tune.manifest import MANIFEST_NAME, CompositionRecord, CompositionsRecord, Manifest
from tunempi.tune.scope import Scale

SIZES = (4, 512, 65536)


def _ran(collective: str, name: str, *medians: float | None, status: str = "ok") -> list[CompositionResult]:
    return [CompositionResult(collective, size, name, status if median is None else "ok", median)
            for size, median in zip(SIZES, medians, strict=True)]


def _unavailable(collective: str, name: str) -> list[CompositionResult]:
    return [CompositionResult(collective, size, name, "unavailable", reason="not usable") for size in SIZES]


def test_the_margin_is_five_percent_of_the_defaults_total() -> None:
    assert COMPOSITION_MARGIN == 0.05
    default = _ran("allreduce", DEFAULT, 10.0, 20.0, 70.0)  # 100 us in all
    close = choose_composition("allreduce", default + _ran("allreduce", "beta", 9.0, 19.0, 68.0))  # 96: 4 %
    assert close.chosen is None and close.best == "beta" and close.best_us == 96.0 and close.default_us == 100.0
    assert "not faster than the default by 5%" in close.reason
    clear = choose_composition("allreduce", default + _ran("allreduce", "beta", 9.0, 19.0, 66.0))  # 94: 6 %
    assert clear.chosen == "beta" and "6% faster" in clear.reason
    slower = choose_composition("allreduce", default + _ran("allreduce", "beta", 20.0, 40.0, 90.0))
    assert slower.chosen is None and slower.best == "beta"


def test_an_unavailable_or_partly_failed_composition_is_never_chosen() -> None:
    results = (_ran("allreduce", DEFAULT, 10.0, 20.0, 70.0) + _unavailable("allreduce", "gamma")
               + _ran("allreduce", "alpha", 1.0, 1.0, None, status="failed")  # fastest where it ran
               + _ran("allreduce", "beta", 5.0, 10.0, 40.0))
    choice = choose_composition("allreduce", results)
    assert choice.chosen == "beta" and choice.best == "beta"
    nothing = choose_composition("allreduce", _ran("allreduce", DEFAULT, 1.0, 1.0, 1.0)
                                 + _unavailable("allreduce", "alpha") + _unavailable("allreduce", "gamma"))
    assert nothing == CompositionChoice("allreduce", None, "no composition ran at every size (none usable here)",
                                        default_us=3.0)
    no_default = choose_composition("allreduce", _ran("allreduce", DEFAULT, 1.0, None, 1.0, status="failed")
                                    + _ran("allreduce", "beta", 1.0, 1.0, 1.0))
    assert no_default.chosen is None and "default did not run" in no_default.reason


def _han_tuned(collective: str, tuned_total: float) -> list[CompositionResult]:
    return (_ran(collective, DEFAULT, 10.0, 20.0, 70.0) + _ran(collective, "han", 10.0, 20.0, 70.0)
            + _ran(collective, "tuned", 10.0, 20.0, tuned_total - 30.0))


def test_one_choice_for_all_collectives_only_where_every_collective_chose_it() -> None:
    split = {"allreduce": _han_tuned("allreduce", 80.0), "bcast": _han_tuned("bcast", 99.0)}
    per_collective = choose_compositions(split)
    assert per_collective["allreduce"].chosen == "tuned" and per_collective["bcast"].chosen is None
    together = choose_compositions(split, applies_to_all=True)
    assert all(choice.chosen is None for choice in together.values())
    assert "one composition for all collectives" in together["allreduce"].reason
    assert "allreduce tuned, bcast default" in together["allreduce"].reason
    assert together["bcast"] == per_collective["bcast"]  # its own reason stands
    both = choose_compositions({"allreduce": _han_tuned("allreduce", 80.0), "bcast": _han_tuned("bcast", 90.0)},
                               applies_to_all=True)
    assert {c: choice.chosen for c, choice in both.items()} == {"allreduce": "tuned", "bcast": "tuned"}


def test_the_largest_multi_node_scale_and_three_sizes() -> None:
    assert composition_scale([Scale(1, 2), Scale(1, 4)]) is None
    assert composition_scale([Scale(1, 2), Scale(2, 1), Scale(2, 2)]) == Scale(2, 2)
    assert composition_sizes([4, 8, 16, 32, 64]) == (4, 16, 64)
    assert composition_sizes([4, 8]) == (4, 8) and composition_sizes([4]) == (4,) and composition_sizes([]) == ()


def _record(chosen: str | None) -> CompositionRecord:
    results = _ran("allreduce", DEFAULT, 10.0, 20.0, 70.0) + _unavailable("allreduce", "gamma") \
        + _ran("allreduce", "beta", 5.0, 10.0, 40.0)
    return CompositionRecord("allreduce", (2, 2, 1), tuple(results), choose_composition("allreduce", results)
                             if chosen else CompositionChoice("allreduce", None, "kept"))


def _manifest(directory: Path, compositions: CompositionsRecord) -> Manifest:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "mpich-mpir.json").write_text("{}")
    return Manifest.from_dict(directory, {
        "kind": "tunempi-tuning", "version": 1, "library": {"name": "mpich-5.0.2", "fingerprint": "f"},
        "files": {"mpich-mpir": "mpich-mpir.json"}, "env_files": {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE":
                                                                  "mpich-mpir.json"},
        "compositions": compositions.to_dict()})


def test_the_manifest_records_compositions_round_trips_and_activates_their_file(tmp_path: Path) -> None:
    record = CompositionsRecord(margin=0.05, sizes=SIZES, collectives=(_record("beta"),),
                                files={"mpich-ch4": "mpich-ch4.json"},
                                env_files={"MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE": "mpich-ch4.json"})
    manifest = _manifest(tmp_path, record)
    assert manifest.compositions == record and record.chosen() == {"allreduce": "beta"}
    manifest.save()
    assert Manifest.load(tmp_path) == manifest
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    stored = data["compositions"]["collectives"][0]
    assert stored["layout"] == [2, 2, 1] and stored["choice"]["chosen"] == "beta"
    assert {(r["composition"], r["status"]) for r in stored["results"]} == {
        (DEFAULT, "ok"), ("gamma", "unavailable"), ("beta", "ok")}
    env = manifest.activation_env()
    assert env["MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE"] == str((tmp_path / "mpich-ch4.json").resolve())
    assert "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE" in env
    assert manifest.missing_files() == ["mpich-ch4.json"]  # composition files are checked to exist too
    # verify rewrites the algorithm files' fields: the composition's activation is kept apart from them
    rewritten = dataclasses.replace(manifest, files={}, env_files={}, env={})
    assert "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE" in rewritten.activation_env()
    assert "allreduce compositions at 2 nodes x 1 (2 ranks)" in composition_lines(manifest)[0]
    line = composition_line(record.collectives[0])
    assert "default 10.0/20.0/70.0 us, beta 5.0/10.0/40.0 us" in line and "not run: gamma (unavailable)" in line
    assert "chose beta" in line


def test_a_manifest_without_compositions_reads_as_none_measured(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, CompositionsRecord())
    data = manifest.to_dict()
    del data["compositions"]
    loaded = Manifest.from_dict(tmp_path, data)
    assert loaded.compositions == CompositionsRecord() and composition_lines(loaded) == []
    assert Manifest.from_dict(tmp_path, {**data, "compositions": None}).compositions == CompositionsRecord()


class _Adapter:
    """Records which reader each file went to."""

    def __init__(self) -> None:
        self.read: list[tuple[str, str]] = []

    def read_back_tuning_file(self, path: Path) -> None:
        self.read.append(("tuning", path.name))

    def read_back_composition_file(self, path: Path) -> None:
        self.read.append(("composition", path.name))
        if path.read_text() == "bad":
            raise UsageError("not a component choice")


def test_run_checks_read_composition_files_with_the_composition_reader(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import tunempi.mpi.discovery

    fake = _Adapter()
    monkeypatch.setattr(tunempi.mpi.discovery, "adapter_for", lambda library: fake)
    (tmp_path / "openmpi-compositions.env").write_text("export OMPI_MCA_coll='^han'\n")
    manifest = _manifest(tmp_path, CompositionsRecord(files={"openmpi-compositions": "openmpi-compositions.env"},
                                                      env={"OMPI_MCA_coll": "^han"}))
    library = _openmpi().library
    apply.check_tuning_files(manifest, library)
    assert fake.read == [("tuning", "mpich-mpir.json"), ("composition", "openmpi-compositions.env")]
    (tmp_path / "openmpi-compositions.env").write_text("bad")
    with pytest.raises(UsageError, match=r"openmpi-compositions.env \(openmpi-compositions\) is corrupt"):
        apply.check_tuning_files(manifest, library)
    (tmp_path / "openmpi-compositions.env").unlink()
    with pytest.raises(UsageError, match="missing: openmpi-compositions.env"):
        apply.check_tuning_files(manifest, library)


def _openmpi() -> OpenMPIAdapter:
    prefix = Path("/nonexistent/openmpi")
    library = MPILibrary(vendor="openmpi", version="5.0.11", version_string="", device="", prefix=prefix,
                         mpicc=prefix / "bin" / "mpicc", mpiexec=prefix / "bin" / "mpiexec")
    return OpenMPIAdapter(library, {"allreduce": [Algorithm("ring", 4)]})


def test_openmpi_reads_back_the_component_choice_it_writes(tmp_path: Path) -> None:
    adapter = _openmpi()
    assert adapter.composition_applies_to_all()
    for name in COMPOSITION_ENV:
        choices = {c: next(x for x in adapter.composition_candidates(c, 2) if x.name == name)
                   for c in ("allreduce", "bcast")}
        written = adapter.write_composition_file(choices, tmp_path)
        adapter.read_back_composition_file(tmp_path / written.files["openmpi-compositions"])
    path = tmp_path / "bad.env"
    for text in ("export OMPI_MCA_coll=^tuned\n", "OMPI_MCA_coll=^han\n", "export OMPI_MCA_coll='^han\n"):
        path.write_text(text)
        with pytest.raises(UsageError):
            adapter.read_back_composition_file(path)
