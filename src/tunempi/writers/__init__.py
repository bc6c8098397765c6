"""Pure functions: rule sets -> MPICH JSON tuning file, Open MPI dynamic rules file, env file.

Nothing here measures, launches or reads the environment; inputs (the library's default tree, its
algorithm ids, the adapter's env spellings) are passed in. `writers.smoke` is the one exception: it
loads a written file into the real library (compiled with mpi.build, launched through launch/).
"""

from __future__ import annotations

from tunempi.writers.env_file import EnvFile, read_env_file, write_env_file
from tunempi.writers.mpich_json import (
    MpichCall,
    build_mpich_posix_tree,
    build_mpich_tree,
    select_mpich,
    tuned_intra_subtree,
    write_mpich_json,
    write_mpich_posix_json,
)
from tunempi.writers.openmpi_rules import (
    read_openmpi_rules,
    select_openmpi,
    write_openmpi_rules,
)

__all__ = [
    "EnvFile", "MpichCall", "build_mpich_posix_tree", "build_mpich_tree", "read_env_file", "read_openmpi_rules", "select_mpich",
    "select_openmpi", "tuned_intra_subtree", "write_env_file", "write_mpich_json", "write_mpich_posix_json",
    "write_openmpi_rules",
]
