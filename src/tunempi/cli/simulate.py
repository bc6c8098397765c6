"""`tunempi simulate`: replay a benchmark dataset and compare tuning strategies against the oracle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tunempi.collectives import check_collective
from tunempi.config import resolve
from tunempi.errors import UsageError
from tunempi.report.console import output_console
from tunempi.sim import EXTENSION_POLICY, POLICIES, CostModel
from tunempi.sim.extend import POLICY_HELP
from tunempi.strategy import DEFAULT_STRATEGY, STRATEGIES, make_strategy, setting_value


def _strategies(strategy: str | None, compare: str | None) -> list[str]:
    if strategy and compare:
        raise UsageError("give --strategy or --compare, not both")
    names = [n.strip() for n in (compare or strategy or DEFAULT_STRATEGY).split(",") if n.strip()]
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown or not names:
        raise UsageError(f"unknown strategy {', '.join(unknown) or '(none)'}; valid: {', '.join(STRATEGIES)}")
    return list(dict.fromkeys(names))


def _strategy_params(settings: list[str] | None, names: list[str], space: Any) -> dict[str, dict[str, Any]]:
    """`--param STRATEGY.KEY=VALUE` (VALUE as JSON, else text) -> {strategy: {key: value}}, each checked by
    building the strategy once on the dataset's space (a wrong key or value is a usage error here, not
    a traceback from a worker process)."""
    params: dict[str, dict[str, Any]] = {}
    for setting in settings or []:
        where, equals, text = setting.partition("=")
        name, dot, key = where.partition(".")
        if not (equals and dot and name and key):
            raise UsageError(f"--param {setting!r}: expected STRATEGY.KEY=VALUE, e.g. tunempi.extrapolation=trend")
        if name not in names:
            raise UsageError(f"--param {setting!r}: {name!r} is not among the strategies run ({', '.join(names)})")
        params.setdefault(name, {})[key] = setting_value(text)
    for name, given in params.items():
        try:
            make_strategy(name, space, **given)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--param for {name}: {exc}") from None
    return params


def _policies(text: str | None, train_max_ranks: int | None) -> list[str]:
    """`--policy NAME[,NAME...]` or `all` -> policy names, checked (they need `--train-max-ranks`)."""
    if text is None:
        return []
    if train_max_ranks is None:
        raise UsageError("--policy scores the cells above --train-max-ranks: give --train-max-ranks R")
    names = list(POLICIES) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise UsageError(f"unknown policy {', '.join(unknown) or '(none)'}; valid: all, {', '.join(POLICIES)}")
    return list(dict.fromkeys(names))


def _policy_table(summary: dict[str, Any], collective: str) -> Table:
    first = next(iter(summary["policies"].values()))
    table = Table(title=f"{collective}: {summary['strategy']} trained on <= {summary['train_max_ranks']} ranks, "
                        f"{first['cells']} cells above, {summary['seeds']} seeds")
    for column in ("policy", "mean", "default's", "slower>10%", "worst cell (ranks x bytes)", "worst", "vs default"):
        table.add_column(column, justify="left" if column in ("policy", "worst cell (ranks x bytes)") else "right")
    for name, figures in summary["policies"].items():
        worst = figures["worst"]
        if worst is None:
            table.add_row(name, "-", "-", "-", "-", "-", "-")
            continue
        chosen = " (the library's)" if name == EXTENSION_POLICY else ""
        table.add_row(name + chosen, f"{figures['mean']:.3f}", f"{figures['default_mean']:.3f}",
                      f"{figures['slower_share']:.2f}", f"{worst['ranks']} x {worst['msg_bytes']}",
                      f"{worst['slowdown']:.3f}", f"{worst['vs_default']:.3f}")
    return table


def _fraction(value: float | None, whole: float) -> str:
    return "never" if value is None else f"{value / whole:.3f}"


def _table(summaries: list[dict[str, Any]], collective: str) -> Table:
    table = Table(title=f"{collective}: average slowdown vs oracle (mean over seeds)")
    fractions = list(summaries[0]["slowdown_at_fraction"])
    for column in ("strategy", "final", "geo", "cost/exh", "first<=1.03", "stays<=1.03", "first<=1.02",
                   *[f"@{f}" for f in fractions], "s/iter"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for s in summaries:
        exhaustive = s["exhaustive_cost_s"]
        table.add_row(
            s["strategy"], f"{s['avg_slowdown']:.4f}", f"{s['geo_slowdown']:.4f}", f"{s['cost_fraction']:.3f}",
            _fraction(s["cost_to_1_03_s"], exhaustive), _fraction(s["cost_to_stay_1_03_s"], exhaustive),
            _fraction(s["cost_to_1_02_s"], exhaustive),
            *["-" if s["slowdown_at_fraction"].get(f) is None else f"{s['slowdown_at_fraction'][f]:.3f}"
              for f in fractions],
            f"{s['seconds_per_iteration']:.3f}",
        )
    return table


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate_command(
        dataset: Annotated[str | None, typer.Option(help="Benchmark dataset (CSV, .gz ok); env TUNEMPI_DATASET.")] = None,
        collective: Annotated[str, typer.Option(help="Collective to tune, e.g. allreduce.")] = "allreduce",
        strategy: Annotated[str | None, typer.Option(help=f"One strategy: {', '.join(STRATEGIES)}.")] = None,
        compare: Annotated[str | None, typer.Option(help="Comma list of strategies to compare.")] = None,
        seeds: Annotated[int, typer.Option(min=1, help="Seeds 0..N-1 per strategy.")] = 5,
        budget_fraction: Annotated[float, typer.Option(help="Budget as a fraction of the exhaustive cost.")] = 1.0,
        train_max_ranks: Annotated[int | None, typer.Option(
            help="Only cells with ranks <= R may be measured; all cells are evaluated.")] = None,
        cost_model: Annotated[str, typer.Option(
            help="acclaim: one launch per point (ACCLAiM, OSU sweeps); engine: one launch per layout.")] = "acclaim",
        prior_max_ranks: Annotated[int | None, typer.Option(
            help="Warm start: every point at <= R ranks is known for free; only the cells above are scored.")] = None,
        evaluate_above: Annotated[int | None, typer.Option(
            help="Score only the cells above R ranks (a cold start to compare with --prior-max-ranks R).")] = None,
        jobs: Annotated[int, typer.Option(min=1, help="Run the (strategy, seed) runs in this many processes.")] = 1,
        param: Annotated[list[str] | None, typer.Option(
            "--param", help="A strategy setting, STRATEGY.KEY=VALUE (repeatable; VALUE as JSON, else text), "
                            "e.g. tunempi.extrapolation=trend.")] = None,
        policy: Annotated[str | None, typer.Option(
            help="Score extension policies above --train-max-ranks beside the library's default: all, or a comma "
                 f"list of {', '.join(POLICIES)} (the library's: {EXTENSION_POLICY}); scores the cells above "
                 "--evaluate-above, by default --train-max-ranks.")] = None,
        plot: Annotated[Path | None, typer.Option(help="Write slowdown-vs-cost curves to this PNG.")] = None,
        output_format: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
    ) -> None:
        """Replay a dataset as the benchmark engine and score strategies by slowdown against the oracle."""
        path = resolve(dataset, "DATASET")
        if not path:
            raise UsageError("no dataset: give --dataset FILE or set TUNEMPI_DATASET")
        if output_format not in ("table", "json"):
            raise UsageError(f"unknown format {output_format!r}; valid: table, json")
        if not 0 < budget_fraction <= 10:
            raise UsageError(f"--budget-fraction must be in (0, 10], got {budget_fraction}")
        names = _strategies(strategy, compare)
        policies = _policies(policy, train_max_ranks)
        if policies and evaluate_above is None and prior_max_ranks is None:
            evaluate_above = train_max_ranks
        collective_name = check_collective(collective)
        from tunempi.sim.replay import ReplayBackend, load_frame  # pandas: loaded by this command only
        from tunempi.sim.run import simulate

        frame = load_frame(path)
        if train_max_ranks is not None and train_max_ranks < int(frame["ranks"].min()):
            raise UsageError(f"--train-max-ranks {train_max_ranks} leaves nothing to measure; "
                             f"smallest scale in the dataset: {int(frame['ranks'].min())} ranks")
        model = CostModel.named(cost_model)
        params = _strategy_params(param, names, ReplayBackend(frame, collective_name).space())
        largest = int(frame["ranks"].max())
        for option, value in (("--prior-max-ranks", prior_max_ranks), ("--evaluate-above", evaluate_above)):
            if value is not None and value >= largest:
                raise UsageError(f"{option} {value} leaves no cell to tune; largest scale: {largest} ranks")
        console = output_console(stderr=True)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True, disable=output_format == "json" and not console.is_terminal
                      ) as progress:
            task = progress.add_task(f"simulate {collective_name}", total=len(names) * seeds)

            def advance(name: str, seed: int) -> None:
                progress.update(task, advance=1, description=f"{collective_name}: {name} seed {seed}")

            summaries, _ = simulate(frame, collective_name, names, seeds=seeds, budget_fraction=budget_fraction,
                                    max_ranks=train_max_ranks, on_run=advance, cost_model=model,
                                    prior_max_ranks=prior_max_ranks, evaluate_above=evaluate_above, jobs=jobs,
                                    params=params, policies=policies)
        for summary in summaries:
            summary["collective"] = collective_name
            summary["dataset"] = str(path)
            summary["params"] = params.get(summary["strategy"], {})
        if plot is not None:
            from tunempi.report.curves import plot_slowdown_curves

            plot_slowdown_curves(summaries, plot, title=f"{collective_name} ({Path(path).name})")
        if output_format == "json":
            typer.echo(json.dumps(summaries, indent=1))
            return
        out = output_console()
        if policies:
            for summary in summaries:
                out.print(_policy_table(summary, collective_name))
            for name in policies:
                out.print(f"{name}: {POLICY_HELP[name]}")
            out.print("mean: slowdown against the oracle over the cells above (default's: the library's default on "
                      "the same cells); slower>10%: share of cells (x seeds) over 1.1x the default's; worst: the "
                      "cell most slower than the default")
            return
        out.print(_table(summaries, collective_name))
        scope = "" if summaries[0].get("evaluated_above_ranks") is None else \
            f" (cells above {summaries[0]['evaluated_above_ranks']} ranks)"
        out.print(f"cost model: {summaries[0]['cost_model']}{scope}; default's slowdown: {summaries[0]['default_slowdown']:.3f}; exhaustive cost "
                  f"{summaries[0]['exhaustive_cost_s']:.0f} s; cost fractions are of the exhaustive cost")
        for name, given in params.items():
            out.print(f"{name} settings: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in given.items()))
        if train_max_ranks is not None:
            for s in summaries:
                out.print(f"{s['strategy']}: cells with ranks <= {train_max_ranks}: {s['avg_slowdown_measurable']:.4f}, "
                          f"beyond (extrapolated): {s['avg_slowdown_extrapolated'] or float('nan'):.4f}")
