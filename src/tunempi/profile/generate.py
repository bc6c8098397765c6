"""Generate the interposer's C wrapper layer from the TARGET library's own mpi.h.

The header is run through the library's preprocessor (`mpicc -E`), every `int MPI_X(...)` prototype
is parsed, and for each function in WRAPPED a wrapper is written with exactly the header's parameter
types (const-ness, array parameters), so the definition always matches the library's declaration.
Parameters are renamed a0..aN: names in headers differ between libraries and versions, positions do not
(the MPI standard fixes them).

What a wrapper does is decided by its KIND (see c/tmpi.h); the size of a message comes from one of the
size rules of c/tmpi_sizes.c, fed with the arguments at the listed positions. Argument types are
checked against the rule's C signature, so a header that differs from what the rule expects (for
example an MPI_Count variant) fails here, not as a silent miscount at run time.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.errors import MPIError
from tunempi.mpi.library import wrapper_env


class GeneratorError(MPIError):
    """The header does not declare what a wrapper needs, or declares it differently."""


@dataclass(frozen=True)
class Param:
    """One parameter of a prototype: `type_text name array_suffix` (name may be empty)."""

    type_text: str  # e.g. "const void *", "MPI_Datatype", "const int"
    name: str
    array: str  # e.g. "[]" or ""

    def declare(self, new_name: str) -> str:
        sep = "" if self.type_text.endswith("*") else " "
        return f"{self.type_text}{sep}{new_name}{self.array}"

    @property
    def base(self) -> str:
        """The type with qualifiers dropped and arrays as pointers: 'const int x[]' -> 'int*'."""
        text = re.sub(r"\b(const|volatile|restrict|__restrict)\b", " ", self.type_text)
        stars = text.count("*") + self.array.count("[")
        return " ".join(text.replace("*", " ").split()) + "*" * stars


@dataclass(frozen=True)
class Prototype:
    name: str
    params: tuple[Param, ...]
    variadic: bool = False


@dataclass(frozen=True)
class SizeRule:
    """A C function tmpi_bytes_<name> and the base types of its parameters."""

    name: str
    arg_types: tuple[str, ...]


SIZE_RULES: dict[str, SizeRule] = {
    rule.name: rule
    for rule in (
        SizeRule("none", ()),
        SizeRule("count", ("int", "MPI_Datatype")),
        SizeRule("block_inplace", ("void*", "int", "MPI_Datatype", "int", "MPI_Datatype")),
        SizeRule("scatter", ("int", "MPI_Datatype", "void*", "int", "MPI_Datatype")),
        SizeRule("vavg", ("int*", "MPI_Datatype", "MPI_Comm")),
        SizeRule("vsum", ("int*", "MPI_Datatype", "MPI_Comm")),
        SizeRule("block_total", ("int", "MPI_Datatype", "MPI_Comm")),
        SizeRule("alltoallv", ("void*", "int*", "MPI_Datatype", "int*", "MPI_Datatype", "MPI_Comm")),
        SizeRule("gatherv", ("void*", "int", "MPI_Datatype", "int*", "MPI_Datatype", "MPI_Comm")),
        SizeRule("scatterv", ("int*", "MPI_Datatype", "void*", "int", "MPI_Datatype", "MPI_Comm")),
        SizeRule("alltoallw", ("void*", "int*", "MPI_Datatype*", "int*", "MPI_Datatype*", "MPI_Comm")),
    )
}

KINDS = ("coll", "send", "send_init", "start", "timed", "comm_free", "request_free",
         "init", "init_thread", "finalize", "pcontrol")


@dataclass(frozen=True)
class WrapSpec:
    """How to wrap one MPI function.

    label: the name in profiles ("allreduce", "iallreduce", "send", ...).
    size/size_args: the size rule and the positions of the arguments it takes.
    requests: for send_init, the position of the MPI_Request* output; for start and for waits and tests,
    (count position or -1, requests position). A non-blocking collective's request is found by its type.
    required: the generator fails when the header lacks it (the MPI-3.1 core every library has);
    optional functions (newer or rarer ones) are skipped when absent.
    """

    function: str
    kind: str
    label: str
    size: str = "none"
    size_args: tuple[int, ...] = ()
    requests: tuple[int, ...] = ()
    required: bool = True
    #: collectives: positions of (send buffer that may be MPI_IN_PLACE, count, op); -1 where the
    #: collective has none. The online mode reads them to know which algorithms can serve the call.
    traits: tuple[int, int, int] = (-1, -1, -1)
    #: collectives: positions of (a datatype every rank's call makes significant, the send datatype,
    #: significant unless the send buffer is MPI_IN_PLACE); -1 where none is (the root-only arguments of
    #: rooted collectives may be anything on other ranks, so they are never read). The online mode checks
    #: their contiguity for the algorithms that need it (mpi/restrictions.py "contiguous").
    datatypes: tuple[int, int] = (-1, -1)
    #: vector collectives: positions of the counts arrays whose shape the profile records (tmpi_counts.h): one,
    #: or alltoallv's two (send, receive: the send counts are not read when the send buffer, traits[0], is
    #: MPI_IN_PLACE); and of the root where only the root's counts are significant (-1: every rank's are).
    counts: tuple[int, ...] = ()
    counts_root: int = -1


#: label -> (counts positions, root position): what WrapSpec.counts and counts_root take.
_VECTOR_COUNTS: dict[str, tuple[tuple[int, ...], int]] = {
    "allgatherv": ((4,), -1),
    "alltoallv": ((1, 5), -1),
    "alltoallw": ((1, 5), -1),
    "gatherv": ((4,), 7),
    "scatterv": ((1,), 7),
    "reduce_scatter": ((2,), -1),
}


def _collectives() -> list[WrapSpec]:
    # (name, size rule, argument positions); positions are those of the blocking form, and the
    # non-blocking form has the same leading arguments plus a trailing request.
    # traits: (in-place buffer, count, op) positions (scatter: the root's receive buffer is MPI_IN_PLACE).
    table = [
        ("allreduce", "count", (2, 3), (0, 2, 4), (3, -1)),
        ("bcast", "count", (1, 2), (-1, 1, -1), (2, -1)),
        ("reduce", "count", (2, 3), (0, 2, 4), (3, -1)),
        ("allgather", "block_inplace", (0, 1, 2, 4, 5), (0, 4, -1), (5, 2)),
        ("alltoall", "block_inplace", (0, 1, 2, 4, 5), (0, 4, -1), (5, 2)),
        ("gather", "block_inplace", (0, 1, 2, 4, 5), (0, -1, -1), (-1, -1)),
        ("scatter", "scatter", (1, 2, 3, 4, 5), (3, -1, -1), (-1, -1)),
        ("allgatherv", "vavg", (4, 6, 7), (0, -1, -1), (6, 2)),
        ("alltoallv", "alltoallv", (0, 1, 3, 5, 7, 8), (0, -1, -1), (7, 3)),
        ("gatherv", "gatherv", (0, 1, 2, 4, 6, 8), (0, -1, -1), (-1, -1)),
        ("scatterv", "scatterv", (1, 3, 4, 5, 6, 8), (4, -1, -1), (-1, -1)),
        # alltoallw: a datatype per peer (arrays: no one datatype for the online mode to check, which does not
        # switch it); its size is alltoallv's mean block, each block its count x its own type's size.
        ("alltoallw", "alltoallw", (0, 1, 3, 5, 7, 8), (0, -1, -1), (-1, -1)),
        ("reduce_scatter", "vsum", (2, 3, 5), (0, -1, 4), (3, -1)),
        ("reduce_scatter_block", "block_total", (2, 3, 5), (0, 2, 4), (3, -1)),
        ("barrier", "none", (), (-1, -1, -1), (-1, -1)),
    ]
    specs = []
    for label, rule, args, traits, datatypes in table:
        c_name = "MPI_" + label.capitalize()
        counts, root = _VECTOR_COUNTS.get(label, ((), -1))
        specs.append(WrapSpec(c_name, "coll", label, rule, args, traits=traits, datatypes=datatypes, counts=counts,
                              counts_root=root))
        specs.append(WrapSpec("MPI_I" + label, "coll", "i" + label, rule, args, required=False, traits=traits,
                              datatypes=datatypes, counts=counts, counts_root=root))
    return specs


WRAPPED: tuple[WrapSpec, ...] = (
    WrapSpec("MPI_Init", "init", "init"),
    WrapSpec("MPI_Init_thread", "init_thread", "init_thread"),
    WrapSpec("MPI_Finalize", "finalize", "finalize"),
    WrapSpec("MPI_Pcontrol", "pcontrol", "pcontrol"),
    *_collectives(),
    *(WrapSpec(f"MPI_{name}", "send", name.lower(), "count", (1, 2))
      for name in ("Send", "Isend", "Ssend", "Issend", "Bsend", "Ibsend", "Rsend", "Irsend")),
    WrapSpec("MPI_Sendrecv", "send", "sendrecv", "count", (1, 2)),
    WrapSpec("MPI_Sendrecv_replace", "send", "sendrecv_replace", "count", (1, 2)),
    *(WrapSpec(f"MPI_{name}_init", "send_init", f"{name.lower()}_init", "count", (1, 2), requests=(6,))
      for name in ("Send", "Ssend", "Bsend", "Rsend")),
    WrapSpec("MPI_Start", "start", "start", requests=(-1, 0)),
    WrapSpec("MPI_Startall", "start", "startall", requests=(0, 1)),
    *(WrapSpec(f"MPI_{name}", "timed", name.lower()) for name in ("Recv", "Irecv", "Probe", "Iprobe")),
    # waits and tests name their requests (count position or -1, requests position): the profile times the
    # non-blocking collectives they complete
    *(WrapSpec(f"MPI_{name}", "timed", name.lower(), requests=(-1, 0)) for name in ("Wait", "Test")),
    *(WrapSpec(f"MPI_{name}", "timed", name.lower(), requests=(0, 1))
      for name in ("Waitall", "Waitany", "Waitsome", "Testall", "Testany", "Testsome")),
    *(WrapSpec(f"MPI_{name}", "timed", name.lower(), required=False)
      for name in ("Mprobe", "Improbe", "Mrecv", "Imrecv")),
    WrapSpec("MPI_Comm_free", "comm_free", "comm_free"),
    WrapSpec("MPI_Comm_disconnect", "comm_free", "comm_disconnect", required=False),
    WrapSpec("MPI_Request_free", "request_free", "request_free"),
)

_KIND_ENUM = {
    "coll": "TMPI_KIND_COLL", "send": "TMPI_KIND_SEND", "send_init": "TMPI_KIND_SEND_INIT",
    "start": "TMPI_KIND_START", "timed": "TMPI_KIND_TIMED", "comm_free": "TMPI_KIND_COMM_FREE",
    "request_free": "TMPI_KIND_REQUEST_FREE", "init": "TMPI_KIND_SPECIAL",
    "init_thread": "TMPI_KIND_SPECIAL", "finalize": "TMPI_KIND_SPECIAL", "pcontrol": "TMPI_KIND_SPECIAL",
}

# ----------------------------------------------------------------------------------- parsing


_PROTO_START = re.compile(r"\bint\s+(P?MPI_[A-Za-z0-9_]+)\s*\(")
_ARRAY_SUFFIX = re.compile(r"((?:\s*\[[^\]]*\])*)\s*$")
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "struct", "unsigned", "signed"}


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [" ".join(part.split()) for part in parts]


def parse_param(text: str) -> Param:
    if "(" in text:
        raise GeneratorError(f"function-pointer parameter not supported: {text!r}")
    match = _ARRAY_SUFFIX.search(text)
    array = "".join(match.group(1).split()) if match else ""
    rest = text[: match.start()].strip() if match else text.strip()
    ident = re.search(r"([A-Za-z_]\w*)$", rest)
    if ident:
        before = rest[: ident.start()].strip()
        # The trailing identifier is a name only if what precedes it is already a type.
        words = [w for w in re.findall(r"[A-Za-z_]\w*", before) if w not in _QUALIFIERS]
        if words or "*" in before:
            return Param(" ".join(before.split()).replace(" *", " *"), ident.group(1), array)
    return Param(rest, "", array)


def parse_prototypes(preprocessed: str) -> dict[str, Prototype]:
    """Every `int MPI_X(...)` / `int PMPI_X(...)` declaration in preprocessed C text."""
    prototypes: dict[str, Prototype] = {}
    for match in _PROTO_START.finditer(preprocessed):
        name = match.group(1)
        depth, i = 1, match.end()
        while depth and i < len(preprocessed):
            depth += {"(": 1, ")": -1}.get(preprocessed[i], 0)
            i += 1
        if depth:
            continue
        inner = preprocessed[match.end(): i - 1].strip()
        after = preprocessed[i:].lstrip()
        if after.startswith("{"):
            continue  # an inline definition, not a declaration
        parts = _split_top_level(inner)
        variadic = bool(parts) and parts[-1] == "..."
        if variadic:
            parts = parts[:-1]
        if parts in ([""], ["void"]):
            parts = []
        params = tuple(parse_param(part) for part in parts)
        prototypes.setdefault(name, Prototype(name, params, variadic))
    return prototypes


def preprocess_mpi_h(mpicc: Path | str) -> str:
    """The target library's mpi.h after its own preprocessor (`mpicc -E`)."""
    with tempfile.TemporaryDirectory(prefix="tunempi-gen-") as tmp:
        source = Path(tmp) / "include_mpi.c"
        source.write_text("#include <mpi.h>\n")
        # Intel MPI's wrapper finds mpi.h only through I_MPI_ROOT (mpi.library.wrapper_env).
        env = {**os.environ, **wrapper_env(Path(mpicc).parent.parent)}
        result = subprocess.run([str(mpicc), "-E", str(source)], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise GeneratorError(f"{mpicc} -E failed (exit {result.returncode}): {result.stderr.strip()}")
    return result.stdout


# -------------------------------------------------------------------------------- emitting


def _check_types(spec: WrapSpec, proto: Prototype) -> None:
    rule = SIZE_RULES[spec.size]
    if len(spec.size_args) != len(rule.arg_types):
        raise GeneratorError(f"{spec.function}: rule {rule.name} takes {len(rule.arg_types)} arguments")
    for position, wanted in zip(spec.size_args, rule.arg_types, strict=True):
        if position >= len(proto.params):
            raise GeneratorError(f"{spec.function}: no argument {position} in {_signature(proto)}")
        got = proto.params[position].base
        if got != wanted:
            raise GeneratorError(
                f"{spec.function}: argument {position} is {got!r}, size rule {rule.name} expects {wanted!r}"
            )
    for position in spec.datatypes:
        if position >= 0 and (position >= len(proto.params) or proto.params[position].base != "MPI_Datatype"):
            raise GeneratorError(f"{spec.function}: argument {position} of {_signature(proto)} is no MPI_Datatype")
    for position in spec.counts:
        if position >= len(proto.params) or proto.params[position].base != "int*":
            raise GeneratorError(f"{spec.function}: argument {position} of {_signature(proto)} is no counts array")
    if spec.counts_root >= 0 and (spec.counts_root >= len(proto.params)
                                  or proto.params[spec.counts_root].base != "int"):
        raise GeneratorError(f"{spec.function}: argument {spec.counts_root} of {_signature(proto)} is no root")


def _signature(proto: Prototype) -> str:
    args = [p.declare(f"a{i}") for i, p in enumerate(proto.params)]
    if proto.variadic:
        args.append("...")
    return f"int {proto.name}({', '.join(args) or 'void'})"


def _comm_position(spec: WrapSpec, proto: Prototype) -> int:
    positions = [i for i, p in enumerate(proto.params) if p.base == "MPI_Comm"]
    if len(positions) != 1:
        raise GeneratorError(f"{spec.function}: expected one MPI_Comm argument in {_signature(proto)}")
    return positions[0]


def _emit_wrapper(spec: WrapSpec, op: int, proto: Prototype) -> str:
    names = [f"a{i}" for i in range(len(proto.params))]
    pmpi = "P" + spec.function
    call_args = ", ".join(names)
    lines = [_signature(proto), "{"]
    if spec.kind == "init":
        lines += [
            f"    if (!tmpi_init_wanted()) return {pmpi}({call_args});",
            f"    int rc = {pmpi}({call_args});",
            "    if (rc == MPI_SUCCESS) tmpi_after_init(MPI_THREAD_SINGLE);",
            "    return rc;",
        ]
    elif spec.kind == "init_thread":
        lines += [
            f"    if (!tmpi_init_wanted()) return {pmpi}({call_args});",
            f"    int rc = {pmpi}({call_args});",
            f"    if (rc == MPI_SUCCESS) tmpi_after_init(*{names[3]});",
            "    return rc;",
        ]
    elif spec.kind == "finalize":
        lines += [
            "    if (tmpi_finalize_claim()) tmpi_before_finalize();",
            f"    return {pmpi}({call_args});",
        ]
    elif spec.kind == "pcontrol":
        lines += [
            f"    if (!TMPI_PASSTHROUGH()) tmpi_pcontrol({names[0]});",
            f"    return {pmpi}({names[0]});",
        ]
    else:
        fields = [f".op = {op}"]
        forwarded = list(names)
        if spec.kind in ("coll", "send", "send_init"):
            comm = _comm_position(spec, proto)
            fields.append(f".comm = {names[comm]}")
            if spec.kind == "coll":
                forwarded[comm] = "call.comm"  # a mode may run the call on another communicator
            _check_types(spec, proto)
            args = ", ".join(names[i] for i in spec.size_args)
            fields.append(f".bytes = tmpi_bytes_{spec.size}({args})")
            if spec.kind == "coll":
                inplace, count, mpi_op = spec.traits
                fields.append(f".buffer = {names[inplace] if inplace >= 0 else 'NULL'}")
                fields.append(f".count = {names[count] if count >= 0 else -1}")
                fields.append(f".mpi_op = {names[mpi_op] if mpi_op >= 0 else 'MPI_OP_NULL'}")
                datatype, send_datatype = spec.datatypes
                fields.append(f".datatype = {names[datatype] if datatype >= 0 else 'MPI_DATATYPE_NULL'}")
                fields.append(f".send_datatype = {names[send_datatype] if send_datatype >= 0 else 'MPI_DATATYPE_NULL'}")
                if spec.counts:
                    counts = [names[i] for i in spec.counts]
                    if len(counts) == 2:  # alltoallv: the send counts are not significant in place
                        counts[0] = f"{names[inplace]} == MPI_IN_PLACE ? NULL : {counts[0]}"
                    fields.append(f".counts = {{{', '.join(counts)}}}")
                if spec.counts_root >= 0:
                    fields += [f".root = {names[spec.counts_root]}", ".rooted = 1"]
        if spec.kind == "coll" and spec.label.startswith("i"):
            request = [i for i, p in enumerate(proto.params) if p.base == "MPI_Request*"]
            if len(request) != 1:
                raise GeneratorError(f"{spec.function}: expected one MPI_Request* argument in {_signature(proto)}")
            fields += [f".requests = {names[request[0]]}", ".nrequests = 1"]  # the started collective's
        if spec.kind == "send_init":
            fields += [f".requests = {names[spec.requests[0]]}", ".nrequests = 1"]
        elif spec.kind == "start" or (spec.kind == "timed" and spec.requests):
            count_pos, req_pos = spec.requests
            fields += [f".requests = {names[req_pos]}",
                       f".nrequests = {names[count_pos] if count_pos >= 0 else '1'}"]
        elif spec.kind == "comm_free":
            fields.append(f".comm = *{names[0]}")
        elif spec.kind == "request_free":
            fields += [f".requests = {names[0]}", ".nrequests = 1"]
        lines += [
            f"    if (TMPI_PASSTHROUGH()) return {pmpi}({call_args});",
            f"    tmpi_call call = {{{', '.join(fields)}}};",
            "    tmpi_begin(&call);",
            f"    call.rc = {pmpi}({', '.join(forwarded)});",
            # a mode may ask for the call once more (online: a drawn algorithm refused the arguments)
            f"    while (tmpi_end(&call)) call.rc = {pmpi}({', '.join(forwarded)});",
            "    return call.rc;",
        ]
    lines.append("}")
    return "\n".join(lines)


def generate(prototypes: dict[str, Prototype], specs: Sequence[WrapSpec] = WRAPPED,
             source: str = "mpi.h") -> str:
    """The C text of the wrapper layer for the functions in `specs` that the header declares."""
    chosen: list[tuple[WrapSpec, Prototype]] = []
    for spec in specs:
        if spec.kind not in KINDS:
            raise GeneratorError(f"{spec.function}: unknown kind {spec.kind!r}; valid: {', '.join(KINDS)}")
        proto = prototypes.get(spec.function)
        pmpi = prototypes.get("P" + spec.function)
        if proto is None or pmpi is None:
            if spec.required:
                missing = spec.function if proto is None else "P" + spec.function
                raise GeneratorError(f"{source} does not declare {missing}")
            continue
        if [p.base for p in proto.params] != [p.base for p in pmpi.params]:
            raise GeneratorError(f"{spec.function} and P{spec.function} differ in {source}")
        chosen.append((spec, proto))
    out = [
        f"/* GENERATED by tunempi.profile.generate from {source}: do not edit. */",
        '#include "tmpi.h"',
        "",
        "/* A wrapper of a function the library marks deprecated must still call its PMPI twin. */",
        '#pragma GCC diagnostic ignored "-Wdeprecated-declarations"',
        "",
        "const tmpi_op_info tmpi_op_table[] = {",
    ]
    for spec, _ in chosen:
        blocking = 0 if spec.kind == "coll" and spec.label.startswith("i") else 1
        out.append(f'    {{"{spec.label}", {_KIND_ENUM[spec.kind]}, {blocking}}},')
    out += ["};", f"const int tmpi_op_count = {len(chosen)};", ""]
    for op, (spec, proto) in enumerate(chosen):
        out.append(_emit_wrapper(spec, op, proto))
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------- Fortran entry points
#
# A Fortran binding that calls PMPI_ directly is invisible to the C wrappers above. For those bindings the
# interposer also defines the Fortran symbols, as C functions that convert the Fortran arguments (handles
# with MPI_*_f2c, sentinels such as MPI_IN_PLACE, statuses, request arrays) and call the C wrapper, so
# every mode sees the call exactly once. Which bindings need it is the library's business
# (mpi.fortran.fortran_bindings): emitting entry points for a binding that already calls the C MPI_
# functions would count each call twice.
#   f77 family (mpif.h and `use mpi`): mpi_x_, mpi_x, mpi_x__, MPI_X
#   f08 family (`use mpi_f08`, arguments by reference, ierror optional): mpi_x_f08_

#: Functions whose Fortran form needs more than converting each argument (1-based indices, message
#: handles): their Fortran calls keep going straight to the library (not timed; nothing else depends on them).
FORTRAN_SKIPPED: frozenset[str] = frozenset({
    "MPI_Waitany", "MPI_Waitsome", "MPI_Testany", "MPI_Testsome",
    "MPI_Mprobe", "MPI_Improbe", "MPI_Mrecv", "MPI_Imrecv",
})

#: Functions whose request and status arguments are arrays, whatever the header's spelling (`[]` or `*`).
_ARRAY_FUNCTIONS: frozenset[str] = frozenset({"MPI_Startall", "MPI_Waitall", "MPI_Testall"})

_HANDLE_F2C = {"MPI_Comm": "PMPI_Comm_f2c", "MPI_Datatype": "PMPI_Type_f2c", "MPI_Op": "PMPI_Op_f2c"}


def fortran_symbols(function: str, *, f77: bool = True, f08: bool = True) -> list[str]:
    """The Fortran linker names of an MPI function: every common mangling of the f77 family, mpi_f08's."""
    lower = function.lower()
    return ([f"{lower}_", lower, f"{lower}__", function.upper()] if f77 else []) + ([f"{lower}_f08_"] if f08 else [])


def _emit_fortran(spec: WrapSpec, proto: Prototype, symbols: Sequence[str]) -> str:
    """A C function with the Fortran calling convention that converts its arguments and calls the C
    wrapper; every Fortran name of the function is an alias of it."""
    name = spec.function
    local = "tmpif_" + name[len("MPI_"):].lower()
    params: list[str] = []   # Fortran-side parameters
    before: list[str] = []   # conversions before the call
    args: list[str] = []     # the C call's arguments
    after: list[str] = []    # conversions back, after a successful call
    cleanup: list[str] = []  # arrays: copied back on success, always released
    inout_requests = spec.kind in ("timed", "start", "request_free")
    count_name = ""
    # arrays of datatypes (alltoallw) are as long as the communicator's group (remote group: intercommunicator)
    comm_arg = next((f"a{i}" for i, p in enumerate(proto.params) if p.base == "MPI_Comm"), "")
    if spec.kind == "init":
        params.append("MPI_Fint *ierr")
        args += ["NULL", "NULL"]
    elif spec.kind == "init_thread":
        params += ["MPI_Fint *required", "MPI_Fint *provided", "MPI_Fint *ierr"]
        before.append("int c_provided = 0;")
        args += ["NULL", "NULL", "(int)*required", "&c_provided"]
        after.append("*provided = (MPI_Fint)c_provided;")
    elif spec.kind == "pcontrol":
        params.append("MPI_Fint *level")
        args.append("(int)*level")
    else:
        for i, param in enumerate(proto.params):
            a = f"a{i}"
            base = param.base
            if base == "void*":
                params.append(f"void *{a}")
                args.append(f"tmpif_buffer({a})")
            elif base == "int":
                params.append(f"MPI_Fint *{a}")
                args.append(f"(int)*{a}")
                count_name = f"(int)*{a}"  # the last int before an array of requests is its length
            elif base == "int*":
                params.append(f"MPI_Fint *{a}")
                args.append(f"(int *){a}")  # MPI_Fint is int (checked at compile time)
            elif base in _HANDLE_F2C:
                params.append(f"MPI_Fint *{a}")
                args.append(f"{_HANDLE_F2C[base]}(*{a})")
            elif base == "MPI_Datatype*" and comm_arg:
                params.append(f"MPI_Fint *{a}")
                before.append(f"MPI_Datatype *c{i} = tmpif_types_in({a}, PMPI_Comm_f2c(*{comm_arg}));")
                args.append(f"c{i}")
                cleanup.append(f"free(c{i});")
            elif base == "MPI_Comm*":
                params.append(f"MPI_Fint *{a}")
                before.append(f"MPI_Comm c{i} = PMPI_Comm_f2c(*{a});")
                args.append(f"&c{i}")
                after.append(f"*{a} = PMPI_Comm_c2f(c{i});")
            elif base == "MPI_Request*" and (param.array or name in _ARRAY_FUNCTIONS):
                params.append(f"MPI_Fint *{a}")
                before.append(f"MPI_Request *c{i} = tmpif_requests_in({a}, {count_name});")
                args.append(f"c{i}")
                cleanup.append(f"tmpif_requests_done(rc, c{i}, {a}, {count_name});")
            elif base == "MPI_Request*":
                params.append(f"MPI_Fint *{a}")
                init = f"PMPI_Request_f2c(*{a})" if inout_requests else "MPI_REQUEST_NULL"
                before.append(f"MPI_Request c{i} = {init};")
                args.append(f"&c{i}")
                after.append(f"*{a} = PMPI_Request_c2f(c{i});")
            elif base == "MPI_Status*" and (param.array or name in _ARRAY_FUNCTIONS):
                params.append(f"MPI_Fint *{a}")
                before.append(f"MPI_Status *c{i} = tmpif_statuses_in({a}, {count_name});")
                args.append(f"c{i}")
                cleanup.append(f"tmpif_statuses_done(rc, c{i}, {a}, {count_name});")
            elif base == "MPI_Status*":
                params.append(f"MPI_Fint *{a}")
                before.append(f"MPI_Status s{i}, *c{i} = tmpif_status_ignored({a}) ? MPI_STATUS_IGNORE : &s{i};")
                args.append(f"c{i}")
                after.append(f"if (c{i} != MPI_STATUS_IGNORE) PMPI_Status_c2f(c{i}, {a});")
            else:
                raise GeneratorError(f"{name}: no Fortran conversion for argument {i} of type {base!r}")
        params.append("MPI_Fint *ierr")
    signature = ", ".join(params)
    lines = [f"static void {local}({signature})", "{"]
    lines += [f"    {line}" for line in before]
    if spec.kind == "pcontrol":  # MPI_PCONTROL has no ierror argument in Fortran
        lines.append(f"    (void){name}({', '.join(args)});")
    else:
        lines.append(f"    int rc = {name}({', '.join(args)});")
    if after:
        lines.append("    if (rc == MPI_SUCCESS) {")
        lines += [f"        {line}" for line in after]
        lines.append("    }")
    lines += [f"    {line}" for line in cleanup]
    if spec.kind != "pcontrol":
        lines.append("    if (ierr) *ierr = (MPI_Fint)rc;  /* mpi_f08: ierror is optional (NULL when absent) */")
    lines.append("}")
    for symbol in symbols:
        lines.append(f'void {symbol}({signature}) __attribute__((alias("{local}")));')
    return "\n".join(lines)


def generate_fortran(prototypes: dict[str, Prototype], *, f77: bool, f08: bool,
                     specs: Sequence[WrapSpec] = WRAPPED, source: str = "mpi.h") -> str:
    """C text of the Fortran entry points (families `f77`, `f08`) for the functions of `specs` the header
    declares; appended to the wrapper layer. Empty when neither family is asked for."""
    if not (f77 or f08):
        return ""
    out = [
        "",
        f"/* Fortran entry points, GENERATED by tunempi.profile.generate from {source}. */",
        '#include "tmpi_fortran.h"',
        "",
    ]
    for spec in specs:
        if spec.function in FORTRAN_SKIPPED:
            continue
        proto = prototypes.get(spec.function)
        if proto is None or "P" + spec.function not in prototypes:
            continue
        out.append(_emit_fortran(spec, proto, fortran_symbols(spec.function, f77=f77, f08=f08)))
        out.append("")
    return "\n".join(out)
