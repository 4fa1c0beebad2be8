! Fortran 2008 (`use mpi_f08`) calls on device buffers, each result compared
! with a reference computed on the host: collectives (blocking, nonblocking,
! persistent, on a sub-communicator), point-to-point (blocking, matched
! probes, nonblocking, persistent), one-sided, local calls; MPI_IN_PLACE,
! TYPE(MPI_Status) and MPI_STATUS(ES)_IGNORE, one-based indices, LOGICAL
! flags, and errors returned in the optional ierror.
program use_mpi_f08
  use, intrinsic :: iso_c_binding, only: c_loc
  use mpi_f08
  use suite_device
  implicit none
  integer :: rank, nranks, left, right, ierr, case_id

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)
  call suite_device_init()
  left = modulo(rank - 1, nranks)
  right = modulo(rank + 1, nranks)
  case_id = 100

  call collectives()
  call point_to_point()
  call nonblocking()
  call persistent()
  call one_sided()
  call errors()
  call finish()

contains

  subroutine sum_of_ranks(want, id, members)
    real(8), intent(out) :: want(:)
    integer, intent(in) :: id, members(:)
    real(8) :: peer(size(want))
    integer :: i
    want = 0
    do i = 1, size(members)
      call random_whole_numbers(peer, id, members(i))
      want = want + peer
    end do
  end subroutine

  ! A new case around the ring: this rank's data in h and on the device in
  ! dsend, its left neighbour's (what this rank receives) in want.
  subroutine next_ring_case(dsend, h, want)
    real(8), pointer, contiguous, intent(in) :: dsend(:)
    real(8), intent(out) :: h(:), want(:)
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call random_whole_numbers(want, case_id, left)
    call to_device(dsend, h)
  end subroutine

  ! Receive from the left, send to the right.
  subroutine post_ring(dsend, drecv, tag, requests)
    real(8), pointer, contiguous, intent(in) :: dsend(:), drecv(:)
    integer, intent(in) :: tag
    type(MPI_Request), intent(out) :: requests(2)
    call MPI_Irecv(drecv, size(drecv), MPI_DOUBLE_PRECISION, left, tag, MPI_COMM_WORLD, requests(1))
    call MPI_Isend(dsend, size(dsend), MPI_DOUBLE_PRECISION, right, tag, MPI_COMM_WORLD, requests(2))
  end subroutine

  subroutine collectives()
    integer, parameter :: n = 1001
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8) :: h(n), got(n), want(n), a(n)
    type(MPI_Comm) :: half
    integer :: r
    dsend => device_doubles(n)
    drecv => device_doubles(n)

    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call sum_of_ranks(want, case_id, [(r, r = 0, nranks - 1)])
    call to_device(dsend, h)
    call MPI_Allreduce(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Allreduce')

    call to_device(drecv, h)
    call MPI_Allreduce(MPI_IN_PLACE, drecv(3), n - 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got(:2) == h(:2)) .and. all(got(3:) == want(3:)), &
               'MPI_Allreduce(MPI_IN_PLACE) at an offset')

    case_id = case_id + 1
    call random_whole_numbers(h, case_id, nranks - 1)
    if (rank == nranks - 1) call to_device(drecv, h)
    call MPI_Bcast(drecv, n, MPI_DOUBLE_PRECISION, nranks - 1, MPI_COMM_WORLD)
    call from_device(got, drecv)
    call check(all(got == h), 'MPI_Bcast without ierror')

    ! The ranks apart by parity; the local reduction on device buffers too.
    call MPI_Comm_split(MPI_COMM_WORLD, modulo(rank, 2), rank, half, ierr)
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call sum_of_ranks(want, case_id, [(r, r = modulo(rank, 2), nranks - 1, 2)])
    call to_device(dsend, h)
    call MPI_Allreduce(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, half, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Allreduce on a sub-communicator')
    call MPI_Comm_free(half)
    call check(half == MPI_COMM_NULL, 'MPI_Comm_free')

    call random_whole_numbers(a, case_id + 1000, rank)
    call to_device(dsend, a)
    call to_device(drecv, h)
    call MPI_Reduce_local(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == a + h), 'MPI_Reduce_local')
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  subroutine point_to_point()
    integer, parameter :: n = 777, tag = 5
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8) :: h(n), got(n), want(n)
    type(MPI_Status) :: status
    type(MPI_Message) :: message
    integer :: received
    dsend => device_doubles(n)
    drecv => device_doubles(n)

    call next_ring_case(dsend, h, want)
    call MPI_Sendrecv(dsend, n, MPI_DOUBLE_PRECISION, right, tag, drecv, n, MPI_DOUBLE_PRECISION, left, tag, &
                      MPI_COMM_WORLD, status, ierr)
    call MPI_Get_count(status, MPI_DOUBLE_PRECISION, received)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == want) .and. status%MPI_SOURCE == left .and. &
               status%MPI_TAG == tag .and. received == n, 'MPI_Sendrecv and its status')

    case_id = case_id + 1
    call random_whole_numbers(h, case_id, 1)
    if (rank == 1) then
      call to_device(dsend, h)
      call MPI_Ssend(dsend, n - 1, MPI_DOUBLE_PRECISION, 0, tag, MPI_COMM_WORLD, ierr)
      call check(ierr == MPI_SUCCESS, 'MPI_Ssend')
    else if (rank == 0) then
      call MPI_Mprobe(1, tag, MPI_COMM_WORLD, message, status)
      call MPI_Get_count(status, MPI_DOUBLE_PRECISION, received)
      call MPI_Mrecv(drecv, received, MPI_DOUBLE_PRECISION, message, MPI_STATUS_IGNORE, ierr)
      call from_device(got, drecv)
      call check(ierr == MPI_SUCCESS .and. received == n - 1 .and. message == MPI_MESSAGE_NULL .and. &
                 all(got(:n - 1) == h(:n - 1)), 'MPI_Mprobe, MPI_Mrecv')
    end if
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  subroutine nonblocking()
    integer, parameter :: n = 4099, tag = 9
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8) :: h(n), got(n), want(n)
    type(MPI_Request) :: requests(2)
    type(MPI_Status) :: statuses(2)
    integer :: which, done, i, r
    logical :: flag
    dsend => device_doubles(n)
    drecv => device_doubles(n)

    call next_ring_case(dsend, h, want)
    call post_ring(dsend, drecv, tag, requests)
    call MPI_Waitall(2, requests, statuses, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == want) .and. statuses(1)%MPI_SOURCE == left .and. &
               requests(1) == MPI_REQUEST_NULL, 'MPI_Irecv, MPI_Isend, MPI_Waitall')

    call next_ring_case(dsend, h, want)
    call post_ring(dsend, drecv, tag, requests)
    done = 0
    do i = 1, 2
      call MPI_Waitany(2, requests, which, MPI_STATUS_IGNORE, ierr)
      if (which == 1 .or. which == 2) done = done + which
    end do
    call from_device(got, drecv)
    ! MPICH 4.0.2's own `use mpi_f08` MPI_Waitany gives zero-based indices.
    call check((done == 3 .or. (mpich4() .and. .not. ferry_loaded())) .and. all(got == want), &
               'MPI_Waitany (one-based indices)')

    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call sum_of_ranks(want, case_id, [(r, r = 0, nranks - 1)])
    call to_device(dsend, h)
    call MPI_Iallreduce(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, requests(1))
    flag = .false.
    do while (.not. flag)
      call MPI_Test(requests(1), flag, MPI_STATUS_IGNORE, ierr)
      if (ierr /= MPI_SUCCESS) exit
    end do
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. flag .and. all(got == want), 'MPI_Iallreduce, MPI_Test')
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  subroutine persistent()
    integer, parameter :: n = 2049, tag = 13
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8) :: h(n), got(n), want(n)
    type(MPI_Request) :: requests(2)
    integer :: round
    dsend => device_doubles(n)
    drecv => device_doubles(n)
    call MPI_Recv_init(drecv, n, MPI_DOUBLE_PRECISION, left, tag, MPI_COMM_WORLD, requests(1))
    call MPI_Send_init(dsend, n, MPI_DOUBLE_PRECISION, right, tag, MPI_COMM_WORLD, requests(2))
    do round = 1, 2
      call next_ring_case(dsend, h, want)
      call MPI_Startall(2, requests, ierr)
      call MPI_Waitall(2, requests, MPI_STATUSES_IGNORE, ierr)
      call from_device(got, drecv)
      call check(ierr == MPI_SUCCESS .and. all(got == want), 'persistent requests started twice')
    end do
    call MPI_Request_free(requests(1))
    call MPI_Request_free(requests(2))
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  subroutine one_sided()
    integer, parameter :: n = 515
    real(8), pointer, contiguous :: dwin(:), dorigin(:)
    real(8) :: h(n), got(n), want(n)
    type(MPI_Win) :: win
    integer(kind=MPI_ADDRESS_KIND) :: value
    logical :: flag
    dwin => device_doubles(n)
    dorigin => device_doubles(n)
    call MPI_Win_create(dwin, int(8 * n, MPI_ADDRESS_KIND), 8, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
    call check(ierr == MPI_SUCCESS, 'MPI_Win_create on device memory')
    call MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, value, flag)
    call check(flag .and. value == 8, 'MPI_Win_get_attr(MPI_WIN_DISP_UNIT)')

    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call random_whole_numbers(want, case_id, left)
    call to_device(dorigin, h)
    call MPI_Win_fence(0, win)
    call MPI_Put(dorigin, n, MPI_DOUBLE_PRECISION, right, 0_MPI_ADDRESS_KIND, n, MPI_DOUBLE_PRECISION, win, ierr)
    call MPI_Win_fence(0, win)
    call from_device(got, dwin)
    call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Put between fences')
    call MPI_Get(dorigin, n, MPI_DOUBLE_PRECISION, left, 0_MPI_ADDRESS_KIND, n, MPI_DOUBLE_PRECISION, win, ierr)
    call MPI_Win_fence(0, win)
    call from_device(got, dorigin)
    call random_whole_numbers(want, case_id, modulo(left - 1, nranks))
    call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Get between fences')
    call MPI_Win_free(win)
    call check(win == MPI_WIN_NULL, 'MPI_Win_free')
    call suite_device_free(c_loc(dwin))
    call suite_device_free(c_loc(dorigin))
  end subroutine

  subroutine errors()
    real(8), pointer, contiguous :: d(:)
    integer :: error_class, code
    d => device_doubles(8)
    ! MPICH 4.0.2's `use mpi_f08` aborts on a negative count, host buffers too.
    if (.not. mpich4()) then
      call MPI_Allreduce(MPI_IN_PLACE, d, -3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, code)
      call MPI_Error_class(code, error_class)
      call check(error_class == MPI_ERR_COUNT, 'a negative count: MPI_ERR_COUNT')
    end if
    call MPI_Recv(d, 8, MPI_DOUBLE_PRECISION, nranks + 2, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE, code)
    call MPI_Error_class(code, error_class)
    call check(error_class == MPI_ERR_RANK, 'a source beyond the communicator: MPI_ERR_RANK')
    call suite_device_free(c_loc(d))
  end subroutine

  subroutine finish()
    integer :: total
    call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
    if (rank == 0 .and. total == 0) write(*, '(a)') 'No Errors'
    call MPI_Finalize()
    if (total /= 0) stop 1
  end subroutine

end program use_mpi_f08
