"""A program nobody here wrote, under every algorithm a tuning file of tunempi can select, against a plain run.

HPCC (Debian's source, built against the library's own mpicc by tools/build-hpcc.sh) checks what it computes
(HPL's residuals, PTRANS, RandomAccess errors, "Success"). Round k writes, through tune's own file path
(tune.files.write_tuning_files: the adapter's writer, read back, smoke-checked in the library), the files
that select the k-th file-selectable algorithm of every collective at every size; `tunempi compare` then runs
HPCC under each round and under the library's default, in shuffled blocks, and fails (exit 3) on the first
round whose results differ from the default's. Intel MPI is the case this was written for (its selection
strings); any library works.

Usage: .venv/bin/python bench/foreign_program_under_tuning.py [--mpi impi] [--ranks 2] [--runs 3] [--n 1000]
       [--out DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from app_recipes import HPCC_RESULT, build_hpcc, hpcc_input

from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.rules.ruleset import CommBlock, MsgRule, RuleSet
from tunempi.tune.files import write_tuning_files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="impi")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=Path("foreign-program-under-tuning"))
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    binary = build_hpcc(library.mpicc, out / f"hpcc-{library.name}" / "hpcc")
    (out / "hpccinf.txt").write_text(hpcc_input(args.ranks, args.n))

    selectable = {c: adapter.tuning_file_algorithms(c).selectable for c in adapter.collectives() if c != "barrier"}
    variants: list[str] = []
    for k in range(max(len(names) for names in selectable.values())):
        rule_sets = {c: RuleSet(c, (CommBlock(1, None, (MsgRule(None, names[k]),)),))
                     for c, names in selectable.items() if k < len(names)}
        directory = out / f"round{k + 1}"
        written = write_tuning_files(directory, library, adapter, rule_sets, smoke_ranks=(args.ranks,))
        env_file = out / f"round{k + 1}.env"
        env_file.write_text("".join(f"export {name}='{value}'\n"
                                    for name, value in sorted(written.activation_env(directory).items())))
        variants += ["--variant", f"round{k + 1}={env_file}"]
        print(f"round {k + 1}: " + ", ".join(f"{c} {rs.single_algorithm()}" for c, rs in sorted(rule_sets.items())),
              flush=True)

    argv = [sys.executable, "-m", "tunempi", "compare", "--mpi", library.spec, *variants,
            "--min-runs", str(args.runs), "--max-runs", str(args.runs), "--db", str(out / "compare.sqlite"),
            "--restart", "--result-command", HPCC_RESULT, "--", str(library.mpiexec), "-n", str(args.ranks),
            str(binary)]
    done = subprocess.run(argv, cwd=out, check=False)
    print(f"tunempi compare exit {done.returncode} (0: every round computed what the default computes; "
          "3: a round failed or changed the results)")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
