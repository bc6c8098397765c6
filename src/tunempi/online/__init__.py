"""Online tuning inside application runs (docs/online.md).

state.py (the state directory, probabilities, records, the interposer's table), cells.py (tuning cells),
stream.py (the shared random stream, mirroring the C header), switching.py (algorithms and their MPI_T
writes, from the vendor adapter), run.py (run an application in online mode), update.py (estimates,
XGBoost model, bounded probabilities), report.py (show, best). The interposer side is
profile/c/tmpi_online.c.
"""
