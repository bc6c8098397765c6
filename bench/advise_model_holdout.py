"""How well `tunempi advise`'s model predicts cells that were never measured (not a test).

Imports a benchmark dataset into a temporary results store, keeps every other power-of-two message size
(4, 16, 64, ...) for training and predicts the others (8, 32, 128, ...) with
`profile.sources.PredictedCells`, per collective. Reports how often the predicted best algorithm is the
measured best, the regret of the predicted choice (its measured latency / the measured best - 1) and the
error of the predicted default latency.

    .venv/bin/python bench/advise_model_holdout.py data/ornl-peak-pr7730.csv.gz [--collective allreduce]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from tunempi.profile.advise import Cell
from tunempi.profile.sources import DEFAULT, PredictedCells, cell_table
from tunempi.store.exchange import import_dataset
from tunempi.store.results import ResultStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--collective", default=None, help="one collective (default: every one in the file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunempi-holdout-") as tmp:
        with ResultStore(Path(tmp) / "r.sqlite") as store:
            import_dataset(store, args.dataset)
            records = store.query(status="ok", **({"collective": args.collective} if args.collective else {}))
    for library in sorted({m.library for m in records}):
        for collective in sorted({m.collective for m in records if m.library == library}):
            own = [m for m in records if m.library == library and m.collective == collective]
            held = {m.msg_bytes for m in own if m.msg_bytes > 0 and (m.msg_bytes.bit_length() - 1) % 2 == 1}
            start = time.perf_counter()
            model = PredictedCells([m for m in own if m.msg_bytes not in held])
            hits, regrets, default_errors = 0, [], []
            for (c, r, n, p, s), latencies in cell_table([m for m in own if m.msg_bytes in held]).items():
                perf = model.performance(Cell(c, r, n, p, s))
                if perf is None or DEFAULT not in latencies or perf.best_algorithm not in latencies:
                    continue
                best = min(latencies, key=lambda a: latencies[a])
                hits += perf.best_algorithm == best
                regrets.append(latencies[perf.best_algorithm] / latencies[best] - 1)
                default_errors.append(abs(perf.default_us / latencies[DEFAULT] - 1))
            if not regrets:
                continue
            print(f"{library} {collective}: {len(regrets)} held-out cells, predicted best = measured best in "
                  f"{100 * hits / len(regrets):.0f} %, regret median {100 * np.median(regrets):.1f} % mean "
                  f"{100 * np.mean(regrets):.1f} %, default latency error median "
                  f"{100 * np.median(default_errors):.1f} % ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
