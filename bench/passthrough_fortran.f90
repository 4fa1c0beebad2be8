! Per-call latency of blocking and nonblocking MPI calls on HOST buffers made
! from Fortran (`use mpi`), as the caller feels it: under the preload each
! call goes through libferry.so's Fortran binding and C wrapper, without it
! straight to Open MPI's Fortran layer. passthrough_overhead.sh runs it both
! ways (its second argument) and compares the medians.
!
! Usage: mpirun -n 2 passthrough_fortran [iterations]
! Rank 0 prints "preload <ferry|none>", then one line per case in
! passthrough_overhead's format:
!   case <name> bytes <n> median_us <x> p10_us <x> p90_us <x> batch_median_us <x>
program passthrough_fortran
  use, intrinsic :: iso_c_binding
  use mpi
  implicit none
  integer, parameter :: batch_calls = 100
  interface
    type(c_ptr) function dlsym(handle, name) bind(C, name="dlsym")
      import :: c_ptr, c_char
      type(c_ptr), value :: handle
      character(kind=c_char), intent(in) :: name(*)
    end function
  end interface
  integer :: rank, nranks, ierr, iterations, warmup
  character(len=32) :: argument

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  iterations = 20000
  if (command_argument_count() >= 1) then
    call get_command_argument(command_argument_count(), argument)
    read(argument, *) iterations
  end if
  warmup = max(iterations / 10, 100)
  if (rank == 0) then
    ! RTLD_DEFAULT is a null handle with glibc.
    if (c_associated(dlsym(c_null_ptr, "ferry_device_backend" // c_null_char))) then
      write(*, '(a)') 'preload ferry'
    else
      write(*, '(a)') 'preload none'
    end if
  end if
  call measure('fortran_allreduce', 1)
  call measure('fortran_sendrecv', 2)
  call measure('fortran_isend_irecv', 3)
  call measure('fortran_bcast', 4)
  call MPI_Finalize(ierr)

contains

  subroutine one_call(which)
    integer, intent(in) :: which
    real(8), save :: a(1) = 1, b(1)
    integer :: left, right, requests(2), statuses(MPI_STATUS_SIZE, 2), status(MPI_STATUS_SIZE)
    left = modulo(rank - 1, nranks)
    right = modulo(rank + 1, nranks)
    select case (which)
    case (1)
      call MPI_Allreduce(a, b, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    case (2)
      call MPI_Sendrecv(a, 1, MPI_DOUBLE_PRECISION, right, 0, b, 1, MPI_DOUBLE_PRECISION, left, 0, &
                        MPI_COMM_WORLD, status, ierr)
    case (3)
      call MPI_Irecv(b, 1, MPI_DOUBLE_PRECISION, left, 0, MPI_COMM_WORLD, requests(1), ierr)
      call MPI_Isend(a, 1, MPI_DOUBLE_PRECISION, right, 0, MPI_COMM_WORLD, requests(2), ierr)
      call MPI_Waitall(2, requests, statuses, ierr)
    case default
      call MPI_Bcast(a, 1, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
    end select
  end subroutine

  subroutine measure(name, which)
    character(*), intent(in) :: name
    integer, intent(in) :: which
    real(8), allocatable :: single(:), batched(:)
    real(8) :: start
    integer :: i, j
    allocate(single(iterations), batched(max(iterations / batch_calls, 1)))
    do i = 1, warmup
      call one_call(which)
    end do
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    do i = 1, iterations
      start = MPI_Wtime()
      call one_call(which)
      single(i) = (MPI_Wtime() - start) * 1e6
    end do
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    do i = 1, size(batched)
      start = MPI_Wtime()
      do j = 1, batch_calls
        call one_call(which)
      end do
      batched(i) = (MPI_Wtime() - start) * 1e6 / batch_calls
    end do
    call sort(single)
    call sort(batched)
    if (rank == 0) write(*, '(a, 1x, a, a, 4(a, f0.4))') 'case', name, ' bytes 8', &
        ' median_us ', single((size(single) + 1) / 2), ' p10_us ', single(max(size(single) / 10, 1)), &
        ' p90_us ', single(max(9 * size(single) / 10, 1)), ' batch_median_us ', batched((size(batched) + 1) / 2)
  end subroutine

  ! Heapsort, ascending.
  subroutine sort(values)
    real(8), intent(inout) :: values(:)
    integer :: n, i
    real(8) :: top
    n = size(values)
    do i = n / 2, 1, -1
      call sift(values, i, n)
    end do
    do i = n, 2, -1
      top = values(1)
      values(1) = values(i)
      values(i) = top
      call sift(values, 1, i - 1)
    end do
  end subroutine

  subroutine sift(values, first, last)
    real(8), intent(inout) :: values(:)
    integer, intent(in) :: first, last
    integer :: parent, child
    real(8) :: value
    value = values(first)
    parent = first
    child = 2 * parent
    do while (child <= last)
      if (child < last) then
        if (values(child) < values(child + 1)) child = child + 1
      end if
      if (value >= values(child)) exit
      values(parent) = values(child)
      parent = child
      child = 2 * parent
    end do
    values(parent) = value
  end subroutine

end program passthrough_fortran
