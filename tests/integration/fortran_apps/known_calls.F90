! A Fortran program whose MPI calls are known exactly (tests/integration/test_fortran_mpi.py restates them).
! One source for the three Fortran bindings, chosen when compiling: -DUSE_F08 (use mpi_f08), -DUSE_MPIFH
! (include 'mpif.h'; needs -fallow-argument-mismatch with gfortran >= 10), neither (use mpi). Every result is checked; a wrong one aborts the job.
! Needs an even number of ranks. Optional argument: how many times to repeat everything (default 1).
program known_calls
#if defined(USE_F08)
  use mpi_f08
#elif !defined(USE_MPIFH)
  use mpi
#endif
  implicit none
#if defined(USE_MPIFH)
  include 'mpif.h'
#endif
#if defined(USE_F08)
  type(MPI_Comm) :: half, dup
  type(MPI_Request) :: request, pair(2)
  type(MPI_Status) :: status
  type(MPI_Datatype) :: types(64)
#else
  integer :: types(64)
  integer :: half, dup, request, pair(2)
  integer :: status(MPI_STATUS_SIZE)
#endif
  integer :: ierr, rank, nranks, i, k, half_rank, half_size, rep, repeats
  character(len=16) :: arg
  double precision :: one(1), total(1), vec(500)
  integer :: ints(25), blocks(2 * 64), gathered(64), msg(100), root(1), token(1), wblocks(2 * 64)
  integer :: counts(64), displs(64)
  double precision :: sub(16), subsum(16)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  repeats = 1
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) repeats
  end if

  do rep = 1, repeats

  ! allreduce, 8 B, 10 calls
  do i = 1, 10
    one(1) = rank + i
    call MPI_Allreduce(one, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(total(1) == dble(nranks * (nranks - 1) / 2 + nranks * i), 'allreduce')
  end do
  ! allreduce in place, 4000 B, 3 calls
  do i = 1, 3
    vec = rank + 1
    call MPI_Allreduce(MPI_IN_PLACE, vec, 500, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(all(vec == dble(nranks * (nranks + 1) / 2)), 'allreduce in place')
  end do
  ! bcast, 100 B, 5 calls
  do i = 1, 5
    ints = -1
    if (rank == 0) ints = i
    call MPI_Bcast(ints, 25, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
    call check(all(ints == i), 'bcast')
  end do
  ! alltoall, 8 B blocks, 2 calls
  do i = 1, 2
    do k = 0, nranks - 1
      blocks(2 * k + 1) = 1000 * rank + k
      blocks(2 * k + 2) = i
    end do
    call MPI_Alltoall(MPI_IN_PLACE, 0, MPI_INTEGER, blocks, 2, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do k = 0, nranks - 1
      call check(blocks(2 * k + 1) == 1000 * k + rank .and. blocks(2 * k + 2) == i, 'alltoall in place')
    end do
  end do
  ! alltoallw, 8 B blocks (2 integers, an MPI_INTEGER type per peer, displacements in bytes), 2 calls
  do i = 1, 2
    do k = 0, nranks - 1
      blocks(2 * k + 1) = 1000 * rank + k
      blocks(2 * k + 2) = i
      counts(k + 1) = 2
      displs(k + 1) = 8 * k
      types(k + 1) = MPI_INTEGER
    end do
    wblocks = -1
    call MPI_Alltoallw(blocks, counts, displs, types, wblocks, counts, displs, types, MPI_COMM_WORLD, ierr)
    do k = 0, nranks - 1
      call check(wblocks(2 * k + 1) == 1000 * k + rank .and. wblocks(2 * k + 2) == i, 'alltoallw')
    end do
  end do
  ! allgather in place, 4 B blocks, 4 calls
  do i = 1, 4
    gathered = -1
    gathered(rank + 1) = rank * i
    call MPI_Allgather(MPI_IN_PLACE, 0, MPI_INTEGER, gathered, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    do k = 0, nranks - 1
      call check(gathered(k + 1) == k * i, 'allgather in place')
    end do
  end do
  ! a sub-communicator: ranks split into two halves; reduce (128 B) 7 calls and bcast (4 B) 3 calls on it
  call MPI_Comm_split(MPI_COMM_WORLD, rank / (nranks / 2), rank, half, ierr)
  call MPI_Comm_rank(half, half_rank, ierr)
  call MPI_Comm_size(half, half_size, ierr)
  do i = 1, 7
    sub = half_rank + i
    subsum = -1
    call MPI_Reduce(sub, subsum, 16, MPI_DOUBLE_PRECISION, MPI_SUM, 0, half, ierr)
    if (half_rank == 0) call check(all(subsum == dble(half_size * (half_size - 1) / 2 + half_size * i)), 'reduce')
  end do
  do i = 1, 3
    root = -1
    if (half_rank == 0) root = rank
    call MPI_Bcast(root, 1, MPI_INTEGER, 0, half, ierr)
    call check(root(1) == (rank / (nranks / 2)) * (nranks / 2), 'bcast on half')
  end do
  call MPI_Comm_free(half, ierr)
  ! a duplicate of world: one barrier, freed
  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  call MPI_Barrier(dup, ierr)
  call MPI_Comm_free(dup, ierr)
  ! non-blocking allreduce, 8 B, 2 calls
  do i = 1, 2
    one(1) = rank
    call MPI_Iallreduce(one, total, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, request, ierr)
    call MPI_Wait(request, status, ierr)
    call check(total(1) == dble(nranks - 1), 'iallreduce')
  end do
  ! point to point: even ranks send 3 messages of 400 B to the next rank
  do i = 1, 3
    if (mod(rank, 2) == 0) then
      msg = rank + i
      call MPI_Send(msg, 100, MPI_INTEGER, rank + 1, i, MPI_COMM_WORLD, ierr)
    else
      msg = -1
      if (i < 3) then
        call MPI_Recv(msg, 100, MPI_INTEGER, rank - 1, i, MPI_COMM_WORLD, status, ierr)
#if defined(USE_F08)
        call check(status%MPI_SOURCE == rank - 1 .and. status%MPI_TAG == i, 'recv status')
#else
        call check(status(MPI_SOURCE) == rank - 1 .and. status(MPI_TAG) == i, 'recv status')
#endif
      else
        call MPI_Recv(msg, 100, MPI_INTEGER, rank - 1, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
      end if
      call check(all(msg == rank - 1 + i), 'recv')
    end if
  end do
  ! non-blocking exchange of a 4 B token between rank pairs, completed with waitall (statuses ignored):
  ! one more send per rank
  root = rank
  token = -1
  call MPI_Isend(root, 1, MPI_INTEGER, ieor(rank, 1), 9, MPI_COMM_WORLD, pair(1), ierr)
  call MPI_Irecv(token, 1, MPI_INTEGER, ieor(rank, 1), 9, MPI_COMM_WORLD, pair(2), ierr)
  call MPI_Waitall(2, pair, MPI_STATUSES_IGNORE, ierr)
  call check(pair(1) == MPI_REQUEST_NULL .and. pair(2) == MPI_REQUEST_NULL, 'waitall requests')
  call check(token(1) == ieor(rank, 1), 'isend/irecv')
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a)', 'known_calls: all results correct'
  call MPI_Finalize(ierr)

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    integer :: code
    if (.not. ok) then
      print '(a, a, a, i0)', 'known_calls: WRONG RESULT in ', what, ' on rank ', rank
      call MPI_Abort(MPI_COMM_WORLD, 3, code)
    end if
  end subroutine check
end program known_calls
