! Calls through mpif.h on device buffers: the sentinels are common blocks of
! the program itself here (MPI_IN_PLACE, MPI_STATUS_IGNORE,
! MPI_STATUSES_IGNORE), and every result is checked against the host.
program mpif_h
  use, intrinsic :: iso_c_binding, only: c_loc
  use suite_device
  implicit none
  include 'mpif.h'
  integer, parameter :: n = 999, tag = 3
  real(8), pointer, contiguous :: dsend(:), drecv(:)
  real(8) :: h(n), got(n), want(n), peer(n)
  integer :: rank, nranks, left, right, ierr, r, total
  integer :: requests(2), statuses(MPI_STATUS_SIZE, 2)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)
  call suite_device_init()
  left = modulo(rank - 1, nranks)
  right = modulo(rank + 1, nranks)
  dsend => device_doubles(n)
  drecv => device_doubles(n)

  call random_whole_numbers(h, 201, rank)
  want = 0
  do r = 0, nranks - 1
    call random_whole_numbers(peer, 201, r)
    want = want + peer
  end do
  call to_device(drecv, h)
  call MPI_Allreduce(MPI_IN_PLACE, drecv, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call from_device(got, drecv)
  call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Allreduce(MPI_IN_PLACE)')

  call random_whole_numbers(h, 202, rank)
  call random_whole_numbers(want, 202, left)
  call to_device(dsend, h)
  call MPI_Irecv(drecv, n, MPI_DOUBLE_PRECISION, left, tag, MPI_COMM_WORLD, requests(1), ierr)
  call MPI_Isend(dsend, n, MPI_DOUBLE_PRECISION, right, tag, MPI_COMM_WORLD, requests(2), ierr)
  call MPI_Waitall(2, requests, statuses, ierr)
  call from_device(got, drecv)
  call check(ierr == MPI_SUCCESS .and. all(got == want) .and. statuses(MPI_TAG, 1) == tag, &
             'MPI_Irecv, MPI_Isend, MPI_Waitall')

  call random_whole_numbers(h, 203, rank)
  call random_whole_numbers(want, 203, right)
  call to_device(dsend, h)
  call MPI_Sendrecv(dsend, n, MPI_DOUBLE_PRECISION, left, tag, drecv, n, MPI_DOUBLE_PRECISION, right, tag, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  call from_device(got, drecv)
  call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Sendrecv(MPI_STATUS_IGNORE)')

  call MPI_Irecv(drecv, n, MPI_DOUBLE_PRECISION, left, tag, MPI_COMM_WORLD, requests(1), ierr)
  call MPI_Isend(dsend, n, MPI_DOUBLE_PRECISION, right, tag, MPI_COMM_WORLD, requests(2), ierr)
  call MPI_Waitall(2, requests, MPI_STATUSES_IGNORE, ierr)
  call random_whole_numbers(want, 203, left)
  call from_device(got, drecv)
  call check(ierr == MPI_SUCCESS .and. all(got == want), 'MPI_Waitall(MPI_STATUSES_IGNORE)')

  call suite_device_free(c_loc(dsend))
  call suite_device_free(c_loc(drecv))
  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. total == 0) write(*, '(a)') 'No Errors'
  call MPI_Finalize(ierr)
  if (total /= 0) stop 1
end program mpif_h
