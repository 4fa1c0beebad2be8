# The suite's Fortran programs: the same checks against host references, the
# calls made through each of the MPI's Fortran layers (mpif.h, `use mpi`,
# `use mpi_f08`), which reach libferry.so by its Fortran bindings, not its C
# wrappers. Included by the suite's CMakeLists.txt where FERRY_HAVE_FORTRAN.

add_library(ferry_mpi_suite_fortran STATIC fortran/suite_device.f90)
set_target_properties(ferry_mpi_suite_fortran PROPERTIES
  Fortran_MODULE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fortran_modules)
target_include_directories(ferry_mpi_suite_fortran PUBLIC ${CMAKE_CURRENT_BINARY_DIR}/fortran_modules)
target_link_libraries(ferry_mpi_suite_fortran PUBLIC ferry_mpi_suite_device MPI::MPI_Fortran)

foreach(program use_mpi mpif_h use_mpi_f08)
  set(target mpi_suite_fortran_${program})
  add_executable(${target} fortran/${program}.f90)
  set_target_properties(${target} PROPERTIES
    LINKER_LANGUAGE Fortran
    Fortran_MODULE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fortran_modules/${program})
  target_link_libraries(${target} PRIVATE ferry_mpi_suite_fortran)
  if(program STREQUAL "mpif_h" AND CMAKE_Fortran_COMPILER_ID STREQUAL "GNU")
    # mpif.h declares no interfaces: gfortran (10 and later) otherwise takes
    # one buffer type per routine, as programs built on mpif.h are built.
    target_compile_options(${target} PRIVATE -fallow-argument-mismatch)
  endif()

  foreach(ranks 2 3)
    ferry_add_mpi_test(NAME mpi_suite.fortran_${program}.np${ranks} NP ${ranks} COMMAND ${target})
    list(APPEND suite_tests mpi_suite.fortran_${program}.np${ranks})
  endforeach()
  ferry_add_mpi_test(NAME mpi_suite.fortran_${program}.staged.np3 NP 3 COMMAND ${target}
                     ENV FERRY_ROUTE=staged)
  ferry_add_mpi_test(NAME mpi_suite.fortran_${program}.shm.np3 NP 3 COMMAND ${target}
                     ENV FERRY_P2P_DISABLE=1 FERRY_SHM_SEGMENT_BYTES=65536)
  # Two virtual nodes: device calls between them over the net transport.
  ferry_add_mpi_test(NAME mpi_suite.fortran_${program}.virtual_1x2.np2 NP 2
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:${target}>
                     ENV FERRY_SUITE_RANKS_PER_NODE=1 FERRY_NET_MIN_BYTES=0)
  ferry_add_mpi_test(NAME mpi_suite.fortran_${program}.host_baseline.np2 NP 2 COMMAND ${target}
                     ENV FERRY_SUITE_HOST_BUFFERS=1
                     NO_PRELOAD)
  list(APPEND suite_tests mpi_suite.fortran_${program}.staged.np3 mpi_suite.fortran_${program}.shm.np3
       mpi_suite.fortran_${program}.virtual_1x2.np2 mpi_suite.fortran_${program}.host_baseline.np2)
endforeach()

# The Fortran calls reach Ferry: its statistics count them, and the device
# reductions run on the engine.
ferry_add_mpi_test(NAME mpi_suite.fortran_use_mpi.stats.np2 NP 2 COMMAND mpi_suite_fortran_use_mpi
                   ENV FERRY_STATS=1
                   EXPECT "ferry stats rank 0: MPI_Allreduce +[0-9]+ +[0-9]+ +[1-9]")
list(APPEND suite_tests mpi_suite.fortran_use_mpi.stats.np2)
