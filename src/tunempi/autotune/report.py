"""The one HTML report of `tunempi autotune` (self-contained: inline style, no scripts, no plots to fetch):
what the application spends its time in, what the plan chose and why, what was tuned, the application's
speedup with its 95 % interval for every tuning compared, whether its results were checked and unchanged,
and how to apply the tuning. Written from the work state's results alone, so a resumed run rewrites it."""

from __future__ import annotations

import html
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunempi.autotune.pipeline import STEPS, AutotuneOutcome, AutotuneRequest
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.report.tuning import _STYLE, _ci_bar
from tunempi.units import format_size

#: Beside report/'s style: launch lines and paths are long words; they wrap rather than widen the page.
_EXTRA_STYLE = "h1, p, td, code { overflow-wrap:anywhere; }"
_VERDICT_TONE = {"faster": "good", "slower": "bad", "failed": "bad", "wrong results": "bad"}


def _across(row: Mapping[str, Any]) -> str:
    """Tune's decision in the row's cell across launches (autotune.steps.across_launches), or '-': the cell's
    own figures, or its range's, said so (a row recorded before `figures` was: always its range's)."""
    if "across" not in row:
        return "-"
    what = {"tuned": "tuned", "tie": "tie (default kept)", "default": "default faster"}.get(row["across"], row["across"])
    if "speedup" not in row:
        return what
    whose = "" if row.get("figures", "range") == "cell" else " (its range's: none of this cell's own)"
    return (f"{what}: {row['speedup']:.2f}x [{row['low']:.2f}, {row['high']:.2f}] over {row['launches']} launches"
            + whose)


def tuning_compared(verdicts: list[dict[str, Any]]) -> bool:
    return any(v["variant"]["name"] == "tuned" for v in verdicts)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _share(value: float) -> str:
    """A share of the run as a percentage, small ones to two significant digits (0.04%, not 0.0%)."""
    return f"{100 * value:.2g}%" if 0 < abs(value) < 0.001 else _pct(value)


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    return f"{value * 1e3:.2f} ms" if value >= 1e-3 else f"{value * 1e6:.1f} us"


def _tuned_rows(directory: str) -> list[tuple[str, str, str, str]]:
    """(collective, layout, size, algorithm) of every cell a tuning directory selects another algorithm for."""
    from tunempi.errors import UsageError
    from tunempi.tune.manifest import Manifest

    try:
        manifest = Manifest.load(directory)
    except UsageError:
        return []
    return [(row.cell.collective, f"{row.cell.ranks} ranks ({row.cell.nodes}x{row.cell.ppn})",
             format_size(row.cell.msg_bytes), row.algorithm)
            for row in manifest.selection if row.algorithm != DEFAULT_ALGORITHM]


