"""`tunempi report --html` in a real headless browser (Debian's Chromium) at a laptop's 1366x768.

A real tuning directory (a tiny `tune` + `verify` of the embedded MPICH) is rendered; a copy of the page
with a small script appended is loaded with --dump-dom: the script writes, into the DOM, the images that did
not decode and every element that reaches past the viewport's width. A screenshot is taken too.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_system

from tunempi.bench.protocol import MeasureSettings
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.manifest import Manifest
from tunempi.tune.verify_run import run_verify

pytestmark = pytest.mark.mpi

FAST = MeasureSettings(warmup=1, min_iters=5, max_iters=200, rel_ci=0.1, time_cap_s=0.02)
WIDTH, HEIGHT = 1366, 768
CHROMIUM = "/usr/bin/chromium"

CHECK_SCRIPT = """
<script>
window.addEventListener('load', () => {
  const width = document.documentElement.clientWidth;
  const broken = [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  const overflow = [];
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && (box.right > width + 0.5 || box.left < -0.5))
      overflow.push(el.tagName + ' ' + (el.textContent || '').slice(0, 40) + ' right=' + Math.round(box.right));
  }
  const out = document.createElement('pre');
  out.id = 'tunempi-check';
  out.textContent = JSON.stringify({width, scrollWidth: document.documentElement.scrollWidth,
                                    images: document.images.length, broken, overflow: overflow.slice(0, 20)});
  document.body.appendChild(out);
});
</script>
"""


def chromium(*arguments: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", *arguments],
        capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A verified MPICH tuning directory with one exclusion record, rendered by `tunempi report --html`."""
    require_system("browser")
    root = tmp_path_factory.mktemp("report")
    options = TuneOptions(out=root / "tuned", collectives="allreduce,bcast", mpi="mpich", ranks=2, max_msg=1024,
                          timeout_s=40.0, db=root / "results.sqlite", settings=FAST)
    manifest = run_tune(options).manifest
    assert manifest is not None
    run_verify(manifest.directory, repeats=2, settings=FAST)
    manifest = Manifest.load(manifest.directory)
    if not manifest.excluded:  # a record as `tune` writes them, so the page shows one whatever MPICH allows
        excluded = {"reduce_scatter": {"ring": "wrong results for non-commutative operations; the file format "
                                               "cannot tell them apart"}}
        dataclasses.replace(manifest, excluded=excluded).save()
    page = root / "report.html"
    done = subprocess.run([sys.executable, "-m", "tunempi", "report", "--tuning", str(manifest.directory),
                           "--html", str(page)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "apply it:" in done.stdout and "tunempi run --tuning" in done.stdout
    assert "…" not in done.stdout  # stdout is a pipe here: no column squeezed into an ellipsis
    return page


def test_the_report_shows_what_was_tuned_where_it_wins_what_was_excluded_and_how_to_apply(
        report_page: Path) -> None:
    text = report_page.read_text()
    manifest = Manifest.load(report_page.parent / "tuned")
    for heading in ("Apply it", "Where the tuned choice beats the default", "What was tuned",
                    "What was excluded, and why", "Plots"):
        assert f">{heading}<" in text
    assert f"tunempi run --tuning {manifest.directory} -- mpiexec -n 2 ./app" in text
    assert "tuning.env" in text
    assert manifest.verify is not None
    shown = {c.cell: c for c in manifest.verify.held_out} or {c.cell: c for c in manifest.verify.cells}
    verified = [c for c in shown.values() if c.ci_low > 1.0 and not c.replaced]
    for cell in verified:  # every cell faster beyond noise is listed with its speedup and interval
        assert f"{cell.speedup:.2f}x" in text and f"{cell.ci_low:.2f} - {cell.ci_high:.2f}" in text
    for collective, reasons in manifest.excluded.items():  # every exclusion with its reason
        for algorithm, why in reasons.items():
            assert collective in text and algorithm in text and html.escape(why) in text
    if not verified:
        assert "no tuned cell is faster than the library default beyond noise" in text


def test_the_report_renders_in_chromium_without_broken_images_or_overflow(report_page: Path,
                                                                           tmp_path: Path) -> None:
    checked = tmp_path / "checked.html"
    checked.write_text(report_page.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", checked.as_uri(), profile=tmp_path / "p1")
    found = re.search(r'<pre id="tunempi-check">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:] + dom.stderr[-2000:]
    result = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["width"] >= WIDTH - 20  # laid out at the laptop width (less a scrollbar at most)
    assert result["images"] == 3 and result["broken"] == []
    assert result["overflow"] == [] and result["scrollWidth"] <= result["width"], result

    screenshot = tmp_path / "report.png"
    shot = chromium(f"--screenshot={screenshot}", report_page.as_uri(), profile=tmp_path / "p2")
    assert screenshot.is_file(), shot.stderr[-2000:]
    header = screenshot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(header[16:20], "big") == WIDTH


def test_the_autotune_report_renders_in_chromium_without_overflow(tmp_path: Path) -> None:
    """autotune's page (written from a work state's results: here the unit test's, with a long launch line)
    laid out at the laptop's width: long paths and launch lines wrap."""
    require_system("browser")
    from tunempi.autotune import AutotuneOutcome, AutotuneRequest
    from tunempi.autotune.report import write_report

    line = ["/a/very/long/prefix/of/an/mpi/installation/bin/mpiexec", "-n", "2",
            "/root/.cache/tunempi/build/mpich-5.0.2-981e577d834f/allreduce_loop-9bac44817aed", "--input",
            "/a/long/path/to/the/input/deck/of/the/application/in.lj.with.a.long.name"]
    verdict = {"variant": {"name": "tuned", "source": "tuning directory", "env": {}, "tuning_dir": "tuned"},
               "verdict": "no difference", "reason": "1.001x", "results": "unchanged", "runs": 10, "pairs": 10,
               "mean_value": 1.0, "comparison": {"speedup": 1.001, "low": 0.98, "high": 1.02}}
    compared = {"blocks": 10, "stop_reason": "every interval narrower than 0.04", "metric": "wall time",
                "result_check": "--result 'bad=(\\d+)'", "default": {"runs": 10, "results_vary": None},
                "variants": [verdict]}
    outcome = AutotuneOutcome(tmp_path / "work", results={
        "profile": {"run_s": 1.0, "ranks": 2, "nodes": 1, "collective_share": 0.4, "mpi_share": 0.5,
                    "p2p_share": 0.0, "by_collective": [["allreduce", 400, 0.8, 0.4]], "seconds": 2.0},
        "plan": {"plan": [{"kind": "tune", "worth": True, "why": "collectives take 40%"}], "steps": ["tune"],
                 "shares": {"tune": 100.0}},
        "tune": {"directory": "tuned", "variant": None, "collectives": ["alltoallv"], "cells": 10, "tuned_cells": 0,
                 "seconds": 60.0, "at_application_sizes": [  # issue 40: tune's decision across launches beside it
                     {"collective": "alltoallv", "ranks": 2, "size": 500_000, "calls": 328, "mpi_share": 0.3,
                      "measured_size": 524_288, "default_us": 15_776.2, "best": "basic_linear", "best_us": 8_661.8,
                      "chosen": "default", "across": "tie", "speedup": 1.1, "low": 0.3, "high": 4.0,
                      "launches": 3}],
                 "expected": {"tuned_share": 0.3, "changed_share": 0.0, "saved_share": 0.0, "speedup": 1.0,
                              "best_saved_share": 0.13, "best_speedup": 1.15, "unmeasured_share": 0.0,
                              "rows": [{"collective": "alltoallv", "ranks": 2, "measured_size": 524_288,
                                        "sizes": [500_000, 500_000], "calls": 328, "algorithm": "default",
                                        "speedup": 1.0, "source": "default", "best_speedup": 1.82, "share": 0.3,
                                        "saved_share": 0.0}]}},
        "compare": {"outcome": compared, "seconds": 30.0}})
    page = write_report(AutotuneRequest(line, tmp_path / "work"), outcome, tmp_path / "work" / "report.html")
    assert "tie (default kept): 1.10x [0.30, 4.00] over 3 launches" in page.read_text()
    assert "at most 1.000x faster (every measured algorithm at its best: 1.150x)" in page.read_text()
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", checked.as_uri(), profile=tmp_path / "p1")
    found = re.search(r'<pre id="tunempi-check">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:] + dom.stderr[-2000:]
    result = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["width"] >= WIDTH - 20
    assert result["overflow"] == [] and result["scrollWidth"] <= result["width"], result
