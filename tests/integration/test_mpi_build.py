"""The build cache cannot go stale: a header-only change rebuilds (real compiles with the embedded mpicc)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library

pytestmark = pytest.mark.mpi

MAIN = '#include <stdio.h>\n#include "answer.h"\nint main(void) { printf("%d\\n", ANSWER); return 0; }\n'


def _compile_and_run(source: Path, headers: Sequence[Path] = (), include: Path | None = None) -> tuple[Path, str]:
    flags = [f"-I{include}"] if include else []
    binary = build_c(resolve_library("mpich"), [source], "header_probe", headers=headers, extra_flags=flags,
                     werror=True)
    return binary, subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.strip()


def test_a_changed_header_beside_the_source_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEMPI_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "main.c"
    source.write_text(MAIN)
    (tmp_path / "answer.h").write_text("#define ANSWER 41\n")
    first, said = _compile_and_run(source)
    assert said == "41"
    again, _ = _compile_and_run(source)
    assert again == first  # nothing changed: the cached binary is reused

    (tmp_path / "answer.h").write_text("#define ANSWER 42\n")
    rebuilt, said = _compile_and_run(source)
    assert rebuilt != first and said == "42"


def test_a_changed_header_in_an_include_directory_is_rebuilt(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEMPI_CACHE", str(tmp_path / "cache"))
    include = tmp_path / "include"
    include.mkdir()
    header = include / "answer.h"
    source = tmp_path / "src" / "main.c"
    source.parent.mkdir()
    source.write_text(MAIN)
    header.write_text("#define ANSWER 1\n")
    first, said = _compile_and_run(source, headers=[header], include=include)
    assert said == "1"
    header.write_text("#define ANSWER 2\n")
    rebuilt, said = _compile_and_run(source, headers=[header], include=include)
    assert rebuilt != first and said == "2"
