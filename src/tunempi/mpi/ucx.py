"""UCX's own configuration knobs (UCX_*), read from the libucp a library ships or links.

UCX is configured through environment variables only; it has no MPI_T. The names and defaults are
asked from UCX itself: `ucp_config_read` + `ucp_config_print` through ctypes, in a child Python
process (loading UCX into tunempi's own process would install its memory hooks and signal handlers).
The answer is cached per libucp file (path, size, mtime) next to the MPI discovery cache.

Only UCP-level knobs are listed (UCX_RNDV_THRESH, UCX_ZCOPY_THRESH, UCX_TLS, ...): the per-transport
ones (UCX_MM_*, UCX_POSIX_*, ...) are registered by transport modules that load only inside a real
UCP context, so they are not known before a run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from tunempi.config import cache_dir
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import Tunable

#: UCX knobs whose default is `auto`: the values `--space auto` tries (bytes; UCX takes plain numbers).
UCX_TUNABLES: tuple[Tunable, ...] = (
    Tunable("UCX_RNDV_THRESH", "size", "UCX switches from eager to rendezvous above it",
            values=("auto", 4096, 8192, 16384, 32768, 65536, 131072, 262144)),
    Tunable("UCX_ZCOPY_THRESH", "size", "UCX switches from copying (bcopy) to zero-copy sends above it",
            values=("auto", 4096, 16384, 65536, 262144)),
    Tunable("UCX_RNDV_SCHEME", "enum", "how UCX moves rendezvous data", values=("auto", "get_zcopy", "put_zcopy")),
)

# Child program: print UCP's configuration (flag 1 = UCS_CONFIG_PRINT_CONFIG) as NAME=value lines.
_PRINT_CONFIG = r"""
import ctypes, os, sys
ucp = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
libc.fflush.argtypes = [ctypes.c_void_p]
config = ctypes.c_void_p()
if ucp.ucp_config_read(None, None, ctypes.byref(config)) != 0:
    sys.exit("ucp_config_read failed")
ucp.ucp_config_print.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
stream = libc.fdopen(os.dup(1), b"w")
ucp.ucp_config_print(config, stream, None, 1)
libc.fflush(stream)
"""


def system_library_dirs() -> list[Path]:
    """Where the system's own shared libraries live: Debian's multiarch directory (the platform triple
    this Python was built for, e.g. /usr/lib/x86_64-linux-gnu or /usr/lib/aarch64-linux-gnu), then the
    Red Hat and plain layouts."""
    multiarch = sysconfig.get_config_var("MULTIARCH")
    dirs = [Path("/usr/lib") / multiarch] if multiarch else []
    return [*dirs, Path("/usr/lib64"), Path("/usr/lib")]


def find_libucp(library: MPILibrary) -> Path | None:
    """The libucp the library uses: bundled in its prefix (PyPI wheels), else the system's, else None."""
    for pattern in ("lib/libucp.so*", "lib/*/libucp.so*", "lib64/libucp.so*"):
        found = sorted(library.prefix.glob(pattern))
        if found:
            return found[0]
    for system_dir in system_library_dirs():
        found = sorted(system_dir.glob("libucp.so*"))
        if found:
            return found[0]
    return None


def _clean_env() -> dict[str, str]:
    # The user's UCX_* settings must not change the defaults reported (or break the read).
    return {k: v for k, v in os.environ.items() if not k.startswith("UCX_")}


def ucx_knobs(library: MPILibrary) -> dict[str, str]:
    """{UCX_NAME: default} for the UCX this library uses; {} when it uses none (or UCX cannot be read)."""
    libucp = find_libucp(library)
    if libucp is None:
        return {}
    stat = libucp.stat()
    key = hashlib.sha256(f"{os.path.realpath(libucp)}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:16]
    cache = cache_dir() / "mpi" / f"ucx-{key}.json"
    if cache.exists():
        try:
            return dict(json.loads(cache.read_text()))
        except (OSError, ValueError):
            pass
    env = _clean_env()
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(libucp.parent), env.get("LD_LIBRARY_PATH", "")])
    try:
        done = subprocess.run([sys.executable, "-c", _PRINT_CONFIG, str(libucp)], capture_output=True, text=True,
                              timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if done.returncode != 0:
        return {}
    knobs = {}
    for line in done.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.startswith("UCX_"):
            knobs[name] = value
    if knobs:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(knobs, sort_keys=True))
        os.replace(tmp, cache)
    return knobs
