"""Intel MPI's adapter without the library: the catalog from MPI_T descriptions as 2021.19.0 prints them,
the selection strings (writers/impi_adjust.py) and the tuning file read back strictly. The real library:
tests/integration/test_impi_mpi.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.errors import MPIError, TuningFileError, UsageError
from tunempi.mpi import impi
from tunempi.mpi.discovery import parse_version_string
from tunempi.mpi.library import MPILibrary, wrapper_env
from tunempi.rules.ruleset import CommBlock, MsgRule, RuleSet
from tunempi.writers.impi_adjust import UNBOUNDED, read_adjust_value, select_preset, write_adjust_value

# Verbatim shapes of 2021.19.0's MPI_T (the string cvar carries the I_MPI_ name as an alias).
CVARS = [
    {"name": "MPIR_CVAR_USE_ALLREDUCE", "datatype": "char",
     "description": "Control selection of MPI_Allreduce algorithm presets.$ Arguments$ <presetid> - Preset "
                    "identifier$ range: 0-32 @Alias:# I_MPI_ADJUST_ALLREDUCE @Default:# -1"},
    {"name": "MPIR_CVAR_USE_ALLREDUCE_COMPOSITION", "datatype": "char",
     "description": "range: 0-10 @Verbosity:# expert @Alias:# I_MPI_ADJUST_ALLREDUCE_COMPOSITION"},
    {"name": "MPIR_CVAR_USE_ALLGATHER", "datatype": "char",
     "description": "Control selection of MPI_Allgather algorithm presets.$ range: 0-6 @Alias:# "
                    "I_MPI_ADJUST_ALLGATHER @Default:# -1"},
    {"name": "I_MPI_ADJUST_BCAST", "datatype": "char", "description": "range: 0-22"},  # an older spelling
    {"name": "MPIR_CVAR_SHM_EAGER", "datatype": "int", "value": 4096,
     "description": "@Alias:# I_MPI_SHM_EAGER_THRESHOLD"},
]


def adapter(version: str = "2021.19.0", tmp: Path = Path("/opt/impi")) -> impi.IntelMPIAdapter:
    library = MPILibrary("impi", version, f"Intel(R) MPI Library {version} for Linux* OS", "", tmp,
                         tmp / "bin" / "mpicc", tmp / "bin" / "mpiexec")
    catalog, defaults = impi.catalog_from_cvars(CVARS, version)
    return impi.IntelMPIAdapter(library, catalog, defaults, [c["name"] for c in CVARS],
                                aliases=impi.aliases(CVARS))


def test_the_version_string_names_intel_mpi_and_not_mpich():
    assert parse_version_string("Intel(R) MPI Library 2021.19.0 for Linux* OS\n") == ("impi", "2021.19.0", "")
    assert parse_version_string("MVAPICH2 Version: 2.3.7")[0] == "mpich"


def test_the_catalog_is_every_preset_of_the_range_with_names_only_where_checked():
    current = adapter()
    assert [a.value for a in current.algorithms("allreduce")] == list(range(1, 33))
    assert current.algorithms("allreduce")[2].name == "preset_3"
    assert len(current.algorithms("bcast")) == 22  # the cvar under its I_MPI_ name (older releases)
    assert "allreduce_composition" not in current.collectives()
    assert current.default_algorithm("allreduce").name == "auto"
    # 2021.14's reference lists allgather's presets in order; other versions keep preset_N.
    assert adapter("2021.14.0").algorithms("allgather")[1].name == "bruck"
    assert current.algorithms("allgather")[1].name == "preset_2"


def test_forcing_is_the_environment_and_a_runtime_switch_is_refused_with_the_reason():
    current = adapter()
    assert current.force_env("allreduce", "preset_5") == {"I_MPI_ADJUST_ALLREDUCE": "5"}
    assert current.force_env("allreduce", "default") == {}
    assert not current.switches_at_run_time()
    with pytest.raises(MPIError, match="only from the environment at MPI_Init"):
        current.runtime_switch("allreduce", "preset_5")
    with pytest.raises(UsageError, match="valid: default, auto, preset_1"):
        current.force_env("allreduce", "ring")


def test_selection_strings_select_what_the_rule_set_selects_and_leave_the_default_unwritten():
    rule_set = RuleSet("allreduce", (
        CommBlock(1, 2, (MsgRule(1024, "preset_3"), MsgRule(65536, "default"), MsgRule(None, "preset_5"))),
        CommBlock(3, None, (MsgRule(None, "preset_1"),)),
    ))
    presets = {f"preset_{i}": i for i in range(1, 33)}
    text = write_adjust_value(rule_set, presets)
    assert text == f"3:0-1024@1-2;5:65537-{UNBOUNDED}@1-2;1:0-{UNBOUNDED}@3-{UNBOUNDED}"
    conditions = read_adjust_value(text)
    for ranks in (1, 2, 3, 64):
        for size in (0, 8, 1024, 1025, 65536, 65537, 1 << 22):
            chosen = rule_set.select(ranks, size)
            expected = None if chosen == "default" else presets[chosen]
            assert select_preset(conditions, ranks, size) == expected, (ranks, size)
    assert write_adjust_value(RuleSet("bcast", (CommBlock(1, None, (MsgRule(None, "default"),)),)), presets) is None


@pytest.mark.parametrize("bad", ["garbage", "3:0-", "3:10-1", "3:0-10@4-2", "3;;4", "-1"])
def test_a_selection_string_tunempi_would_not_write_is_refused(bad):
    with pytest.raises(TuningFileError):
        read_adjust_value(bad)


def test_the_tuning_file_is_read_back_strictly(tmp_path):
    current = adapter(tmp=tmp_path)
    rule_set = RuleSet("allreduce", (CommBlock(1, None, (MsgRule(4096, "preset_2"), MsgRule(None, "default"))),))
    written = current.write_tuning_files({"allreduce": rule_set}, tmp_path)
    assert written.env == {"I_MPI_ADJUST_ALLREDUCE": f"2:0-4096@1-{UNBOUNDED}"}
    path = tmp_path / written.files["impi-adjust"]
    current.read_back_tuning_file(path)
    assert current.tuning_file_env("I_MPI_ADJUST", str(path)) == written.env
    path.write_text(path.read_text().replace("2:0-4096", "40:0-4096"))
    with pytest.raises(UsageError, match="preset 40 is not one of"):
        current.read_back_tuning_file(path)
    path.write_text("export I_MPI_ADJUST_NOPE=1\n")
    with pytest.raises(UsageError, match="no selectable presets for I_MPI_ADJUST_NOPE"):
        current.read_back_tuning_file(path)


def test_what_the_library_says_it_ignored_is_found_in_a_run_s_output():
    output = ("[0] MPI startup(): Incorrect algorithm: ALLREDUCE=99, will be ignored\n"
              "MPI startup(): Incorrect adjust value: BCAST=3:0-, will be ignored\nhello\n")
    assert adapter().ignored_by_library(output) == ["I_MPI_ADJUST_ALLREDUCE=99", "I_MPI_ADJUST_BCAST=3:0-"]


def test_run_time_parameters_go_by_intel_s_own_names():
    current = adapter()
    assert current.canonical_parameter("I_MPI_SHM_EAGER_THRESHOLD") == "MPIR_CVAR_SHM_EAGER"
    assert current.parameter_env("MPIR_CVAR_SHM_EAGER", 8192) == {"I_MPI_SHM_EAGER_THRESHOLD": "8192"}


def test_the_compiler_wrapper_gets_its_root_only_where_the_prefix_is_intel_s(tmp_path):
    assert wrapper_env(tmp_path) == {}
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "impi_info").write_text("")
    assert wrapper_env(tmp_path) == {"I_MPI_ROOT": str(tmp_path)}


def test_a_collective_is_selected_whole_where_a_selection_string_replaces_the_library_s_choice():
    """Intel MPI runs its untuned basic logic at every size no condition matches once I_MPI_ADJUST_<COLL> is set
    (measured): a default cell beside selected ones takes the fastest preset measured there when it was no
    slower than the default, else the whole collective keeps the default. MPICH/Open MPI files keep the
    library's choice elsewhere, so their selections pass unchanged."""
    from tunempi.space import Cell
    from tunempi.tune.files import whole_collectives

    current = adapter()
    a8, a64, a1k = (Cell("allreduce", 2, 1, 2, size) for size in (8, 64, 1024))
    b8 = Cell("bcast", 2, 1, 2, 8)
    selection = {a8: "preset_2", a64: "default", a1k: "default", b8: "default"}
    medians = {(a8, "preset_2"): 1.0, (a8, "default"): 2.0,
               (a64, "default"): 3.0, (a64, "preset_7"): 2.9, (a64, "preset_8"): 3.5,
               (a1k, "default"): 5.0, (a1k, "preset_1"): 5.0}
    assert whole_collectives(selection, current, medians) == {a8: "preset_2", a64: "preset_7", a1k: "preset_1",
                                                              b8: "default"}
    slower = {**medians, (a1k, "preset_1"): 5.5}  # no preset as fast as the default at 1 KiB
    assert whole_collectives(selection, current, slower) == {a8: "default", a64: "default", a1k: "default",
                                                             b8: "default"}
    restricted = {**medians, (a64, "preset_4"): 1.0}  # the fastest there cannot go into a file (restrictions)
    assert whole_collectives(selection, current, restricted)[a64] == "preset_7"
    assert whole_collectives(selection, current) == {cell: "default" for cell in selection}  # verify: no medians

    class KeepsChoice(impi.IntelMPIAdapter):
        def files_keep_library_choice_elsewhere(self) -> bool:
            return True

    other = KeepsChoice(current.library, current.catalog, current.defaults)
    assert whole_collectives(selection, other) == selection


