"""tunempi's default strategy: measure where the *decision* is uncertain, per second of benchmark time.

What matters is not the latency surface but which algorithm wins in each cell. The strategy

1. models every algorithm's log latency as a surface all algorithms share (a GP on the per-cell average
   of their residuals from a linear fit: what one algorithm shows in a cell says something about the
   others there) plus a Gaussian process on a linear trend per algorithm (model/gaussian_process.py,
   Matern 3/2 on log features plus log2 bytes-per-rank): it interpolates, extrapolates
   log-linearly beyond the measured range and is uncertain far from data (a forest is the opposite: its
   trees agree where nothing was measured). Inside the measured scales its mean is averaged with a small
   forest's (they err in different places); its std gets a misspecification term growing with the distance,
   in doublings, to the nearest measurement of that algorithm (opt-in, `scale_doubling_weight`: a doubling
   of ranks counts as that many doublings of size);
2. draws joint samples of all algorithms in every cell and computes, per cell, the probability that each
   algorithm is the best and the *expected regret* of the current choice (E[latency(choice)/latency(best)]-1);
   the mean expected regret over the cells estimates the average slowdown still to gain;
3. measures, in a cell, only the algorithms still in contention (P(best) >= `contention`): clearly losing
   algorithms are never benchmarked again there, which saves most launches and the slowest (costliest) runs;
4. scores each measurable cell by the regret it would remove, everywhere in the space (the GP covariance
   says how much measuring this cell tells about the others), divided by its predicted cost (launches x
   overhead + iterations x predicted latency, both learned from the records; for a block collective the
   latency is at least what its bytes take at the best rate any run achieved, `volume_floor`), and
   measures the best few;
   a cell whose contenders are close and noisy keeps a high score, so it is measured again (up to
   `max_repeats` runs per algorithm);
5. stops when the expected regret over the measurable cells stays below `regret_tolerance`.

Selection is the lowest posterior-mean latency per cell. Beyond the largest measured scale (a tuning job
limited to small allocations) it is by default (`extrapolation="carry"`) the selection of that largest
scale, at a message size that moves with the scale as `CARRY_EXPONENT` says for the collective; with
`extrapolation="trend"` the model's log-linear extrapolation decides (worse on both Peak sweeps,
docs/strategies.md, issue 15).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tunempi.collectives import BLOCK_COLLECTIVES
from tunempi.model import TrendGaussianProcess
from tunempi.strategy.base import MeasurementRecord, Request, SelectionTable, Strategy
from tunempi.strategy.forest_selection import ForestFill

#: The shared surface's hyperparameters are re-optimised when its measured cells grew by this factor (else
#: refitted with the previous ones). Every refit costs ~1.5x the model work; 1.25 (the per-algorithm GPs'
#: growth) and 1.1 cost the same as without the surface, and 1.1 selected best of the three (docs/strategies.md).
SHARED_REOPTIMIZE_GROWTH = 1.1

#: How the decision of the largest measured scale E is carried to a larger scale R (`extrapolation="carry"`):
#: a cell of size s at R takes E's decision at size s * (R / E) ** exponent. -1: the same bytes per rank,
#: 0: the same size, 1: the same size times ranks. Where an algorithm switch sits moves with the scale
#: differently per collective, and no one rule (nor the alpha-beta cost model's crossovers) fits all four:
#: chosen per collective from {-1, 0, 1} by the worst of the two Peak sweeps, measured with the true
#: medians and with the strategy itself (docs/strategies.md, issue 15, where the leave-one-sweep-out check
#: is too). Collectives without such evidence keep the rule of what their size means (`_carry_exponent`).
CARRY_EXPONENT: dict[str, float] = {"allreduce": -1.0, "bcast": 1.0, "allgather": 1.0, "alltoall": 0.0}

#: `stairs=COST_STAIRS` (opt-in): a cell is measured only if it is at most this many doublings of ranks and
#: of message size above a cell measured already (while such cells remain). Far above every measured cell
#: the predicted latency, so the predicted cost, can be off by orders of magnitude: after the initial design
#: on Peak allgather, 512 ranks x 1 MiB was predicted at e^7.9 us and took e^13-e^14, and one batch cost 0.17
#: of the exhaustive sweep after 0.014 had been spent. Measured mixed on goal 1 (docs/strategies.md,
#: "Stepping up to costly cells"), so not the default.
COST_STAIRS: tuple[float, float] = (2.0, 4.0)


#: `unmeasured_guard` (issue 28): an algorithm neither measured in a cell nor in a neighbouring size at that
#: scale is not selected there while a measured algorithm's interval (posterior mean +- this many latent
#: standard deviations) overlaps its own; the best measured one is. None: no guard. The catastrophic cells of
#: a replay on a sweep never tuned on were cells whose selected algorithm was never measured: an algorithm
#: measured only where latency is flat has a flat trend, and is predicted several times faster far away.
#: 1 and 2 were replayed on both Peak files, 4 collectives, both cost models, seeds 0-4: within 0.002 of no
#: guard everywhere (docs/strategies.md); 2, the stronger, catches the extrapolated cells 1 leaves (the
#: seeded test in tests/unit/test_strategy_contract.py).
UNMEASURED_GUARD: float | None = 2.0


def _carry_exponent(collective: str) -> float:
    """`CARRY_EXPONENT`'s value, else 0 for a per-peer block (allgatherv, gather, ...: OSU's convention)
    and -1 for a whole buffer (reduce, ...: their algorithms split it among the ranks)."""
    if collective in CARRY_EXPONENT:
        return CARRY_EXPONENT[collective]
    return 0.0 if collective in BLOCK_COLLECTIVES else -1.0


class TunempiStrategy(Strategy):
    name = "tunempi"
    derived_features = True

    def __init__(
        self,
        space: Any,
        *,
        batch_size: int = 3,
        max_batch: int = 24,
        batch_cost_fraction: float = 0.03,
        contention: float = 0.05,
        n_samples: int = 256,
        regret_tolerance: float = 0.002,
        patience: int = 3,
        max_repeats: int = 3,
        reoptimize_growth: float = 1.25,
        max_reoptimize: int = 2,
        uncertainty_scale: float = 1.0,
        trust_measurements: float = 0.0,
        distance_uncertainty: float = 0.1,
        scale_doubling_weight: float = 1.0,
        forest_blend: float = 0.5,
        extrapolation: str = "carry",
        carry_exponent: float | None = None,
        shared_surface: bool = True,
        stairs: tuple[float, float] | None = None,
        volume_floor: bool = True,
        unmeasured_guard: float | None = UNMEASURED_GUARD,
        **kwargs: Any,
    ) -> None:
        super().__init__(space, **kwargs)
        self.batch_size = batch_size
        self.max_batch = max(max_batch, batch_size)
        self.batch_cost_fraction = batch_cost_fraction
        self.contention = contention
        self.n_samples = n_samples
        self.regret_tolerance = regret_tolerance
        self.patience = patience
        self.max_repeats = max_repeats
        self.reoptimize_growth = reoptimize_growth
        self.max_reoptimize = max_reoptimize
        self.uncertainty_scale = uncertainty_scale
        self.trust_measurements = trust_measurements
        self.distance_uncertainty = distance_uncertainty
        if scale_doubling_weight <= 0:
            raise ValueError(f"scale_doubling_weight must be positive, got {scale_doubling_weight!r}")
        self.scale_doubling_weight = scale_doubling_weight
        self.forest_blend = forest_blend
        if extrapolation not in ("trend", "carry"):
            raise ValueError(f"extrapolation must be 'trend' or 'carry', got {extrapolation!r}")
        self.extrapolation = extrapolation
        self.shared_surface = shared_surface
        self.volume_floor = volume_floor
        self.unmeasured_guard = unmeasured_guard
        self.stairs = None if stairs is None else (float(stairs[0]), float(stairs[1]))
        self._shared: TrendGaussianProcess | None = None
        self._shared_at = np.zeros(0)
        self._shared_optimized_at = 0
        #: None: the collective's `CARRY_EXPONENT`; a number overrides it (experiments).
        self.carry_exponent = _carry_exponent(space.collective) if carry_exponent is None else carry_exponent
        self._forest = ForestFill(n_estimators=50, random_state=self.seed)
        raw = space.features()
        #: log2 ranks and log2 message size of every cell: grid distances in doublings.
        self._log_grid = raw[:, [0, 3]]
        self._models: dict[int, TrendGaussianProcess] = {}
        self._optimized_at: dict[int, int] = {}
        self._fitted_on = -1
        self._below = 0
        self._initial_done = False
        self.expected_regret_: float | None = None
        self._first_regret: float | None = None
        self._posterior_cache: tuple[int, tuple[np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, float]]]] | None = None

    # -- model ----------------------------------------------------------------------------------
    def _fit(self) -> None:
        """(Re)fit one GP per algorithm; hyperparameters re-optimised only when the data grew enough."""
        if self._fitted_on == len(self.records):
            return
        self._fitted_on = len(self.records)
        cells, algorithms, target = self.training_rows()
        if self.shared_surface:
            target = target - self._fit_shared(cells, algorithms, target)
        # Hyperparameter optimisation dominates the time of an iteration: at most `max_reoptimize`
        # algorithms per iteration, those whose data grew most since their last optimisation.
        growth = {int(j): (algorithms == j).sum() / max(self._optimized_at.get(int(j), 0), 1)
                  for j in np.unique(algorithms) if int(j) in self._models}
        due = sorted((g, j) for j, g in growth.items() if g >= self.reoptimize_growth)[::-1]
        reoptimize = {j for _, j in due[: self.max_reoptimize]}
        for j in np.unique(algorithms):
            rows = algorithms == j
            n = int(rows.sum())
            previous = self._models.get(int(j))
            optimize = previous is None or int(j) in reoptimize
            model = TrendGaussianProcess(
                kernel=None if previous is None else previous.kernel_, optimize=optimize,
                random_state=self.seed,
            ).fit(self.row_features[cells[rows]], target[rows])
            if optimize:
                self._optimized_at[int(j)] = n
            self._models[int(j)] = model

    def _fit_shared(self, cells: np.ndarray, algorithms: np.ndarray, target: np.ndarray) -> np.ndarray:
        """`shared_surface` (the default since issue 15, docs/strategies.md): what all algorithms share.
        Per algorithm a linear fit is removed, the residuals are averaged per measured cell, and a GP is
        fitted to those averages; the per-algorithm GPs then model what is left, so a cell's measured
        algorithms inform its unmeasured ones (the selection's excess slowdown sits mostly in cells never
        measured). Returns the surface at each training row (subtracted before the per-algorithm fits,
        added back in the posterior mean)."""
        residual = np.zeros_like(target)
        for j in np.unique(algorithms):
            rows = algorithms == j
            design = np.hstack([np.ones((rows.sum(), 1)), self.row_features[cells[rows]]])
            coef = np.linalg.lstsq(design.T @ design + 1e-2 * np.eye(design.shape[1]), design.T @ target[rows],
                                   rcond=None)[0]
            residual[rows] = target[rows] - design @ coef
        unique, inverse = np.unique(cells, return_inverse=True)
        sums = np.bincount(inverse, weights=residual)
        counts = np.bincount(inverse)
        if len(unique) < 5:
            self._shared = None
            self._shared_at = np.zeros(len(self.row_features))
            return np.zeros_like(target)
        # Like the per-algorithm GPs: hyperparameters re-optimised only when the cells grew enough.
        previous = self._shared
        optimize = previous is None or len(unique) >= SHARED_REOPTIMIZE_GROWTH * self._shared_optimized_at
        self._shared = TrendGaussianProcess(
            kernel=None if previous is None else previous.kernel_, optimize=optimize, random_state=self.seed,
        ).fit(self.row_features[unique], sums / counts)
        if optimize:
            self._shared_optimized_at = len(unique)
        self._shared_at = self._shared.predict(self.row_features)
        return self._shared_at[cells]

    def _posterior(self) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, float]]]:
        """Mean and latent std (cells x algorithms) and, per algorithm, the latent covariance over cells.

        Cached on the number of records: `select()` between `ask()` and `tell()` (the replay's curve, the
        live tuner's progress) sees the same data, and this is most of an iteration's time. Callers must
        not modify the arrays in place."""
        if self._posterior_cache is not None and self._posterior_cache[0] == len(self.records):
            return self._posterior_cache[1]
        posterior = self._compute_posterior()
        self._posterior_cache = (len(self.records), posterior)
        return posterior

    def _compute_posterior(self) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, float]]]:
        self._fit()
        shape = self.usable_mask().shape
        mean = np.full(shape, np.nan)
        std = np.full(shape, np.nan)
        covariance: dict[int, tuple[np.ndarray, float]] = {}
        measured_log = self.measured_median_log()
        for j, model in self._models.items():
            residual, cov = model.gp_.predict(self.cell_features, return_cov=True)
            cov = cov - model.noise_ * np.eye(len(cov))
            mean[:, j] = model.coef_[0] + self.cell_features @ model.coef_[1:] + residual
            if self._shared is not None:  # fitted only with `shared_surface`
                mean[:, j] += self._shared_at[: len(self.cell_features)]
            std[:, j] = self.uncertainty_scale * np.sqrt(np.maximum(np.diag(cov), 1e-12))
            if self.distance_uncertainty > 0:
                # The model is wrong in ways its own variance does not show (protocol switches,
                # fallbacks): add doubt that grows with the distance, in doublings of ranks or size, to
                # the nearest cell where this algorithm was measured. `scale_doubling_weight` > 1 doubts
                # a trend carried across scales sooner: more robust when the initial design misses how
                # an algorithm scales, not better on Peak (docs/measurements/strategies.md, "Where issue 15 stands").
                measured_at = np.flatnonzero(np.isfinite(measured_log[:, j]))
                if len(measured_at):
                    steps = np.abs(self._log_grid[:, None, :] - self._log_grid[None, measured_at, :])
                    gap = np.maximum(steps[:, :, 0] * self.scale_doubling_weight, steps[:, :, 1])  # ranks, size
                    distance = gap.min(axis=1)
                    std[:, j] = np.sqrt(std[:, j] ** 2 + (self.distance_uncertainty * distance) ** 2)
            covariance[j] = (cov, model.noise_)
            if self.trust_measurements > 0:
                # A measured median far from the posterior (more than `trust_measurements` noise
                # standard deviations) is a real jump the smooth model cannot follow: believe it.
                measured = measured_log[:, j]
                far = np.abs(measured - mean[:, j]) > self.trust_measurements * np.sqrt(model.noise_)
                mean[far, j] = measured[far]
        if self.forest_blend > 0:
            # Forests and GPs err in different places (steps vs. smooth trends): averaging their log
            # predictions selected better than either alone on the Peak sweeps. Uncertainty stays the GP's.
            # Beyond the measured scales a forest predicts flat: there the GP's trend alone extrapolates.
            forest = self._forest.predict(self)
            largest = max((r.cell.ranks for r in self.records if r.ok), default=0)  # none ok: GP alone
            inside = np.array([c.ranks <= largest for c in self.space.cells])[:, None]
            blended = (1 - self.forest_blend) * mean + self.forest_blend * forest
            mean = np.where(np.isfinite(forest) & inside, blended, mean)
        return mean, std, covariance

    def select(self) -> SelectionTable:
        """The lowest estimate per cell, with `unmeasured_guard`'s exception inside the measured scales."""
        table = super().select()
        if self.unmeasured_guard is None or not self.records:
            return table
        mean, std, _ = self._posterior()
        measured = np.isfinite(self.measured_median_log()) & self.usable_mask()
        largest = max((r.cell.ranks for r in self.records if r.ok), default=0)
        index = {(c.scale, c.msg_bytes): i for i, c in enumerate(self.space.cells)}
        sizes = sorted({c.msg_bytes for c in self.space.cells})
        for i, cell in enumerate(self.space.cells):
            chosen = table.get(cell)
            if cell.ranks > largest or chosen not in self._algorithm_index:
                continue  # beyond the measured scales the carried decision holds (nothing measured there)
            j = self._algorithm_index[chosen]
            at = sizes.index(cell.msg_bytes)
            near = [index[(cell.scale, sizes[k])] for k in (at - 1, at, at + 1)
                    if 0 <= k < len(sizes) and (cell.scale, sizes[k]) in index]
            others = [k for k in np.flatnonzero(measured[i]) if k != j and np.isfinite(mean[i, k])]
            if any(measured[n, j] for n in near) or not others or not np.isfinite(mean[i, j]):
                continue
            best = min(others, key=lambda k: mean[i, k])
            z = self.unmeasured_guard
            if mean[i, j] + z * std[i, j] >= mean[i, best] - z * std[i, best]:
                table[cell] = self.space.algorithms[best]
        return table

    def estimate_log_latency(self) -> np.ndarray:
        if not self.records:
            return np.full(self.usable_mask().shape, np.nan)
        mean, _, _ = self._posterior()
        if self.extrapolation == "carry":
            return self._carry_beyond_measured(mean)
        return mean

    def _carry_beyond_measured(self, mean: np.ndarray) -> np.ndarray:
        """Selection beyond the largest measured scale E: at a larger scale R, a cell of size s gets the
        estimates (so the decision) of E's cell nearest to size s * (R / E) ** `carry_exponent`. The
        model's log-linear trend, fitted mostly on smaller scales, does not know where algorithm switches
        move: on the Peak sweeps (--train-max-ranks 128) it selected up to 57 % slower algorithms above
        the measured scales, this rule 3-10 % (docs/strategies.md, issue 15)."""
        measured = [r.cell.ranks for r in self.records if r.ok]
        if not measured:
            return mean
        largest = max(measured)
        # E's cells per layout (nodes, ppn): a rank count can come as several layouts (32 = 2 x 16 = 4 x 8).
        edge: dict[tuple[int, int], list[int]] = {}
        for i, c in enumerate(self.space.cells):
            if c.ranks == largest:
                edge.setdefault((c.nodes, c.ppn), []).append(i)
        if not edge:
            return mean
        log_size = np.log2([max(c.msg_bytes, 1) for c in self.space.cells])
        carried = mean.copy()
        for i, cell in enumerate(self.space.cells):
            if cell.ranks <= largest:
                continue
            # The layout with the same ranks per node if E has one, else the one spread over most nodes.
            same_ppn = [layout for layout in edge if layout[1] == cell.ppn]
            anchors = edge[same_ppn[0] if same_ppn else max(edge)]
            target = max(cell.msg_bytes, 1) * (cell.ranks / largest) ** self.carry_exponent
            anchor = anchors[int(np.argmin(np.abs(log_size[anchors] - np.log2(max(target, 1)))))]
            row = mean[anchor]
            if np.isfinite(row[self.usable_mask()[i]]).any():
                # Algorithms without an estimate at the anchor are not chosen here.
                carried[i] = np.where(np.isfinite(row), row, np.inf)
        return carried

    # -- decision uncertainty ---------------------------------------------------------------------
    def _decision(self, mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per cell: index of the chosen algorithm, expected regret, P(best) per algorithm."""
        usable = self.usable_mask() & np.isfinite(mean)
        # Algorithms never measured anywhere have no model: they are in contention everywhere.
        big = np.where(usable, mean, np.inf)
        chosen = np.argmin(big, axis=1)
        rng = np.random.default_rng(self.rng.integers(2**32))
        draws = mean[None] + std[None] * rng.standard_normal((self.n_samples, *mean.shape))
        draws = np.where(usable[None], draws, np.inf)
        best = draws.min(axis=2)
        rows = np.arange(len(chosen))
        regret = np.mean(np.exp(np.minimum(draws[:, rows, chosen] - best, 5.0)), axis=0) - 1.0
        regret[~usable.any(axis=1)] = 0.0
        winners = draws.argmin(axis=2)
        p_best = np.zeros(mean.shape)
        for j in range(mean.shape[1]):
            p_best[:, j] = (winners == j).mean(axis=0)
        p_best[~usable] = 0.0
        return chosen, regret, p_best

    # -- cost ----------------------------------------------------------------------------------
    def _paid_runs(self) -> list[tuple[MeasurementRecord, float]]:
        """The successful runs this strategy paid for, each with its overhead: the seconds beyond its
        iterations (launches, setup)."""
        return [(r, max(r.cost_s - r.iterations * r.measured_us * 1e-6, 0.0))
                for r in self.records if r.ok and r.cost_s > 0]

    def _predicted_cost(self, mean: np.ndarray, paid: list[tuple[MeasurementRecord, float]]) -> np.ndarray:
        """(cells x algorithms) seconds a run would cost, from what the paid runs say about costs."""
        ok = [r for r, _ in paid]
        overhead = float(np.median([o / max(r.launches, 1) for r, o in paid])) if paid else 1.0
        sizes = np.array(sorted({r.cell.msg_bytes for r in ok})) if ok else np.array([])
        iterations_at = {r.cell.msg_bytes: r.iterations for r in ok}
        per_cell = np.ones(len(self.space.cells))
        if len(sizes):
            for i, cell in enumerate(self.space.cells):
                nearest = sizes[int(np.argmin(np.abs(np.log2(sizes) - np.log2(max(cell.msg_bytes, 1)))))]
                per_cell[i] = iterations_at[int(nearest)]
        latency_us = np.exp(np.where(np.isfinite(mean), mean, np.nanmax(mean) if np.isfinite(mean).any() else 0.0))
        if self.volume_floor:
            latency_us = np.maximum(latency_us, self._volume_floor_us(ok)[:, None])
        return overhead + per_cell[:, None] * latency_us * 1e-6

    def _volume_floor_us(self, ok: list[MeasurementRecord]) -> np.ndarray:
        """Per cell, the least latency a block collective can have (0 for the others): each rank receives or
        sends (ranks - 1) x size bytes, at no more bytes per microsecond than the best run at that size or
        larger achieved (rates grow with the size, so smaller sizes' would overstate the floor). Far above
        the measured cells the model's trend can be 100x low on exactly these cells, and so the cost it
        predicts (the case under `COST_STAIRS`; docs/measurements/strategies.md, "A floor under the predicted cost")."""
        cells = self.space.cells
        floor = np.zeros(len(cells))
        runs = [r for r in ok if r.cell.ranks > 1 and r.latency_us]  # every ok run has a latency (for mypy)
        if self.space.collective not in BLOCK_COLLECTIVES or not runs:
            return floor
        sizes = np.array([r.cell.msg_bytes for r in runs])
        rates = np.array([(r.cell.ranks - 1) * r.cell.msg_bytes / (r.latency_us or 1.0) for r in runs])
        order = np.argsort(sizes)
        sizes = sizes[order]
        best_at_or_above = np.maximum.accumulate(rates[order][::-1])[::-1]
        first = np.searchsorted(sizes, [c.msg_bytes for c in cells])  # first run at that size or larger
        volume = np.array([(c.ranks - 1) * c.msg_bytes for c in cells], dtype=float)
        measured = first < len(sizes)
        floor[measured] = volume[measured] / best_at_or_above[first[measured]]
        return floor

    def _layout_launches(self, paid: list[tuple[MeasurementRecord, float]]) -> tuple[float, set[tuple[int, int, int]]]:
        """Where runs share one launch per layout (paid runs with no launch of their own): the seconds a
        launch costs and the layouts already launched; (0, all) where every run pays its own launch."""
        if not any(r.launches == 0 for r, _ in paid):
            return 0.0, {c.scale for c in self.space.cells}
        per_launch = [o / r.launches for r, o in paid if r.launches > 0]
        launched = {r.cell.scale for r in self.records if r.cost_s > 0}
        return (float(np.median(per_launch)) if per_launch else 0.0), launched

    def _within_stairs(self, stairs: tuple[float, float]) -> np.ndarray:
        """Per cell: at most `stairs` doublings (ranks, size) above some measured cell (anything below
        one is within): where the predicted cost can be trusted."""
        measured = np.flatnonzero(self.measured_counts().sum(axis=1) > 0)
        if len(measured) == 0:
            return np.ones(len(self.space.cells), dtype=bool)
        above = self._log_grid[:, None, :] - self._log_grid[None, measured, :]
        return ((above[:, :, 0] <= stairs[0]) & (above[:, :, 1] <= stairs[1])).any(axis=1)

    # -- ask/tell ---------------------------------------------------------------------------------
    def _initial_cells(self) -> list[int]:
        """Cheap corners and middle of the measurable space (never the largest scale x largest size)."""
        cells = self.measurable.cells
        scales = sorted({c.scale for c in cells})
        sizes = sorted({c.msg_bytes for c in cells})
        lo_s, mid_s, hi_s = scales[0], scales[len(scales) // 2], scales[-1]
        lo_m, mid_m, hi_m = sizes[0], sizes[len(sizes) // 2], sizes[-1]
        wanted = [(lo_s, lo_m), (lo_s, hi_m), (hi_s, lo_m), (mid_s, mid_m), (hi_s, mid_m)]
        chosen = []
        for scale, size in dict.fromkeys(wanted):
            matches = [c for c in cells if c.scale == scale and c.msg_bytes == size]
            if matches:
                index = self.space.index(matches[0])
                if self.measured_counts()[index].sum() == 0:
                    chosen.append(index)
        return chosen

    def _ask(self) -> list[Request]:
        if not self._initial_done:
            self._initial_done = True
            initial = self._initial_cells()
            if initial:
                return [self.full_request(i) for i in initial]
        mean, std, covariance = self._posterior()
        # Algorithms without any data yet: make them maximally uncertain rather than invisible.
        unknown = ~np.isfinite(mean) & self.usable_mask()
        if unknown.any():
            fill = np.nanmean(mean) if np.isfinite(mean).any() else 0.0
            mean = np.where(unknown, fill, mean)
            std = np.where(unknown, 3.0, std)
        chosen, regret, p_best = self._decision(mean, std)
        measurable_regret = float(regret[self._measurable_mask].mean())
        self.expected_regret_ = measurable_regret
        self._first_regret = self._first_regret or measurable_regret
        self._below = self._below + 1 if measurable_regret < self.regret_tolerance else 0
        if self._below >= self.patience:
            return []

        counts = self.measured_counts()
        contenders = (p_best >= self.contention) & self.usable_mask()
        rows = np.arange(len(chosen))
        contenders[rows, chosen] |= self.usable_mask()[rows, chosen]  # the current choice is always checked
        contenders &= counts < self.max_repeats
        contenders[~self._measurable_mask] = False
        n_contenders = np.maximum(((p_best >= self.contention) & self.usable_mask()).sum(axis=1), 1)
        paid = self._paid_runs()
        cost = np.where(contenders, self._predicted_cost(mean, paid), 0.0).sum(axis=1)

        # fraction[k, i]: share of cell k's contenders' variance removed by measuring them in cell i.
        fraction = np.zeros((len(chosen), len(chosen)))
        in_contention = (p_best >= self.contention) & self.usable_mask()
        for j, (cov, noise) in covariance.items():
            var = np.maximum(np.diag(cov), 1e-12)
            reduction = cov**2 / (var[None, :] + noise) / var[:, None]
            fraction += reduction * in_contention[:, j][:, None] * contenders[:, j][None, :]
        fraction /= n_contenders[:, None]
        # Algorithms with no model yet: measuring them anywhere is worth their cell's regret.
        fraction += np.diag(unknown.any(axis=1) & contenders.any(axis=1)).astype(float)
        np.clip(fraction, 0.0, 1.0, out=fraction)

        remaining = regret.copy()
        requests: list[Request] = []
        candidates = np.flatnonzero(self._measurable_mask & contenders.any(axis=1))
        if self.stairs is not None:
            near = self._within_stairs(self.stairs)[candidates]
            if near.any():
                candidates = candidates[near]
        batch_cost = 0.0
        # The batch's cost counts the launch of each layout not launched yet: a cell's predicted cost
        # leaves it out (its value per cost would shun new scales, docs/strategies.md), but where points
        # share a launch per layout, one pick at a new layout can cost more than the rest of the batch.
        launch_s, launched = self._layout_launches(paid)
        for picked in range(self.max_batch):
            # At least `batch_size` cells; more while the batch is cheap next to what was spent so far
            # (points that cost milliseconds, as in a running engine, are not worth a model refit each).
            if len(candidates) == 0 or (picked >= self.batch_size
                                        and batch_cost >= self.batch_cost_fraction * self.spent_s):
                break
            value = (remaining @ fraction[:, candidates]) / np.maximum(cost[candidates], 1e-9)
            best = int(np.argmax(value))
            if value[best] <= 0:
                break
            pick = int(candidates[best])
            algorithms = tuple(a for j, a in enumerate(self.space.algorithms) if contenders[pick, j])
            requests.append(Request(self.space.cells[pick], algorithms))
            remaining = remaining * (1.0 - fraction[:, pick])
            batch_cost += float(cost[pick])
            if self.space.cells[pick].scale not in launched:
                batch_cost += launch_s
                launched.add(self.space.cells[pick].scale)
            candidates = np.delete(candidates, best)
        return requests

    def convergence(self) -> float:
        if self.expected_regret_ is None or not self._first_regret:
            return 0.0
        if self.expected_regret_ <= self.regret_tolerance:
            return 1.0
        span = np.log(self._first_regret / self.regret_tolerance)
        done = np.log(self._first_regret / self.expected_regret_)
        return float(np.clip(done / span if span > 0 else 1.0, 0.0, 1.0))