def recorded_expected(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the tuning can save at most from tune's measurements (autotune/gain.py): of the files verify left,
    where verify ran; None where neither step recorded it (a work state from before it did)."""
    return (results.get("verify") or {}).get("expected") or (results.get("tune") or {}).get("expected")


def tuned_comparison(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """compare's comparison of the tuned directory against the default ({speedup, low, high}), or None."""
    outcome = (results.get("compare") or {}).get("outcome") or {}
    for verdict in outcome.get("variants", []):
        if verdict["variant"]["name"] == "tuned" and verdict.get("comparison"):
            return dict(verdict["comparison"])
    return None


def other_verdicts(results: Mapping[str, Any]) -> dict[str, str]:
    """compare's verdict on each variant other than tune's files (online best, search): {name: verdict}."""
    outcome = (results.get("compare") or {}).get("outcome") or {}
    return {str(v["variant"]["name"]): str(v["verdict"]) for v in outcome.get("variants", [])
            if v["variant"]["name"] != "tuned"}


def expected_sentence(expected: Mapping[str, Any], compared: Mapping[str, Any] | None,
                      others: Mapping[str, str] | None = None) -> str:
    """The expected-gain line of the report and of the console summary, with compare's figure beside it. It is
    about tune's files only; `others` (other_verdicts) are named as tunings of their own, so a verdict on online
    best does not read as one on these files."""
    from tunempi.autotune.gain import below_resolution

    text = (f"From tune's measurements: the calls tune's files change take {_share(expected['changed_share'])} of "
            f"the ranks' time; at tune's speedups there the application can run at most "
            f"{expected['speedup']:.3f}x faster (every measured algorithm at its best: "
            f"{expected['best_speedup']:.3f}x).")
    most = float(expected["speedup"])
    if compared:
        text += (f" compare measured {compared['speedup']:.3f}x [{compared['low']:.3f}, "
                 f"{compared['high']:.3f}].")
        if float(compared["low"]) > max(1.0, most):
            return text + (" Its whole interval lies above what the tuning can give: that gain does not come from "
                           "the calls the tuning changes (the runs' variation, or what the microbenchmarks do not "
                           "see).")
    if not expected["changed_share"]:
        text += " tune's files change none of the application's calls: there is no gain for an A/B " + (
            "of them to show; " + "; ".join(f"compare's verdict on {name} ({verdict}) is that tuning's own"
                                           for name, verdict in others.items()) + ", not tune's files."
            if others else "to show.")
    elif below_resolution(most, compared):
        text += " That gain is below what an A/B of the application resolves here: compare cannot tell it from 1x."
    elif compared and float(compared["high"]) < most:
        text += " The application gained less than tune's measurements promise there."
    return text


def _expected_table(expected: Mapping[str, Any]) -> list[str]:
    """The paragraph and table of the expected gain under "What was tuned"."""
    e = html.escape
    body = [f"<p id='expected-gain'>What the tuning can give, from tune's measurements: every call of the tuned "
            f"collectives ({_share(expected['tuned_share'])} of the ranks' time) at the measured cell whose rule "
            f"the file applies at its size, saving its time x (1 - 1/s), s the speedup tune measured there "
            f"across launches for the algorithm the file selects (1 where the default stays). The calls the "
            f"tuning changes take {_share(expected['changed_share'])} of the ranks' time; it can save "
            f"{_share(expected['saved_share'])}: at most <b>{expected['speedup']:.3f}x</b> on the application "
            f"(Amdahl); every measured algorithm at its best (the fastest median in every cell): "
            f"{_share(expected['best_saved_share'])}, {expected['best_speedup']:.3f}x."
            + (f" Calls at communicator sizes tune did not measure: {_share(expected['unmeasured_share'])} (counted "
               "as saving nothing)." if expected.get("unmeasured_share") else "") + "</p>"]
    rows = expected.get("rows") or []
    if rows:
        body.append("<table><tr><th>collective</th><th class='num'>ranks</th><th class='num'>sizes called</th>"
                    "<th class='num'>calls</th><th class='num'>% of run</th><th class='num'>rule of</th>"
                    "<th>file selects</th><th class='num'>s</th><th>s from</th><th class='num'>saves % of run</th>"
                    "<th class='num'>fastest measured</th></tr>")
        for row in rows:
            low, high = row["sizes"]
            sizes = format_size(low) if low == high else f"{format_size(low)} - {format_size(high)}"
            body.append(f"<tr><td>{e(row['collective'])}</td><td class='num'>{row['ranks']}</td>"
                        f"<td class='num'>{e(sizes)}</td><td class='num'>{row['calls']}</td>"
                        f"<td class='num'>{_share(row['share'])}</td>"
                        f"<td class='num'>{e(format_size(row['measured_size']))}</td><td>{e(row['algorithm'])}</td>"
                        f"<td class='num'>{row['speedup']:.2f}x</td><td>{e(row['source'])}</td>"
                        f"<td class='num'>{_share(row['saved_share'])}</td>"
                        f"<td class='num'>{row['best_speedup']:.2f}x</td></tr>")
        body.append("</table>")
    return body


def apply_lines(name: str, path: str, command: list[str]) -> list[tuple[str, str]]:
    """(what, command) to apply one tuning to the application."""
    line = shlex.join(command)
    target = Path(path)
    if target.is_dir() or name != "search":
        return [("run the application with it (tunempi checks the library and the files first)",
                 f"tunempi run --tuning {shlex.quote(path)} -- {line}"),
                ("or set its variables in a shell or job script",
                 f'eval "$(tunempi run --tuning {shlex.quote(path)} --print-env -- {line})"; {line}')]
    return [("set the run-time parameters of its env file, then launch",
             f"set -a; . {shlex.quote(path)}; set +a; {line}")]


def write_report(request: AutotuneRequest, outcome: AutotuneOutcome, path: Path) -> Path:
    e = html.escape
    results = outcome.results
    profile = results.get("profile", {})
    plan = results.get("plan", {})
    compare = results.get("compare", {}).get("outcome")
    command = list(request.command)
    body = [f"<h1>tunempi autotune: {e(shlex.join(command))}</h1>",
            f"<p class='muted'>{e(str(profile.get('library_name', '')))}; budget {request.budget_s:g} s; work "
            f"directory <code>{e(str(outcome.directory))}</code></p>"]

    # -- the verdict first
    verdicts = compare.get("variants", []) if compare else []
    faster = [v for v in verdicts if v["verdict"] == "faster"]
    best = max(faster, key=lambda v: v["comparison"]["speedup"]) if faster else None
    cards = [(_pct(profile.get("collective_share")), "of the ranks' time in collectives"),
             (_pct(profile.get("mpi_share")), "of the ranks' time in MPI"),
             (f"{best['comparison']['speedup']:.3f}x" if best else "-",
              f"application speedup ({best['variant']['name']})" if best else "no tuning faster with evidence"),
             (str(len(verdicts)), "tunings compared on the application")]
    body.append("<div class='cards'>" + "".join(
        f"<div class='card'><div class='value'>{e(v)}</div><div class='label'>{e(label)}</div></div>"
        for v, label in cards) + "</div>")

    # -- where the time goes
    body.append("<h2>Where the application spends its time</h2>")
    if profile:
        body.append(f"<p>One profiled run ({_seconds(float(profile.get('run_s', 0.0)))}, {e(str(profile.get('ranks')))} "
                    f"ranks on {e(str(profile.get('nodes')))} node(s)): MPI {_pct(profile.get('mpi_share'))} of the "
                    f"ranks' time, collectives {_pct(profile.get('collective_share'))}, point-to-point sends "
                    f"{_pct(profile.get('p2p_share'))}.</p>")
        body.append("<table><tr><th>collective</th><th class='num'>calls</th><th class='num'>time (all ranks)</th>"
                    "<th class='num'>% of run</th></tr>")
        for name, calls, seconds, share in profile.get("by_collective", []):
            body.append(f"<tr><td>{e(str(name))}</td><td class='num'>{calls}</td><td class='num'>{_seconds(seconds)}"
                        f"</td><td class='num'>{_pct(share)}</td></tr>")
        body.append("</table>")
        for text in plan.get("not_tunable", []):
            body.append(f"<p class='muted'>not tunable: {e(text)}</p>")
        if plan.get("caveat"):
            body.append(f"<p><b>Caution:</b> {e(str(plan['caveat']))}</p>")
    else:
        body.append("<p>Not profiled yet.</p>")

    # -- the plan and the steps
    body.append("<h2>The plan, and what ran</h2><table><tr><th>step</th><th>status</th><th>why</th>"
                "<th class='num'>budget share</th><th class='num'>took</th></tr>")
    why = {str(s["kind"]): str(s.get("why", "")) for s in plan.get("plan", [])}
    shares = plan.get("shares", {})
    for name in STEPS[:-1]:
        result = results.get(name)
        if name in outcome.failed:
            status, reason = "failed (a rerun tries it again)", outcome.failed[name]
        elif name in outcome.skipped:
            status, reason = "skipped", outcome.skipped[name]
        elif result is not None and result.get("skipped"):
            status, reason = "nothing to do", str(result["skipped"])
        elif result is not None:
            status = "done" + (" (an earlier run)" if name in outcome.resumed else "")
            reason = why.get(name, "")
        else:
            status, reason = "not run", ""
        share = f"{shares[name]:.0f} s" if name in shares else ""
        took = f"{result['seconds']:.0f} s" if result and "seconds" in result else ""
        body.append(f"<tr><td>{e(name)}</td><td>{e(status)}</td><td>{e(reason)}</td><td class='num'>{share}</td>"
                    f"<td class='num'>{took}</td></tr>")
    body.append("</table>")

    # -- what was tuned
    body.append("<h2>What was tuned</h2>")
    tuned = results.get("verify") or results.get("tune")
    if tuned and tuned.get("directory"):
        rows = _tuned_rows(str(tuned["directory"]))
        body.append(f"<p>tune (collective algorithms, from the profile's scope: "
                    f"{e(', '.join(results.get('tune', {}).get('collectives', [])))}): {len(rows)} cells select an "
                    f"algorithm other than the library's own" + (" after verify" if "verify" in results else "")
                    + f" (<code>{e(str(tuned['directory']))}</code>).</p>")
        if rows:
            body.append("<table><tr><th>collective</th><th>layout</th><th class='num'>size</th><th>algorithm</th></tr>"
                        + "".join(f"<tr><td>{e(c)}</td><td>{e(lay)}</td><td class='num'>{e(s)}</td><td>{e(a)}</td></tr>"
                                  for c, lay, s, a in rows) + "</table>")
        for line in results.get("verify", {}).get("lines", []):
            body.append(f"<p class='muted'>verify: {e(line)}</p>")
        expected = recorded_expected(results)
        if expected:
            body.extend(_expected_table(expected))
        at_sizes = results.get("tune", {}).get("at_application_sizes") or []
        if at_sizes:
            body.append("<p>Where the application spends its time, what tune measured at the nearest size it "
                        "measured (median per run, microseconds; speedup = default / fastest other: the most a "
                        "tuning could gain there; across launches: tune's decision there, the contender against "
                        "the default in every launch, with its 95% interval: a median one busy launch moved "
                        "shows as a tie):</p>")
            body.append("<table><tr><th>collective</th><th class='num'>ranks</th><th class='num'>size</th>"
                        "<th class='num'>calls</th><th class='num'>MPI time</th><th class='num'>measured at</th>"
                        "<th class='num'>default us</th><th>fastest other</th><th class='num'>us</th>"
                        "<th class='num'>speedup</th><th>tune chose</th><th>across launches</th></tr>")
            for row in at_sizes:
                best_us = row.get("best_us")
                gain = f"{row['default_us'] / best_us:.2f}x" if best_us else "-"
                body.append(f"<tr><td>{e(row['collective'])}</td><td class='num'>{row['ranks']}</td>"
                            f"<td class='num'>{e(format_size(row['size']))}</td><td class='num'>{row['calls']}</td>"
                            f"<td class='num'>{_pct(row['mpi_share'])}</td>"
                            f"<td class='num'>{e(format_size(row['measured_size']))}</td>"
                            f"<td class='num'>{row['default_us']:.1f}</td><td>{e(str(row.get('best') or '-'))}</td>"
                            f"<td class='num'>{'-' if best_us is None else f'{best_us:.1f}'}</td>"
                            f"<td class='num'>{gain}</td><td>{e(row['chosen'])}</td>"
                            f"<td>{e(_across(row))}</td></tr>")
            body.append("</table>")
    online = results.get("online")
    if online:
        if online.get("skipped"):
            body.append(f"<p>online: {e(str(online['skipped']))}</p>")
        else:
            chosen = online.get("chosen", [])
            body.append(f"<p>online: {online.get('runs', 0)} runs of the application, switching per call; its best "
                        f"({e(str(online.get('directory', '')))}) selects another algorithm in {len(chosen)} of "
                        f"{online.get('cells', 0)} cells" + (": " + e(", ".join(f"{k} {a}" for k, a in chosen))
                                                             if chosen else "") + ".</p>")
    search = results.get("search")
    if search:
        body.append(f"<p>search (run-time parameters, {search.get('trials', 0)} trials): "
                    + (f"recommends {e(str(search['recommended']))}" if search.get("recommended")
                       else "keep the defaults") + (f"; {e(str(search['verdict']))}" if search.get("verdict") else "")
                    + "</p>")
    if not (tuned or online or search):
        body.append("<p>Nothing: the plan picked no kind of tuning, or none has finished.</p>")

    # -- the application's speedup
    body.append("<h2>The application's speedup</h2>")
    if compare:
        body.append(f"<p class='muted'>The application itself under the library's default and under each tuning, "
                    f"in shuffled blocks ({compare['blocks']} blocks; {e(compare['stop_reason'])}); figure of merit: "
                    f"{e(compare['metric'])}. Speedup = default / tuning (&gt; 1: the tuning is faster), with its "
                    "95% interval and the verdict of tunempi's paired rule.</p>")
        values = [x for v in verdicts if v.get("comparison")
                  for x in (v["comparison"]["low"], v["comparison"]["speedup"], v["comparison"]["high"]) if x > 0]
        span = (min(0.9, min(values) / 1.05), max(1.1, max(values) * 1.05)) if values else (0.9, 1.1)
        body.append("<table><tr><th>tuning</th><th class='num'>runs</th><th class='num'>speedup</th>"
                    "<th class='num'>95% interval</th><th>interval (log scale; grey: 1x)</th><th>verdict</th>"
                    "<th>results</th></tr>")
        default = compare["default"]
        body.append(f"<tr class='default'><td>default</td><td class='num'>{default['runs']}</td><td class='num'>1</td>"
                    "<td></td><td></td><td>baseline</td><td>reference</td></tr>")
        for v in verdicts:
            c = v.get("comparison")
            tone = _VERDICT_TONE.get(v["verdict"], "")
            speed = f"{c['speedup']:.3f}x" if c else "-"
            interval = f"{c['low']:.3f}x - {c['high']:.3f}x" if c else "-"
            bar = _ci_bar(c["low"], c["speedup"], c["high"], span) if c else ""
            body.append(f"<tr class='speedup'><td>{e(v['variant']['name'])}</td><td class='num'>{v['runs']}</td>"
                        f"<td class='num {tone}'>{speed}</td><td class='num'>{interval}</td><td>{bar}</td>"
                        f"<td class='{tone}'>{e(v['verdict'])}</td><td>{e(v['results'])}</td></tr>")
        body.append("</table>")
        for v in verdicts:
            body.append(f"<p class='muted'>{e(v['variant']['name'])}: {e(v['verdict'])}: {e(v['reason'])}</p>")
        expected = recorded_expected(results)
        if expected and tuning_compared(verdicts):
            body.append(f"<p id='expected-vs-compare'>"
                        f"{e(expected_sentence(expected, tuned_comparison(results), other_verdicts(results)))}</p>")
        check = compare.get("result_check", "none")
        changed = [v["variant"]["name"] for v in verdicts if v["results"] == "changed"]
        if check == "none":
            said = ("Results check: none was given (--result REGEX or --result-command CMD): the runs were not "
                    "checked to compute the same.")
        elif default.get("results_vary"):
            said = f"Results check: {check}; the default's own results vary, so no tuning could be judged: " \
                   f"{default['results_vary']}."
        elif changed:
            said = f"Results check: {check}; CHANGED under {', '.join(changed)}."
        else:
            said = f"Results check: {check}; unchanged in every run of every tuning."
        body.append(f"<p id='results-check'><b>{e(said)}</b></p>")
    elif "compare" in outcome.failed:
        body.append(f"<p class='bad'>compare failed: {e(outcome.failed['compare'])}</p>")
    else:
        body.append(f"<p>Not compared: {e(outcome.skipped.get('compare', 'compare has not finished'))}.</p>")

    # -- how to apply it
    body.append("<h2>How to apply it</h2><div class='panel'>")
    specs = dict(spec.split("=", 1) for spec in outcome.variants())
    if best is not None:
        name = best["variant"]["name"]
        body.append(f"<p>{e(name)} made the application faster with evidence "
                    f"({best['comparison']['speedup']:.3f}x):</p>")
        chosen_specs: Mapping[str, str] = {name: specs.get(name, best["variant"].get("tuning_dir") or "")}
    elif compare:
        body.append("<p><b>Keep the library's default</b>: no tuning made the application faster with evidence. "
                    "Each tuning can still be applied as follows:</p>")
        chosen_specs = specs
    else:
        chosen_specs = specs
    for name, where in chosen_specs.items():
        for what, line in apply_lines(name, where, command):
            body.append(f"<div class='muted'>{e(name)}: {e(what)}</div><pre>{e(line)}</pre>")
    if not chosen_specs:
        body.append("<p>Nothing to apply.</p>")
    body.append("</div>")
    body.append(f"<p class='muted'>Rerun the same <code>tunempi autotune</code> command to continue unfinished "
                f"steps; the state is in <code>{e(str(outcome.directory / 'autotune-state.json'))}</code>.</p>")

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".html.tmp")
    temporary.write_text(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>tunempi autotune: {e(Path(command[0]).name if command else '')}</title><style>{_STYLE}{_EXTRA_STYLE}</style>"
        "</head><body><main>" + "\n".join(body) + "</main></body></html>\n", encoding="utf-8")
    temporary.replace(path)
    return path


__all__ = ["apply_lines", "expected_sentence", "other_verdicts", "recorded_expected", "tuned_comparison",
           "write_report"]
