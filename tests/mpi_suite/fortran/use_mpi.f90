! Fortran (`use mpi`) calls on device buffers, each result compared with a
! reference computed on the host: collectives (blocking, nonblocking,
! persistent, on a sub-communicator), point-to-point (blocking, matched
! probes, nonblocking, persistent), one-sided, local calls; the Fortran
! sentinels (MPI_IN_PLACE, MPI_STATUS(ES)_IGNORE), statuses, one-based
! indices, LOGICAL flags, and errors returned in ierror.
program use_mpi
  use, intrinsic :: iso_c_binding, only: c_loc
  use mpi
  use suite_device
  implicit none
  integer :: rank, nranks, left, right, ierr, case_id

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)
  call suite_device_init()
  left = modulo(rank - 1, nranks)
  right = modulo(rank + 1, nranks)
  case_id = 0

  call collectives()
  call alltoallv()
  call sub_communicator()
  call point_to_point()
  call nonblocking()
  call persistent()
  call one_sided()
  call local_calls()
  call errors()
  call finish()

contains

  ! The element-wise sum of every rank's data of the case.
  subroutine sum_of_ranks(want, id)
    real(8), intent(out) :: want(:)
    integer, intent(in) :: id
    real(8) :: peer(size(want))
    integer :: r
    want = 0
    do r = 0, nranks - 1
      call random_whole_numbers(peer, id, r)
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
    integer, intent(out) :: requests(2)
    call MPI_Irecv(drecv, size(drecv), MPI_DOUBLE_PRECISION, left, tag, MPI_COMM_WORLD, requests(1), ierr)
    call MPI_Isend(dsend, size(dsend), MPI_DOUBLE_PRECISION, right, tag, MPI_COMM_WORLD, requests(2), ierr)
  end subroutine

  subroutine collectives()
    integer, parameter :: n = 1001
    real(8), pointer, contiguous :: dsend(:), drecv(:), dall(:)
    real(4), pointer, contiguous :: dreal(:)
    integer, pointer, contiguous :: dint(:)
    real(8) :: h(n), got(n), want(n), all_h(n * nranks), peer(n)
    real(4) :: hr(n), gotr(n), wantr(n)
    integer :: hi(n), goti(n), r, root

    dsend => device_doubles(n)
    drecv => device_doubles(n)
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call sum_of_ranks(want, case_id)
    call to_device(dsend, h)
    call MPI_Allreduce(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Allreduce(MPI_DOUBLE_PRECISION, MPI_SUM)')

    ! In place, from the second element on: the first stays as it was.
    call to_device(drecv, h)
    call MPI_Allreduce(MPI_IN_PLACE, drecv(2), n - 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. got(1) == h(1) .and. all(got(2:) == want(2:)), &
               'MPI_Allreduce(MPI_IN_PLACE) at an offset')

    ! MPI_REAL, MPI_MAX, to the last rank.
    dreal => device_reals(n)
    case_id = case_id + 1
    root = nranks - 1
    call random_whole_numbers(h, case_id, rank)
    hr = real(h, 4)
    wantr = -huge(1.0)
    do r = 0, nranks - 1
      call random_whole_numbers(peer, case_id, r)
      wantr = max(wantr, real(peer, 4))
    end do
    call to_device_real(dreal, hr)
    if (mpich4()) then
      ! MPICH 4.0.2 crashes in this in-place MPI_Reduce, host buffers too.
    else if (rank == root) then
      call MPI_Reduce(MPI_IN_PLACE, dreal, n, MPI_REAL, MPI_MAX, root, MPI_COMM_WORLD, ierr)
      call from_device_real(gotr, dreal)
      call check(ierr == MPI_SUCCESS .and. all(gotr == wantr), 'MPI_Reduce(MPI_IN_PLACE, MPI_REAL, MPI_MAX)')
    else
      call MPI_Reduce(dreal, dreal, n, MPI_REAL, MPI_MAX, root, MPI_COMM_WORLD, ierr)
      call check(ierr == MPI_SUCCESS, 'MPI_Reduce(MPI_REAL, MPI_MAX) at a leaf')
    end if

    ! MPI_INTEGER from rank 0.
    dint => device_integers(n)
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, 0)
    hi = int(h)
    if (rank /= 0) hi = -1
    call to_device_int(dint, hi)
    call MPI_Bcast(dint, n, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
    call from_device_int(goti, dint)
    call check(ierr == MPI_SUCCESS .and. all(goti == int(h)), 'MPI_Bcast(MPI_INTEGER)')

    ! Every rank's block, in rank order.
    dall => device_doubles(n * nranks)
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call to_device(dsend, h)
    call MPI_Allgather(dsend, n, MPI_DOUBLE_PRECISION, dall, n, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    call from_device(all_h, dall)
    do r = 0, nranks - 1
      call random_whole_numbers(peer, case_id, r)
      call check(ierr == MPI_SUCCESS .and. all(all_h(r * n + 1:(r + 1) * n) == peer), 'MPI_Allgather')
    end do

    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
    call suite_device_free(c_loc(dreal))
    call suite_device_free(c_loc(dint))
    call suite_device_free(c_loc(dall))
  end subroutine

  ! Rank p sends rank q 1 + mod(p + q, 3) elements, from a buffer of random
  ! numbers laid out in rank order.
  subroutine alltoallv()
    integer :: sendcounts(nranks), sdispls(nranks), recvcounts(nranks), rdispls(nranks)
    integer :: p, q, total, offset
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8), allocatable :: h(:), got(:), peer(:)
    case_id = case_id + 1
    do p = 0, nranks - 1
      sendcounts(p + 1) = 1 + modulo(rank + p, 3)
      recvcounts(p + 1) = 1 + modulo(p + rank, 3)
    end do
    sdispls(1) = 0
    rdispls(1) = 0
    do p = 2, nranks
      sdispls(p) = sdispls(p - 1) + sendcounts(p - 1)
      rdispls(p) = rdispls(p - 1) + recvcounts(p - 1)
    end do
    allocate(h(sum(sendcounts)), got(sum(recvcounts)))
    call random_whole_numbers(h, case_id, rank)
    dsend => device_doubles(size(h))
    drecv => device_doubles(size(got))
    call to_device(dsend, h)
    call MPI_Alltoallv(dsend, sendcounts, sdispls, MPI_DOUBLE_PRECISION, drecv, recvcounts, rdispls, &
                       MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS, 'MPI_Alltoallv returned an error')
    do p = 0, nranks - 1
      ! Rank p's buffer, and where its block for this rank starts.
      total = 0
      do q = 0, nranks - 1
        total = total + 1 + modulo(p + q, 3)
      end do
      allocate(peer(total))
      call random_whole_numbers(peer, case_id, p)
      offset = 0
      do q = 0, rank - 1
        offset = offset + 1 + modulo(p + q, 3)
      end do
      call check(all(got(rdispls(p + 1) + 1:rdispls(p + 1) + recvcounts(p + 1)) == &
                     peer(offset + 1:offset + recvcounts(p + 1))), 'MPI_Alltoallv')
      deallocate(peer)
    end do
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  ! Even and odd ranks apart: a reduction within each.
  subroutine sub_communicator()
    integer, parameter :: n = 333
    integer :: half, half_size, r
    real(8), pointer, contiguous :: d(:)
    real(8) :: h(n), got(n), want(n), peer(n)
    call MPI_Comm_split(MPI_COMM_WORLD, modulo(rank, 2), -rank, half, ierr)
    call check(ierr == MPI_SUCCESS, 'MPI_Comm_split')
    call MPI_Comm_size(half, half_size, ierr)
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    want = 0
    do r = modulo(rank, 2), nranks - 1, 2
      call random_whole_numbers(peer, case_id, r)
      want = want + peer
    end do
    d => device_doubles(n)
    call to_device(d, h)
    call MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_DOUBLE_PRECISION, MPI_SUM, half, ierr)
    call from_device(got, d)
    call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Allreduce on a sub-communicator')
    call MPI_Comm_free(half, ierr)
    call check(ierr == MPI_SUCCESS .and. half == MPI_COMM_NULL, 'MPI_Comm_free')
    call suite_device_free(c_loc(d))
  end subroutine

  subroutine point_to_point()
    integer, parameter :: n = 777, tag = 17
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8) :: h(n), got(n), want(n)
    integer :: status(MPI_STATUS_SIZE), received, message
    dsend => device_doubles(n)
    drecv => device_doubles(n)

    ! Around the ring, with the status filled.
    call next_ring_case(dsend, h, want)
    call MPI_Sendrecv(dsend, n, MPI_DOUBLE_PRECISION, right, tag, drecv, n, MPI_DOUBLE_PRECISION, left, tag, &
                      MPI_COMM_WORLD, status, ierr)
    call MPI_Get_count(status, MPI_DOUBLE_PRECISION, received, ierr)
    call from_device(got, drecv)
    call check(all(got == want) .and. status(MPI_SOURCE) == left .and. status(MPI_TAG) == tag .and. &
               received == n, 'MPI_Sendrecv around the ring, and its status')

    ! Rank 1 to rank 0: a matched probe, then MPI_Mrecv of the message.
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, 1)
    if (rank == 1) then
      call to_device(dsend, h)
      call MPI_Send(dsend, n - 2, MPI_DOUBLE_PRECISION, 0, tag + 1, MPI_COMM_WORLD, ierr)
      call check(ierr == MPI_SUCCESS, 'MPI_Send')
    else if (rank == 0) then
      call MPI_Mprobe(1, tag + 1, MPI_COMM_WORLD, message, status, ierr)
      call MPI_Get_count(status, MPI_DOUBLE_PRECISION, received, ierr)
      call check(ierr == MPI_SUCCESS .and. received == n - 2, 'MPI_Mprobe and its count')
      call MPI_Mrecv(drecv, received, MPI_DOUBLE_PRECISION, message, MPI_STATUS_IGNORE, ierr)
      call from_device(got, drecv)
      call check(ierr == MPI_SUCCESS .and. message == MPI_MESSAGE_NULL .and. all(got(:n - 2) == h(:n - 2)), &
                 'MPI_Mrecv(MPI_STATUS_IGNORE)')
    end if
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  subroutine nonblocking()
    integer, parameter :: n = 4099, tag = 23
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8) :: h(n), got(n), want(n)
    integer :: requests(2), statuses(MPI_STATUS_SIZE, 2), indices(2), which, done, i
    logical :: flag
    dsend => device_doubles(n)
    drecv => device_doubles(n)

    call next_ring_case(dsend, h, want)
    call post_ring(dsend, drecv, tag, requests)
    call MPI_Waitall(2, requests, statuses, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == want) .and. statuses(MPI_SOURCE, 1) == left .and. &
               all(requests == MPI_REQUEST_NULL), 'MPI_Irecv, MPI_Isend, MPI_Waitall with statuses')

    ! MPI_Waitany's index is one-based.
    call next_ring_case(dsend, h, want)
    call post_ring(dsend, drecv, tag, requests)
    done = 0
    do i = 1, 2
      call MPI_Waitany(2, requests, which, MPI_STATUS_IGNORE, ierr)
      call check(ierr == MPI_SUCCESS .and. (which == 1 .or. which == 2), 'MPI_Waitany index')
      if (which == 1 .or. which == 2) done = done + which
    end do
    call from_device(got, drecv)
    call check(done == 3 .and. all(got == want), 'MPI_Waitany: both requests, the receive filled')

    ! MPI_Testall's flag is a LOGICAL; MPI_Waitsome's indices are one-based.
    call next_ring_case(dsend, h, want)
    call post_ring(dsend, drecv, tag, requests)
    call MPI_Waitsome(2, requests, done, indices, statuses, ierr)
    call check(ierr == MPI_SUCCESS .and. done >= 1 .and. all(indices(:done) >= 1) .and. all(indices(:done) <= 2), &
               'MPI_Waitsome indices')
    flag = .false.
    do while (.not. flag)
      call MPI_Testall(2, requests, flag, MPI_STATUSES_IGNORE, ierr)
      if (ierr /= MPI_SUCCESS) exit
    end do
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. flag .and. all(got == want), 'MPI_Testall')

    ! A nonblocking reduction, waited for without a status.
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call sum_of_ranks(want, case_id)
    call to_device(dsend, h)
    call MPI_Iallreduce(dsend, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, requests(1), ierr)
    call MPI_Wait(requests(1), MPI_STATUS_IGNORE, ierr)
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == want) .and. requests(1) == MPI_REQUEST_NULL, &
               'MPI_Iallreduce, MPI_Wait(MPI_STATUS_IGNORE)')

    ! A nonblocking broadcast, tested until done.
    case_id = case_id + 1
    call random_whole_numbers(h, case_id, 0)
    if (rank == 0) call to_device(drecv, h)
    call MPI_Ibcast(drecv, n, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, requests(1), ierr)
    flag = .false.
    do while (.not. flag .and. ierr == MPI_SUCCESS)
      call MPI_Test(requests(1), flag, MPI_STATUS_IGNORE, ierr)
    end do
    call from_device(got, drecv)
    call check(ierr == MPI_SUCCESS .and. all(got == h), 'MPI_Ibcast, MPI_Test')
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  ! The same pair of persistent requests started twice, new data each time.
  subroutine persistent()
    integer, parameter :: n = 2049, tag = 31
    real(8), pointer, contiguous :: dsend(:), drecv(:)
    real(8) :: h(n), got(n), want(n)
    integer :: requests(2), round
    dsend => device_doubles(n)
    drecv => device_doubles(n)
    call MPI_Recv_init(drecv, n, MPI_DOUBLE_PRECISION, left, tag, MPI_COMM_WORLD, requests(1), ierr)
    call MPI_Send_init(dsend, n, MPI_DOUBLE_PRECISION, right, tag, MPI_COMM_WORLD, requests(2), ierr)
    do round = 1, 2
      call next_ring_case(dsend, h, want)
      call MPI_Startall(2, requests, ierr)
      call MPI_Waitall(2, requests, MPI_STATUSES_IGNORE, ierr)
      call from_device(got, drecv)
      call check(ierr == MPI_SUCCESS .and. all(got == want) .and. all(requests /= MPI_REQUEST_NULL), &
                 'MPI_Send_init, MPI_Recv_init, MPI_Startall, MPI_Waitall')
    end do
    call MPI_Request_free(requests(1), ierr)
    call MPI_Request_free(requests(2), ierr)
    call check(ierr == MPI_SUCCESS .and. all(requests == MPI_REQUEST_NULL), 'MPI_Request_free')
    call suite_device_free(c_loc(dsend))
    call suite_device_free(c_loc(drecv))
  end subroutine

  ! A window of device memory: put to the right, get from the right.
  subroutine one_sided()
    integer, parameter :: n = 515
    real(8), pointer, contiguous :: dwin(:), dorigin(:)
    real(8) :: h(n), got(n), want(n)
    integer :: win
    integer(kind=MPI_ADDRESS_KIND) :: value
    logical :: flag
    dwin => device_doubles(n)
    dorigin => device_doubles(n)
    call MPI_Win_create(dwin, int(8 * n, MPI_ADDRESS_KIND), 8, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
    call check(ierr == MPI_SUCCESS, 'MPI_Win_create on device memory')
    call MPI_Win_get_attr(win, MPI_WIN_SIZE, value, flag, ierr)
    call check(ierr == MPI_SUCCESS .and. flag .and. value == 8 * n, 'MPI_Win_get_attr(MPI_WIN_SIZE)')
    call MPI_Win_get_attr(win, MPI_WIN_BASE, value, flag, ierr)
    call check(ierr == MPI_SUCCESS .and. flag .and. value == transfer(c_loc(dwin), value), &
               'MPI_Win_get_attr(MPI_WIN_BASE)')

    case_id = case_id + 1
    call random_whole_numbers(h, case_id, rank)
    call random_whole_numbers(want, case_id, left)
    call to_device(dorigin, h)
    call MPI_Win_fence(0, win, ierr)
    call MPI_Put(dorigin, n, MPI_DOUBLE_PRECISION, right, 0_MPI_ADDRESS_KIND, n, MPI_DOUBLE_PRECISION, win, ierr)
    call MPI_Win_fence(0, win, ierr)
    call from_device(got, dwin)
    call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Put between fences')

    ! The right neighbour's window now holds this rank's data.
    call MPI_Get(dorigin, n - 3, MPI_DOUBLE_PRECISION, right, 3_MPI_ADDRESS_KIND, n - 3, MPI_DOUBLE_PRECISION, &
                 win, ierr)
    call MPI_Win_fence(0, win, ierr)
    call from_device(got, dorigin)
    call check(ierr == MPI_SUCCESS .and. all(got(:n - 3) == h(4:)), 'MPI_Get between fences')
    call MPI_Win_free(win, ierr)
    call check(ierr == MPI_SUCCESS .and. win == MPI_WIN_NULL, 'MPI_Win_free')
    call suite_device_free(c_loc(dwin))
    call suite_device_free(c_loc(dorigin))
  end subroutine

  subroutine local_calls()
    integer, parameter :: n = 129
    real(8), pointer, contiguous :: din(:), dinout(:)
    real(8) :: a(n), b(n), got(n)
    din => device_doubles(n)
    dinout => device_doubles(n)
    case_id = case_id + 1
    call random_whole_numbers(a, case_id, rank)
    call random_whole_numbers(b, case_id, rank + nranks)
    call to_device(din, a)
    call to_device(dinout, b)
    call MPI_Reduce_local(din, dinout, n, MPI_DOUBLE_PRECISION, MPI_SUM, ierr)
    call from_device(got, dinout)
    call check(ierr == MPI_SUCCESS .and. all(got == a + b), 'MPI_Reduce_local')
    call suite_device_free(c_loc(din))
    call suite_device_free(c_loc(dinout))
  end subroutine

  ! Bad input on device buffers: the real MPI's error class in ierror.
  subroutine errors()
    integer, parameter :: n = 16
    real(8), pointer, contiguous :: d(:)
    integer :: error_class, code
    d => device_doubles(n)
    ! MPICH 4.0.2 aborts on a negative count, host buffers too.
    if (.not. mpich4()) then
      call MPI_Allreduce(MPI_IN_PLACE, d, -1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, code)
      call MPI_Error_class(code, error_class, ierr)
      call check(error_class == MPI_ERR_COUNT, 'a negative count: MPI_ERR_COUNT')
    end if
    call MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_DOUBLE_PRECISION, MPI_SUM, 987654, code)
    call MPI_Error_class(code, error_class, ierr)
    call check(error_class == MPI_ERR_COMM, 'an invalid communicator handle: MPI_ERR_COMM')
    call MPI_Send(d, n, MPI_DOUBLE_PRECISION, nranks + 5, 0, MPI_COMM_WORLD, code)
    call MPI_Error_class(code, error_class, ierr)
    call check(error_class == MPI_ERR_RANK, 'a destination beyond the communicator: MPI_ERR_RANK')
    call suite_device_free(c_loc(d))
  end subroutine

  subroutine finish()
    integer :: total
    call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0 .and. total == 0) write(*, '(a)') 'No Errors'
    call MPI_Finalize(ierr)
    if (total /= 0) stop 1
  end subroutine

end program use_mpi