def test_the_application_plan_offers_online_only_where_the_library_switches_per_call():
    """A real profile made with Intel MPI 2021.19.0 (a 2-rank allreduce loop, 93 % of the time in collectives):
    tune is worth it; online is not offered for a library that reads its choice at MPI_Init only."""
    from tunempi.profile.advise import application_plan
    from tunempi.profile.reader import load_profile

    path = Path(__file__).parent / "data" / "impi-2021.19.0-allreduce-profile.json"
    profile = load_profile(path)
    assert "Intel(R) MPI Library 2021.19.0" in profile.header["library"]
    steps = {step.kind: step for step in application_plan(profile, str(path), "impi", switches_per_call=False)}
    assert steps["tune"].worth and not steps["online"].worth
    assert "reads its algorithm choice at MPI_Init only" in steps["online"].why
    assert "online-best" not in steps["compare"].commands[0]
    switching = {step.kind: step for step in application_plan(profile, str(path), "mpich")}
    assert switching["online"].worth and "online-best" in switching["compare"].commands[0]


def test_alltoallv_gets_one_algorithm_per_layout_where_files_cannot_choose_by_size():
    """Issue 40: alltoallv's counts differ between ranks, and no library's file chooses its algorithm by a
    size every rank agrees on (MPICH: each rank's own sum of sendcounts; Open MPI: size 0; Intel: none):
    each layout gets one algorithm for all its sizes, no slower than the default at any, else the default."""
    from tunempi.space import Cell
    from tunempi.tune.files import one_choice_per_scale

    current = adapter()
    assert not current.selects_by_size("alltoallv") and current.selects_by_size("alltoall")
    assert not current.selects_by_size("alltoallw")  # alltoallv's counts, with a type per peer
    assert not current.selects_by_size("gatherv") and not current.selects_by_size("scatterv")  # only the root
    assert current.selects_by_size("allgatherv")  # knows their counts; allgatherv's every rank does
    v8, v1k = (Cell("alltoallv", 2, 1, 2, size) for size in (8, 1024))
    v8_4, v1k_4 = (Cell("alltoallv", 4, 1, 4, size) for size in (8, 1024))
    a8, a1k = (Cell("alltoall", 2, 1, 2, size) for size in (8, 1024))
    selection = {v8: "preset_1", v1k: "preset_2", v8_4: "preset_1", v1k_4: "preset_1", a8: "preset_1",
                 a1k: "preset_2"}
    medians = {(v8, "default"): 10.0, (v8, "preset_1"): 5.0, (v8, "preset_2"): 6.0,
               (v1k, "default"): 100.0, (v1k, "preset_1"): 99.0, (v1k, "preset_2"): 50.0}
    fixed = one_choice_per_scale(selection, current, medians)
    assert fixed[v8] == fixed[v1k] == "preset_2"  # geometric mean of (6, 50) beats (5, 99)
    assert fixed[v8_4] == fixed[v1k_4] == "preset_1"  # one choice already
    assert (fixed[a8], fixed[a1k]) == ("preset_1", "preset_2")  # alltoall chooses by size
    slower = {**medians, (v1k, "preset_1"): 101.0, (v8, "preset_2"): 11.0}  # each slower than the default once
    assert one_choice_per_scale(selection, current, slower)[v8] == "default"
    assert one_choice_per_scale(selection, current)[v1k] == "default"  # nothing measured: the default
