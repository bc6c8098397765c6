"""The wrapper generator against a small fake mpi.h (no MPI needed; the C check uses the system cc)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tunempi.profile.build import c_source_dir
from tunempi.profile.generate import (
    WRAPPED,
    GeneratorError,
    Param,
    WrapSpec,
    fortran_symbols,
    generate,
    generate_fortran,
    parse_param,
    parse_prototypes,
)

# Quirks on purpose: old-style non-const buffers, array parameters, attributes after the parameter list,
# declarations split over lines, an unnamed parameter, a variadic one, and MPI_Count variants.
FAKE_MPI_H = """
typedef int MPI_Comm; typedef int MPI_Datatype; typedef int MPI_Op; typedef int MPI_Request;
typedef long long MPI_Count;
typedef struct MPI_Status { int MPI_SOURCE; } MPI_Status;
#define MPI_SUCCESS 0
#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_THREAD_SINGLE 0
#define ATTR __attribute__((deprecated("no")))
int MPI_Init(int *argc, char ***argv);
int PMPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int PMPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Finalize(void);
int PMPI_Finalize(void);
int MPI_Pcontrol(const int level, ...);
int PMPI_Pcontrol(const int level, ...);
int MPI_Allreduce(void *sendbuf, void *recvbuf, int count,
                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) ATTR;
int PMPI_Allreduce(void *sendbuf, void *recvbuf, int count,
                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) ATTR;
int MPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm);
int PMPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                     MPI_Op op, MPI_Comm comm);
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm);
int PMPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm);
int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request *request);
int PMPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                   MPI_Request *request);
int MPI_Startall(int count, MPI_Request array_of_requests[]);
int PMPI_Startall(int count, MPI_Request array_of_requests[]);
int MPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses);
int PMPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses);
int MPI_Comm_free(MPI_Comm *comm);
int PMPI_Comm_free(MPI_Comm *comm);
"""

SPECS = [s for s in WRAPPED if s.function in {
    "MPI_Init", "MPI_Init_thread", "MPI_Finalize", "MPI_Pcontrol", "MPI_Allreduce", "MPI_Iallreduce",
    "MPI_Allgatherv", "MPI_Send_init", "MPI_Startall", "MPI_Waitall", "MPI_Comm_free"}]


def test_parse_param_shapes() -> None:
    assert parse_param("const void *sendbuf") == Param("const void *", "sendbuf", "")
    assert parse_param("const int recvcounts [ ]") == Param("const int", "recvcounts", "[]")
    assert parse_param("char ***argv") == Param("char ***", "argv", "")
    assert parse_param("MPI_Comm") == Param("MPI_Comm", "", "")
    assert parse_param("const int level") == Param("const int", "level", "")
    assert parse_param("const int recvcounts[]").base == "int*"
    assert parse_param("void *recvbuf").base == "void*"
    with pytest.raises(GeneratorError):
        parse_param("void (*fn)(int)")


def test_parse_prototypes_reads_quirky_declarations() -> None:
    protos = parse_prototypes(FAKE_MPI_H)
    allreduce = protos["MPI_Allreduce"]
    assert [p.name for p in allreduce.params] == ["sendbuf", "recvbuf", "count", "datatype", "op", "comm"]
    assert protos["MPI_Finalize"].params == ()
    assert protos["MPI_Pcontrol"].variadic and len(protos["MPI_Pcontrol"].params) == 1
    assert protos["MPI_Allgatherv"].params[7] == Param("MPI_Comm", "", "")
    assert protos["MPI_Allreduce_c"].params[2].base == "MPI_Count"


def test_generate_keeps_the_header_types_and_skips_absent_optional_functions() -> None:
    text = generate(parse_prototypes(FAKE_MPI_H), SPECS)
    # the header's own (non-const) buffer type, not the MPI-3 one
    assert "int MPI_Allreduce(void *a0, void *a1, int a2, MPI_Datatype a3, MPI_Op a4, MPI_Comm a5)" in text
    assert "const int a4[]" in text  # array parameter kept as written
    assert "MPI_Iallreduce" not in text  # optional and not declared: skipped
    assert "tmpi_bytes_vavg(a4, a6, a7)" in text
    # what the online mode needs to know which algorithms can serve the call: buffer, count, op
    assert ".buffer = a0, .count = a2, .mpi_op = a4" in text  # MPI_Allreduce
    assert ".buffer = a0, .count = -1, .mpi_op = MPI_OP_NULL" in text  # MPI_Allgatherv
    # and the datatypes whose layout some algorithms need (contiguous, true lower bound 0): allreduce has
    # one, allgatherv a receive type and a send type (unread when the send buffer is MPI_IN_PLACE)
    assert ".datatype = a3, .send_datatype = MPI_DATATYPE_NULL" in text  # MPI_Allreduce
    assert ".datatype = a6, .send_datatype = a2" in text  # MPI_Allgatherv
    # the collective runs on call.comm so that a mode can substitute a communicator
    assert "PMPI_Allreduce(a0, a1, a2, a3, a4, call.comm)" in text
    assert f"const int tmpi_op_count = {len(SPECS) - 1};" in text


def test_generated_wrappers_compile_against_the_header(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to check the generated prototypes"
    (tmp_path / "mpi.h").write_text(FAKE_MPI_H)
    source = tmp_path / "wrappers.c"
    source.write_text(generate(parse_prototypes(FAKE_MPI_H), SPECS))
    result = subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{tmp_path}", f"-I{c_source_dir()}",
         str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_prototype_that_differs_from_the_size_rule_is_refused() -> None:
    protos = parse_prototypes(FAKE_MPI_H)
    spec = WrapSpec("MPI_Allreduce_c", "coll", "allreduce", "count", (2, 3))
    with pytest.raises(GeneratorError, match="MPI_Count"):
        generate(protos, [spec])


def test_missing_required_function_is_an_error() -> None:
    with pytest.raises(GeneratorError, match="MPI_Bcast"):
        generate(parse_prototypes(FAKE_MPI_H), WRAPPED)


def test_mpi_and_pmpi_must_agree() -> None:
    header = FAKE_MPI_H.replace("int PMPI_Comm_free(MPI_Comm *comm);", "int PMPI_Comm_free(MPI_Comm comm);")
    with pytest.raises(GeneratorError, match="differ"):
        generate(parse_prototypes(header), [s for s in SPECS if s.function == "MPI_Comm_free"])


def test_fortran_entry_points_convert_the_arguments_and_call_the_c_wrapper() -> None:
    text = generate_fortran(parse_prototypes(FAKE_MPI_H), f77=True, f08=True, specs=SPECS)
    signature = "(void *a0, void *a1, MPI_Fint *a2, MPI_Fint *a3, MPI_Fint *a4, MPI_Fint *a5, MPI_Fint *ierr)"
    assert f"static void tmpif_allreduce{signature}" in text
    # through the C wrapper (never PMPI_ directly), with Fortran sentinels and handles converted
    assert ("int rc = MPI_Allreduce(tmpif_buffer(a0), tmpif_buffer(a1), (int)*a2, PMPI_Type_f2c(*a3), "
            "PMPI_Op_f2c(*a4), PMPI_Comm_f2c(*a5));") in text
    for symbol in ("mpi_allreduce_", "mpi_allreduce", "mpi_allreduce__", "MPI_ALLREDUCE", "mpi_allreduce_f08_"):
        assert f'void {symbol}{signature} __attribute__((alias("tmpif_allreduce")));' in text
    assert "if (ierr) *ierr = (MPI_Fint)rc;" in text  # mpi_f08's ierror is optional
    # a new request is returned as a Fortran handle only when the call succeeded
    assert "MPI_Request c6 = MPI_REQUEST_NULL;" in text and "*a6 = PMPI_Request_c2f(c6);" in text
    # the header spells Waitall's statuses as a pointer: still converted as an array of `count`
    assert "MPI_Request *c1 = tmpif_requests_in(a1, (int)*a0);" in text
    assert "MPI_Status *c2 = tmpif_statuses_in(a2, (int)*a0);" in text
    assert "tmpif_statuses_done(rc, c2, a2, (int)*a0);" in text
    assert "MPI_Comm c0 = PMPI_Comm_f2c(*a0);" in text and "*a0 = PMPI_Comm_c2f(c0);" in text
    assert "void mpi_pcontrol_(MPI_Fint *level)" in text  # MPI_PCONTROL(LEVEL) has no ierror
    assert "MPI_Init(NULL, NULL)" in text and "void mpi_init_(MPI_Fint *ierr)" in text
    assert "MPI_Init_thread(NULL, NULL, (int)*required, &c_provided)" in text


def test_fortran_families_are_emitted_only_where_asked() -> None:
    protos = parse_prototypes(FAKE_MPI_H)
    f08_only = generate_fortran(protos, f77=False, f08=True, specs=SPECS)
    assert "mpi_finalize_f08_(" in f08_only and "mpi_finalize_(" not in f08_only and "MPI_FINALIZE(" not in f08_only
    assert generate_fortran(protos, f77=False, f08=False, specs=SPECS) == ""
    assert fortran_symbols("MPI_Waitall", f08=False) == ["mpi_waitall_", "mpi_waitall", "mpi_waitall__", "MPI_WAITALL"]


def test_a_datatype_position_that_is_no_datatype_is_refused() -> None:
    protos = parse_prototypes(FAKE_MPI_H)
    spec = WrapSpec("MPI_Allreduce", "coll", "allreduce", "count", (2, 3), traits=(0, 2, 4), datatypes=(4, -1))
    with pytest.raises(GeneratorError, match="no MPI_Datatype"):
        generate(protos, [spec])


VECTOR_MPI_H = FAKE_MPI_H + """
#define MPI_IN_PLACE ((void *)-1)
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int PMPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                   void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm);
int PMPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                 const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                  void *recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                  MPI_Comm comm);
int PMPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                   void *recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                   MPI_Comm comm);
"""
VECTOR_SPECS = [s for s in WRAPPED if s.function in {"MPI_Alltoallv", "MPI_Gatherv", "MPI_Allgatherv", "MPI_Allreduce",
                                                     "MPI_Alltoallw"}]


def test_vector_collectives_hand_their_counts_to_the_modes(tmp_path: Path) -> None:
    text = generate(parse_prototypes(VECTOR_MPI_H), VECTOR_SPECS)
    # the counts arrays whose shape the profile records: alltoallv's send counts unread in place
    assert ".counts = {a0 == MPI_IN_PLACE ? NULL : a1, a5}" in text  # MPI_Alltoallv, MPI_Alltoallw
    assert ".counts = {a4}, .root = a7, .rooted = 1" in text  # MPI_Gatherv: the root's only
    assert ".counts = {a4}}" in text  # MPI_Allgatherv: every rank's
    assert text.count(".counts =") == 4  # MPI_Allreduce has none
    assert ".bytes = tmpi_bytes_alltoallw(a0, a1, a3, a5, a7, a8)" in text  # each peer's count x its type's size
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc
    (tmp_path / "mpi.h").write_text(VECTOR_MPI_H)
    (tmp_path / "wrappers.c").write_text(text)
    result = subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{tmp_path}", f"-I{c_source_dir()}",
         str(tmp_path / "wrappers.c")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_counts_position_that_is_no_counts_array_is_refused() -> None:
    protos = parse_prototypes(VECTOR_MPI_H)
    spec = WrapSpec("MPI_Gatherv", "coll", "gatherv", "gatherv", (0, 1, 2, 4, 6, 8), traits=(0, -1, -1),
                    counts=(5,), counts_root=1)
    assert "no counts array" not in generate(protos, [spec])  # displs is an int array too: accepted
    with pytest.raises(GeneratorError, match="no counts array"):
        generate(protos, [WrapSpec("MPI_Gatherv", "coll", "gatherv", "gatherv", (0, 1, 2, 4, 6, 8),
                                   traits=(0, -1, -1), counts=(6,))])
    with pytest.raises(GeneratorError, match="no root"):
        generate(protos, [WrapSpec("MPI_Gatherv", "coll", "gatherv", "gatherv", (0, 1, 2, 4, 6, 8),
                                   traits=(0, -1, -1), counts=(4,), counts_root=8)])


def test_alltoallw_s_fortran_entry_point_converts_a_datatype_per_peer() -> None:
    """Issue 40: MPI_ALLTOALLW's type arrays are as long as the communicator's group; the entry point converts
    them with the communicator it is given, calls the C wrapper and frees them."""
    text = generate_fortran(parse_prototypes(VECTOR_MPI_H), f77=True, f08=True, specs=VECTOR_SPECS)
    assert "MPI_Datatype *c3 = tmpif_types_in(a3, PMPI_Comm_f2c(*a8));" in text
    assert "MPI_Datatype *c7 = tmpif_types_in(a7, PMPI_Comm_f2c(*a8));" in text
    assert ("int rc = MPI_Alltoallw(tmpif_buffer(a0), (int *)a1, (int *)a2, c3, tmpif_buffer(a4), (int *)a5, "
            "(int *)a6, c7, PMPI_Comm_f2c(*a8));") in text
    assert "free(c3);" in text and "free(c7);" in text
    assert 'void mpi_alltoallw_(' in text
