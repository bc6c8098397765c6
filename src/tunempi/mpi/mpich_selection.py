"""MPICH's collective-selection JSON trees: the built-in ones read out of the library, and an evaluator.

The evaluator (`select_mpich`) walks a tree the way MPICH's csel search does, for a call described by
`MpichCall`: the adapter uses it to tell the library's own choice (MpichAdapter.default_choice), the
tests to check written files.

MPICH ships no default tuning file: the default trees are C strings compiled into libmpi. A tuning
file replaces a whole tree, and a tree that lacks a collective aborts MPI_Init (`Assertion ... cnt`),
so a tuned file must be the library's own default tree with the tuned subtrees swapped in. This module
finds the trees by scanning the shared object's bytes for NUL-terminated strings that start with
`{"collective=` and parse as JSON (no dependency on the `strings` binary).

MPICH 5.0.2 (the embedded wheel, lib/libmpi.so.12) holds three trees, told apart by their leaves:

| level | leaves | control variable that replaces it |
|---|---|---|
| mpir  | `algorithm=MPIR_<Coll>_{intra,inter,allcomm}_<name>` | MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE |
| ch4   | `composition=MPIDI_<Coll>_intra_composition_<greek>` | MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE |
| posix | `algorithm=MPIDI_POSIX_mpi_<coll>_<name>` | MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE |

The library also holds the table of every leaf key its JSON parser accepts (`algorithm=...` and
`composition=...` strings); `known_leaves` returns it so the writer can refuse a name MPICH would abort on.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunempi.errors import MPIError, UsageError
from tunempi.mpi.library import MPILibrary

LEVELS: tuple[str, ...] = ("mpir", "ch4", "posix")

#: Which control variable loads a file that replaces the tree of each level.
TUNING_FILE_CVAR: dict[str, str] = {
    "mpir": "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE",
    "ch4": "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE",
    "posix": "MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE",
}

_TREE_START = re.compile(rb'\{"collective=')
_LEAF_KEY = re.compile(rb"(?<=\x00)((?:algorithm|composition)=[A-Za-z0-9_]+)(?=\x00)")
_LEAF_IN_TREE = re.compile(r'"((?:algorithm|composition)=[A-Za-z0-9_]+)"')


@dataclass(frozen=True)
class DefaultTree:
    """One built-in selection tree: its level, the parsed JSON, and where it was found."""

    level: str  # one of LEVELS
    tree: dict
    offset: int  # byte offset in the library, for the record

    @property
    def cvar(self) -> str:
        return TUNING_FILE_CVAR[self.level]


@functools.lru_cache(maxsize=16)
def _link_dirs(mpicc: str) -> tuple[Path, ...]:
    """The -L directories MPICH's compiler wrapper links with (`mpicc -show`)."""
    try:
        shown = subprocess.run([mpicc, "-show"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(Path(token[2:]) for token in shown.split() if token.startswith("-L") and len(token) > 2)


def find_libmpi(library: MPILibrary | Path) -> Path:
    """The real (non-symlink, non-ABI) libmpi shared object of an MPICH library (or under a prefix).

    The embedded wheel has <prefix>/lib/libmpi.so.12; Debian's MPICH has
    /usr/lib/x86_64-linux-gnu/libmpich.so.12, found through the wrapper's -L directories.
    """
    prefix = library.prefix if isinstance(library, MPILibrary) else Path(library)
    dirs = [prefix / "lib"] + (list(_link_dirs(str(library.mpicc))) if isinstance(library, MPILibrary) else [])
    for directory in dirs:
        candidates = sorted(
            path for pattern in ("libmpi.so*", "libmpich.so*") for path in directory.glob(pattern)
            if path.is_file() and not path.is_symlink() and path.stat().st_size > 4096
        )
        if candidates:
            return candidates[-1]
    raise MPIError(f"no libmpi.so* or libmpich.so* in {', '.join(str(d) for d in dirs)}")


def classify_tree(tree: dict) -> str:
    """The level a tree belongs to, from its leaves."""
    leaves = set(_LEAF_IN_TREE.findall(json.dumps(tree)))
    if any(leaf.startswith("composition=") for leaf in leaves):
        return "ch4"
    if leaves and all(leaf.startswith("algorithm=MPIDI_POSIX_") for leaf in leaves):
        return "posix"
    if any(leaf.startswith("algorithm=MPIR_") for leaf in leaves):
        return "mpir"
    raise MPIError(f"cannot tell which level a built-in tree belongs to (leaves: {sorted(leaves)[:5]})")


def scan_trees(data: bytes) -> list[DefaultTree]:
    """Every selection tree embedded in a library image, in file order."""
    trees = []
    for match in _TREE_START.finditer(data):
        end = data.find(b"\x00", match.start())
        if end < 0:
            continue
        try:
            tree = json.loads(data[match.start():end].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue  # a fragment that only looks like a tree
        if isinstance(tree, dict) and tree:
            trees.append(DefaultTree(classify_tree(tree), tree, match.start()))
    return trees


def default_trees(library_file: Path) -> dict[str, DefaultTree]:
    """level -> built-in tree of an MPICH library file (libmpi.so.*)."""
    trees: dict[str, DefaultTree] = {}
    for found in scan_trees(Path(library_file).read_bytes()):
        if found.level in trees:
            raise MPIError(f"{library_file}: two built-in {found.level} trees (offsets "
                           f"{trees[found.level].offset} and {found.offset}); cannot tell which is used")
        trees[found.level] = found
    if "mpir" not in trees:
        raise MPIError(f"{library_file}: no built-in MPIR selection tree found (is this MPICH >= 3.4?)")
    return trees


def known_leaves(library_file: Path) -> frozenset[str]:
    """Every `algorithm=...`/`composition=...` key the library's JSON parser accepts."""
    return frozenset(m.decode() for m in _LEAF_KEY.findall(Path(library_file).read_bytes()))


# --- evaluation: what MPICH's selection search picks for a call ----------------------------------------


@dataclass(frozen=True)
class MpichCall:
    """The arguments of one collective call as MPICH's selection sees them (intracommunicator)."""

    collective: str
    comm_size: int
    count: int  # count (allreduce/bcast/reduce), sendcount (alltoall), recvcount (allgather, r_s_block)
    type_size: int = 1
    is_commutative: bool = True
    is_op_built_in: bool = True
    sendbuf_inplace: bool = False
    hierarchical: bool = False  # comm_hierarchy=parent: the communicator spans several nodes
    multi_threaded: bool = False
    nodes: int = 1  # the nodes the communicator spans (comm_avg_ppn); 0: it has no node information

    def avg_msg_size(self) -> int:
        if self.collective not in ("allreduce", "bcast", "reduce", "alltoall"):
            raise UsageError(f"MPICH asserts on avg_msg_size for {self.collective}")
        return self.count * self.type_size

    def total_msg_size(self) -> int:
        if self.collective in ("gatherv", "scatterv"):
            raise UsageError(f"MPICH asserts on total_msg_size for {self.collective}")
        if self.collective in ("gather", "scatter"):
            return self.count * self.comm_size  # MPICH drops the type size here
        if self.collective == "reduce_scatter":
            return self.count * self.comm_size * self.type_size  # regular blocks of `count`
        return self.count * self.type_size * self.comm_size

    def mpich_count(self) -> int:
        return self.count * self.comm_size if self.collective == "reduce_scatter" else self.count

    @classmethod
    def from_osu(cls, collective: str, msg_bytes: int, comm_size: int, type_size: int = 1, **flags: Any) -> MpichCall:
        """The call an OSU benchmark makes for `msg_bytes` (per-rank buffer or per-destination block)."""
        if msg_bytes % type_size:
            raise UsageError(f"{msg_bytes} B is not a whole number of {type_size}-byte elements")
        count = msg_bytes // type_size
        if collective == "reduce_scatter":
            count //= comm_size
        elif collective == "reduce_scatter_block":
            count //= comm_size
        return cls(collective, comm_size, count, type_size, **flags)


def _matches(key: str, call: MpichCall) -> bool:
    if key == "any" or key.endswith("=any"):
        return True
    pof2 = 1 << (call.comm_size.bit_length() - 1)
    for prefix, test in (
        ("comm_size<=", lambda v: call.comm_size <= v),
        ("comm_size<", lambda v: call.comm_size < v),
        ("avg_msg_size<=", lambda v: call.avg_msg_size() <= v),
        ("avg_msg_size<", lambda v: call.avg_msg_size() < v),
        ("total_msg_size<=", lambda v: call.total_msg_size() <= v),
        ("total_msg_size<", lambda v: call.total_msg_size() < v),
        ("count<=", lambda v: call.mpich_count() <= v),
        # csel.c: false on a communicator without node information, else size <= N x its nodes
        ("comm_avg_ppn<=", lambda v: call.nodes > 0 and call.comm_size <= v * call.nodes),
        ("comm_avg_ppn<", lambda v: call.nodes > 0 and call.comm_size < v * call.nodes),
    ):
        if key.startswith(prefix):
            return test(int(key[len(prefix):]))
    flags = {
        "comm_type=intra": True, "comm_type=inter": False,
        "comm_size=pow2": call.comm_size & (call.comm_size - 1) == 0,
        "comm_size=node_comm_size": not call.hierarchical,
        "count<pow2": call.mpich_count() < pof2,
        "is_commutative=yes": call.is_commutative, "is_commutative=no": not call.is_commutative,
        "is_op_built_in=yes": call.is_op_built_in, "is_op_built_in=no": not call.is_op_built_in,
        "is_sendbuf_inplace=yes": call.sendbuf_inplace, "is_sendbuf_inplace=no": not call.sendbuf_inplace,
        "comm_hierarchy=parent": call.hierarchical, "comm_hierarchy=node_roots": not call.hierarchical,
        "comm_hierarchy=node": not call.hierarchical, "comm_hierarchy=flat": not call.hierarchical,
        "is_multi_threaded=yes": call.multi_threaded, "is_multi_threaded=no": not call.multi_threaded,
        "is_block_regular=yes": True, "is_block_regular=no": False,
        "is_node_consecutive=yes": True, "is_node_consecutive=no": False,
    }
    if key.startswith("collective="):
        return key == f"collective={call.collective}"
    if key not in flags:
        raise UsageError(f"unknown MPICH selection key {key!r}")
    return flags[key]


def select_mpich(tree: Mapping, call: MpichCall) -> str | None:
    """The leaf (`algorithm=...` without the prefix) MPICH's first-match search reaches, or None."""
    node: Mapping = tree
    while True:
        leaves = [key for key in node if key.startswith(("algorithm=", "composition="))]
        if leaves:
            return leaves[0].split("=", 1)[1]
        for key, child in node.items():
            if _matches(key.replace(" ", ""), call):
                node = child
                break
        else:
            return None
