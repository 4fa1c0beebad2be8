! The MPI suite's device memory (device_alloc.h) for Fortran programs, and
! their failure count. Device memory is reached only through suite_memcpy,
! as a GPU's would have to be; the programs hand MPI a Fortran pointer to it
! (c_f_pointer, CONTIGUOUS so that no compiler copies it to a temporary).
module suite_device
  use, intrinsic :: iso_c_binding
  implicit none
  private
  public :: suite_device_init, suite_device_malloc, suite_device_free, suite_memcpy
  public :: device_doubles, device_reals, device_integers, to_device, from_device
  public :: to_device_int, from_device_int, to_device_real, from_device_real
  public :: random_whole_numbers, check, failures, mpich4, ferry_loaded

  integer, save :: failures = 0

  interface
    subroutine suite_device_init() bind(C, name="suite_device_init")
    end subroutine
    type(c_ptr) function suite_device_malloc(bytes) bind(C, name="suite_device_malloc")
      import :: c_ptr, c_size_t
      integer(c_size_t), value :: bytes
    end function
    subroutine suite_device_free(ptr) bind(C, name="suite_device_free")
      import :: c_ptr
      type(c_ptr), value :: ptr
    end subroutine
    integer(c_int) function suite_mpi_library_is(name) bind(C, name="suite_mpi_library_is")
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: name(*)
    end function
    type(c_ptr) function suite_ferry_backend() bind(C, name="suite_ferry_backend")
      import :: c_ptr
    end function
    subroutine suite_memcpy(dst, src, bytes) bind(C, name="suite_memcpy")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: dst, src
      integer(c_size_t), value :: bytes
    end subroutine
  end interface

contains

  function device_doubles(n) result(d)
    integer, intent(in) :: n
    real(c_double), pointer, contiguous :: d(:)
    call c_f_pointer(suite_device_malloc(int(8 * max(n, 1), c_size_t)), d, [max(n, 1)])
  end function

  function device_reals(n) result(d)
    integer, intent(in) :: n
    real(c_float), pointer, contiguous :: d(:)
    call c_f_pointer(suite_device_malloc(int(4 * max(n, 1), c_size_t)), d, [max(n, 1)])
  end function

  function device_integers(n) result(d)
    integer, intent(in) :: n
    integer(c_int), pointer, contiguous :: d(:)
    call c_f_pointer(suite_device_malloc(int(4 * max(n, 1), c_size_t)), d, [max(n, 1)])
  end function

  subroutine to_device(d, h)
    real(c_double), pointer, contiguous, intent(in) :: d(:)
    real(c_double), target, intent(in) :: h(:)
    call suite_memcpy(c_loc(d), c_loc(h), int(8 * size(h), c_size_t))
  end subroutine

  subroutine from_device(h, d)
    real(c_double), target, intent(inout) :: h(:)
    real(c_double), pointer, contiguous, intent(in) :: d(:)
    call suite_memcpy(c_loc(h), c_loc(d), int(8 * size(h), c_size_t))
  end subroutine

  subroutine to_device_real(d, h)
    real(c_float), pointer, contiguous, intent(in) :: d(:)
    real(c_float), target, intent(in) :: h(:)
    call suite_memcpy(c_loc(d), c_loc(h), int(4 * size(h), c_size_t))
  end subroutine

  subroutine from_device_real(h, d)
    real(c_float), target, intent(inout) :: h(:)
    real(c_float), pointer, contiguous, intent(in) :: d(:)
    call suite_memcpy(c_loc(h), c_loc(d), int(4 * size(h), c_size_t))
  end subroutine

  subroutine to_device_int(d, h)
    integer(c_int), pointer, contiguous, intent(in) :: d(:)
    integer(c_int), target, intent(in) :: h(:)
    call suite_memcpy(c_loc(d), c_loc(h), int(4 * size(h), c_size_t))
  end subroutine

  subroutine from_device_int(h, d)
    integer(c_int), target, intent(inout) :: h(:)
    integer(c_int), pointer, contiguous, intent(in) :: d(:)
    call suite_memcpy(c_loc(h), c_loc(d), int(4 * size(h), c_size_t))
  end subroutine

  ! Whole numbers in [-500, 500), seeded by (case, rank): sums are exact in any
  ! order, and every rank can rebuild every peer's data.
  subroutine random_whole_numbers(h, case_id, rank)
    real(c_double), intent(out) :: h(:)
    integer, intent(in) :: case_id, rank
    integer :: i
    integer(8) :: state
    ! Park and Miller's generator: products stay below 2**47.
    state = modulo(int(case_id, 8) * 1000003_8 + int(rank, 8) * 7919_8 + 12345_8, 2147483647_8)
    do i = 1, size(h)
      state = modulo(state * 48271_8, 2147483647_8)
      h(i) = real(modulo(state, 1000_8) - 500_8, c_double)
    end do
  end subroutine

  ! MPICH 4.0's own faults (host buffers without Ferry alike) are passed over.
  logical function mpich4()
    mpich4 = suite_mpi_library_is('MPICH Version:' // char(9) // '4.' // c_null_char) /= 0
  end function

  ! Whether libferry.so is loaded (the calls go through its bindings).
  logical function ferry_loaded()
    ferry_loaded = c_associated(suite_ferry_backend())
  end function

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      write(*, '(a, a)') 'FAILED: ', what
    end if
  end subroutine

end module suite_device
