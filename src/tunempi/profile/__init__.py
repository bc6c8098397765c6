"""Application profiling: the PMPI interposer (C, generated from the target's mpi.h) and its Python side.

- generate.py / build.py: wrappers from the library's own mpi.h, compiled with its mpicc into a cached .so.
- c/: the interposer runtime (one generated wrapper layer calling per-mode hooks: profile mode, and the
  online mode of tunempi.online as another tmpi_mode).
- run.py: run a launch command with the interposer preloaded into its ranks.
- reader.py: the JSON profile as frozen records; advise.py: what is worth tuning for the application;
  sources.py: the numbers advice uses (measured cells from the results store, the model's predictions).

See docs/profile.md.
"""
