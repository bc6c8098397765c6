"""Parameter spaces: TOML / PTF / JSON input, conditions, constraints, grids, unit mapping."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tunempi.errors import UsageError
from tunempi.search.space import (
    CategoricalParam,
    Expr,
    FloatParam,
    IntParam,
    ParamSpace,
    load_space,
    parse_ptf,
    parse_toml,
)

TOML = """
[space]
library = "mpich"
constraints = ["EAGER <= RNDV"]

[[param]]
name = "EAGER"
kind = "int"
range = "1K:*2:64K"
default = 4096

[[param]]
name = "RNDV"
range = "0:16384:131072"

[[param]]
name = "PROGRESS"
values = ["poll", "thread"]

[[param]]
name = "SPIN"
kind = "float"
low = 0.0
high = 1.0
step = 0.25
when = "PROGRESS == 'thread'"
"""


def test_toml_kinds_ranges_and_conditions():
    space = parse_toml(TOML)
    eager, rndv, progress, spin = space.params
    assert isinstance(eager, CategoricalParam)  # start:*f:end is PTF's geometric list, in order
    assert eager.grid() == (1024, 2048, 4096, 8192, 16384, 32768, 65536)
    assert eager.default == 4096
    assert isinstance(rndv, IntParam) and rndv.grid() == tuple(range(0, 131073, 16384))
    assert isinstance(progress, CategoricalParam) and progress.choices == ("poll", "thread")
    assert isinstance(spin, FloatParam) and spin.grid() == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert space.library == "mpich"
    # SPIN only exists with the progress thread.
    assert space.normalize({"EAGER": 1024, "RNDV": 0, "PROGRESS": "poll", "SPIN": 0.5}) == {
        "EAGER": 1024, "RNDV": 0, "PROGRESS": "poll"}
    assert "SPIN" in space.normalize({"EAGER": 1024, "RNDV": 0, "PROGRESS": "thread", "SPIN": 0.5})


def test_grid_honours_conditions_and_constraints():
    space = parse_toml(TOML)
    configs = list(space.grid_configs())
    assert all(c["EAGER"] <= c["RNDV"] for c in configs)
    assert all(("SPIN" in c) == (c["PROGRESS"] == "thread") for c in configs)
    # Count independently: feasible (EAGER, RNDV) pairs x (1 poll + 5 thread spins).
    pairs = sum(1 for e in space["EAGER"].grid() for r in space["RNDV"].grid() if e <= r)
    assert len(configs) == pairs * (1 + 5)
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)


def test_json_round_trip_is_lossless():
    space = parse_toml(TOML)
    again = ParamSpace.from_json(space.to_json())
    assert again.to_dict() == space.to_dict()
    assert list(again.grid_configs()) == list(space.grid_configs())


def test_samples_and_unit_mapping_stay_in_space():
    space = parse_toml(TOML)
    rng = np.random.default_rng(3)
    for _ in range(200):
        config = space.sample(rng)
        assert space.contains(config)
        assert space.contains(space.from_unit_vector(space.to_unit_vector(config)))
        decoded = space.from_unit_vector(rng.random(len(space)))
        assert space.contains(decoded) or not space.is_feasible(decoded)


def test_log_int_accepts_values_between_ladder_rungs_and_steps_to_neighbours():
    p = IntParam("E", 1000, 9000, log=True)
    assert p.contains(3000) and not p.contains(9001)
    assert p.step(3000, +1) == 4000 and p.step(3000, -1) == 2000
    assert p.step(9000, +1) is None


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("[[param]]\nname = \"X\"\nrange = \"1:2\"\n", 1, "start:step:end"),
        ("[[param]]\nname = \"X\"\nkind = \"int\"\nrange = \"0:1:10\"\n[[param]]\nname = \"Y\"\nkind = \"bogus\"\n"
         "values = [1]\n", 5, "valid kinds: int, float, categorical"),
        ("[[param]]\nname = \"X\"\nrange = \"0:1:10\"\nwhen = \"Y == 1\"\n", 1, "declared before"),
        ("[[param]]\nname = \"X\"\nrange = \"0:1:10\"\n[[param]]\nname = \"X\"\nvalues=[1]\n", None,
         "declared twice"),
        ("[[param]]\nname = \"X\"\nrange = \"0:1:10\"\ndefault = 11\n", 1, "outside"),
        ("[[param]]\nname = \"X\"\nrange = \"0:1:10\"\nwhen = \"__import__('os')\"\n", 1, "not allowed"),
    ],
)
def test_malformed_toml_names_line_and_reason(text, line, reason):
    with pytest.raises(UsageError) as err:
        parse_toml(text, "s.toml")
    msg = str(err.value)
    assert reason in msg
    if line is not None:
        assert f"s.toml:{line}:" in msg


def test_toml_syntax_error_reports_line():
    with pytest.raises(UsageError, match=r"s.toml: malformed TOML: .*line 3"):
        parse_toml('[[param]]\nname = "X"\nrange = 0:1\n', "s.toml")


# PTF's own shipped example (Intel MPI), imported as is.
PTF_INTEL = """MPIPO_BEGIN intel
I_MPI_EAGER_THRESHOLD=4096:2048:65560;
I_MPI_INTRANODE_EAGER_THRESHOLD=4096:2048:65560;
I_MPI_SHM_LMT=shm,direct,no;
I_MPI_SPIN_COUNT=1:2:500;
I_MPI_SCALABLE_OPTIMIZATION=yes,no;
I_MPI_SHM_CELL_NUM=64:4:256;
SEARCH=gde3;
MPIPO_END
"""


def test_ptf_file_imported_as_is():
    space = parse_ptf(PTF_INTEL)
    assert space.library == "intel"
    assert space.hints == {"search": "gde3"}
    eager = space["I_MPI_EAGER_THRESHOLD"]
    assert isinstance(eager, IntParam) and eager.grid()[0] == 4096 and eager.grid()[-1] == 65536
    assert eager.grid()[1] - eager.grid()[0] == 2048
    assert space["I_MPI_SHM_LMT"].grid() == ("shm", "direct", "no")
    assert space["I_MPI_SPIN_COUNT"].grid()[-1] == 499


def test_ptf_extras_comments_suffixes_multiplicative_and_alias():
    text = ("MPIPO_BEGIN ibm\n# a comment\neager_limit=4K:+4K:64K;\n#buffer_mem=1:2:3;\n"
            "bulk=1024:*4:65536;\nmode:MP_WAIT_MODE=poll,nopoll;\nMPIPO_END\n")
    space = parse_ptf(text)
    assert space.names == ("eager_limit", "bulk", "MP_WAIT_MODE")
    assert space["eager_limit"].grid()[:2] == (4096, 8192)
    assert space["bulk"].grid() == (1024, 4096, 16384, 65536)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("X=1:2:3;\n", 1, "MPIPO_BEGIN"),
        ("MPIPO_BEGIN intel\nX=1:2:3\nMPIPO_END\n", 2, "end with ';'"),
        ("MPIPO_BEGIN intel\nX=1:2;\nMPIPO_END\n", 2, "start:step:end"),
        ("MPIPO_BEGIN intel\nX=10:1:2;\nMPIPO_END\n", 2, "starts above its end"),
        ("MPIPO_BEGIN intel\nX=1:1:2;\n", 2, "missing MPIPO_END"),
        ("MPIPO_BEGIN intel\nX=a,,b;\nMPIPO_END\n", 2, "empty value"),
        ("MPIPO_BEGIN intel\nX=1,2;\nX=3,4;\nMPIPO_END\n", 3, "declared twice"),
    ],
)
def test_malformed_ptf_names_line_and_reason(text, line, reason):
    with pytest.raises(UsageError) as err:
        parse_ptf(text, "p.conf")
    assert f"p.conf:{line}:" in str(err.value) and reason in str(err.value)


def test_load_space_dispatches_on_format(tmp_path):
    (tmp_path / "a.toml").write_text(TOML)
    (tmp_path / "b.conf").write_text(PTF_INTEL)
    (tmp_path / "c.json").write_text(parse_toml(TOML).to_json())
    assert load_space(tmp_path / "a.toml").names == load_space(tmp_path / "c.json").names
    assert len(load_space(tmp_path / "b.conf")) == 6
    with pytest.raises(UsageError, match="cannot read"):
        load_space(tmp_path / "missing.toml")


def test_expressions_are_evaluated_without_eval():
    e = Expr.parse("A * 2 <= B and C in ('x', 'y')")
    assert e.evaluate({"A": 2, "B": 4, "C": "x"}) and not e.evaluate({"A": 3, "B": 4, "C": "x"})
    assert not e.evaluate({"A": 2, "B": 4})  # C inactive -> False
    for bad in ("open('f')", "A.__class__", "[x for x in A]", "lambda: 1"):
        with pytest.raises(UsageError):
            Expr.parse(bad)
