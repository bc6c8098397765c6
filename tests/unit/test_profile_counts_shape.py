"""The interposer's classification of a vector collective's counts (c/tmpi_counts.h), compiled on its own with
the system cc (it needs no MPI): the bench engine's distributions (bench/c/engine.h tm_block_bytes) at 2 to 9
ranks are classified as the distribution they are, and the thresholds (sparse: at least floor(n/2) blocks
empty; skewed: the largest block at least 1.25 x the mean) hold at their edges."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tunempi.profile.build import c_source_dir

PROGRAM = r"""
#include <stdio.h>
#include "tmpi_counts.h"

/* stdin: lines "n c0 c1 ... c(n-1)"; stdout: one shape per line */
int main(void)
{
    static const char *const names[] = {"uniform", "skewed", "sparse"};
    int n, counts[256];
    while (scanf("%d", &n) == 1) {
        for (int i = 0; i < n; i++)
            if (scanf("%d", &counts[i]) != 1)
                return 1;
        puts(names[tmpi_counts_shape(counts, n)]);
    }
    printf("stronger %d %d\n", tmpi_counts_stronger(TMPI_COUNTS_UNIFORM, TMPI_COUNTS_SPARSE),
           tmpi_counts_stronger(TMPI_COUNTS_SKEWED, -1));
    return 0;
}
"""


Classify = Callable[[list[list[int]]], list[str]]


@pytest.fixture(scope="module")
def classify(tmp_path_factory: pytest.TempPathFactory) -> Classify:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed"
    directory = tmp_path_factory.mktemp("counts")
    (directory / "t.c").write_text(PROGRAM)
    binary = directory / "t"
    built = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{c_source_dir()}", "-o", str(binary),
                            str(directory / "t.c")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr

    def run(arrays: list[list[int]]) -> list[str]:
        text = "".join(f"{len(a)} {' '.join(map(str, a))}\n" for a in arrays)
        out = subprocess.run([str(binary)], input=text, capture_output=True, text=True, check=True).stdout
        lines = out.splitlines()
        assert lines[-1] == "stronger 2 1"  # sparse over uniform, skewed over none
        return lines[:-1]

    return run


def engine_block(dist: str, mean: int, source: int, dest: int, n: int) -> int:
    """bench/c/engine.h tm_block_bytes: what rank `source` sends to `dest` (dest < 0: contributes to all)."""
    if dist == "skewed":
        return mean * 2 * (source + 1) // (n + 1)
    if dist == "sparse":
        if dest < 0:
            return mean * n // ((n + 1) // 2) if source % 2 == 0 else 0
        return mean * n if dest == (source + 1) % n else 0
    return mean


@pytest.mark.parametrize("dist", ["uniform", "skewed", "sparse"])
def test_the_engine_s_distributions_are_classified_as_themselves(classify: Classify, dist: str) -> None:
    arrays: list[list[int]] = []
    expected: list[str] = []
    for n in range(2, 10):
        for mean in (64, 1000):
            # allgatherv's (and gatherv's at the root, scatterv's) counts: one per source
            arrays.append([engine_block(dist, mean, r, -1, n) for r in range(n)])
            # alltoallv at every rank: its receive counts (one per source), its send counts (one per destination)
            for rank in range(n):
                receive = [engine_block(dist, mean, s, rank, n) for s in range(n)]
                send = [engine_block(dist, mean, rank, d, n) for d in range(n)]
                shapes = classify([receive, send])
                order = ["uniform", "skewed", "sparse"]
                assert max(shapes, key=order.index) == dist, (n, rank, receive, send, shapes)
            expected.append(dist)
    assert classify(arrays) == expected


def test_thresholds_at_their_edges(classify: Classify) -> None:
    cases = {
        (): "uniform",  # no peers
        (7,): "uniform",  # one
        (0, 0, 0, 0): "uniform",  # nothing moved
        (5, 3): "skewed",  # largest 5 = 1.25 x the mean 4
        (9, 7): "uniform",  # 9 < 1.25 x 8
        (100, 104, 96, 110, 90, 100): "uniform",  # a few percent apart (keys bucketed at random)
        (10, 10, 10, 30): "skewed",  # one block 2x the mean
        (0, 5): "sparse",  # 1 of 2 empty
        (0, 5, 5): "sparse",  # 1 of 3 (floor(3/2) = 1)
        (0, 5, 5, 5): "skewed",  # 1 of 4 empty is not sparse; the others are 4/3 of the mean
        (0, 0, 5, 5): "sparse",  # 2 of 4
        (0, 4, 4, 4, 4, 4, 4, 4): "uniform",  # one empty of 8, the rest 8/7 of the mean
        (-1, 5): "sparse",  # a negative count (invalid) is an empty block
    }
    got = classify([list(c) for c in cases])
    assert dict(zip(cases, got, strict=True)) == cases


def test_the_header_needs_no_mpi() -> None:
    text = (Path(c_source_dir()) / "tmpi_counts.h").read_text()
    assert "#include <mpi.h>" not in text and '#include "tmpi.h"' not in text
