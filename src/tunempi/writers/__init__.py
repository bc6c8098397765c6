"""Pure syntax: rule sets -> MPICH JSON selection trees, Open MPI dynamic rules files, env files.

Nothing here measures, launches, reads the environment or knows which library it writes for: the
library's default trees, its algorithm ids, leaf parameters and restrictions, and the adapter's env
spellings are passed in. The vendor adapters (mpi/) decide what to write and call these; tune/ loads
the written files into the real library (tune/smoke.py).
"""

from __future__ import annotations

from tunempi.writers.dynamic_rules import read_dynamic_rules, write_dynamic_rules
from tunempi.writers.env_file import EnvFile, read_env_file, write_env_file
from tunempi.writers.selection_json import (
    build_posix_tree,
    build_selection_tree,
    tuned_intra_subtree,
    write_posix_json,
    write_selection_json,
)

__all__ = [
    "EnvFile", "build_posix_tree", "build_selection_tree", "read_dynamic_rules", "read_env_file",
    "tuned_intra_subtree", "write_dynamic_rules", "write_env_file", "write_posix_json", "write_selection_json",
]
