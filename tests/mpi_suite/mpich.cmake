# The MPI suite under an MPICH-ABI library (FERRY_MPI=mpich), launched by its
# own mpiexec: the programs that pass there so far, each with its host
# baseline (the same program on MPICH alone, host buffers). The programs
# pass over MPICH 4.0.2's own faults where they name them (suite.h,
# mpich_4()). Not yet with Debian's MPICH 4.0.2:
# - collective coverage and communicators at 3 ranks and more: MPICH 4.0.2
#   crashes there (MPI_Reduce with MPI_IN_PLACE), host buffers and no Ferry
#   alike; the others run at 2, 3 and 4 ranks;
# - the host baseline of rma: MPICH 4.0.2's own host windows return wrong
#   data (puts, accumulates, fetch-and-op); Ferry's device windows pass.
# The errors program runs without its comparison of bad arguments' error
# classes on MPICH: Debian's 4.0.2 and PyPI's 5.0.2 check no arguments, and
# the host calls crash them; Ferry's own refusals and agreement checks run.
# Included by the suite's CMakeLists.txt instead of the Open MPI list.

set(mpich_programs
    bottom collective_coverage communicators data_movement file_io matched_probe net_messages
    offer_progress peer_messages persistent point_to_point rma_dynamic threads gpu_support nonblocking
    nonblocking_collectives reductions local_calls datatypes nonblocking_engine errors rma)
set(mpich_ranks 2 3 4)
set(mpich_two_ranks_only collective_coverage communicators)
set(mpich_without_baseline rma)
# MPICH 5 (PyPI's wheel, tools/mpi_wheels.sh) has none of MPICH 4.0.2's
# faults: host windows too, and 3 ranks; not the persistent program (MPICH 5
# completes a started persistent receive it is asked to cancel: MPI allows a
# cancel to fail, the program expects it).
string(REGEX MATCH "MPICH Version:[ \t]*([0-9.]+)" mpich_version "${MPI_C_LIBRARY_VERSION_STRING}")
if(CMAKE_MATCH_1 VERSION_GREATER_EQUAL 5)
  list(REMOVE_ITEM mpich_programs persistent)
  set(mpich_ranks 2 3)
  set(mpich_two_ranks_only)
  set(mpich_without_baseline)
endif()
if(FERRY_MPI_HAS_PARTITIONED)
  list(APPEND mpich_programs partitioned)
endif()
if(FERRY_MPI_HAS_LARGE_COUNT)
  list(APPEND mpich_programs large_count)
endif()
foreach(program IN LISTS mpich_programs)
  add_executable(mpi_suite_${program} ${program}.cc)
  target_link_libraries(mpi_suite_${program} PRIVATE ferry_mpi_suite)
  set(ranks_here ${mpich_ranks})
  if(program IN_LIST mpich_two_ranks_only)
    set(ranks_here 2)
  elseif(program MATCHES "^(offer_progress|net_messages)$")
    list(FILTER ranks_here EXCLUDE REGEX "3")  # they pair ranks up: even counts only
  endif()
  foreach(ranks IN LISTS ranks_here)
    ferry_add_mpi_test(NAME mpi_suite.mpich.${program}.np${ranks} NP ${ranks} COMMAND mpi_suite_${program})
    list(APPEND suite_tests mpi_suite.mpich.${program}.np${ranks})
  endforeach()
  if(program IN_LIST mpich_without_baseline)
    continue()
  endif()
  ferry_add_mpi_test(NAME mpi_suite.mpich.${program}.host_baseline.np2 NP 2 COMMAND mpi_suite_${program}
                     ENV FERRY_SUITE_HOST_BUFFERS=1
                     NO_PRELOAD)
  list(APPEND suite_tests mpi_suite.mpich.${program}.host_baseline.np2)
endforeach()
target_sources(mpi_suite_nonblocking PRIVATE nonblocking_matching.cc)
if(TARGET mpi_suite_rma)
  target_sources(mpi_suite_rma PRIVATE rma_windows.cc)
endif()

# The library is MPICH's: it links libmpich.so.12, and the device calls reach
# the engine.
ferry_add_mpi_test(NAME mpi_suite.mpich.data_movement.engine.np2 NP 2 COMMAND mpi_suite_data_movement
                   ENV FERRY_STATS=1
                   EXPECT "ferry stats rank 0: MPI_Bcast +[0-9]+ +[0-9]+ +[1-9]")
list(APPEND suite_tests mpi_suite.mpich.data_movement.engine.np2)
# Device messages between ranks of this machine go through peer memory (a
# send's Ferry column counts them), claimed and, with no time to wait for a
# claim, through bounce buffers.
ferry_add_mpi_test(NAME mpi_suite.mpich.point_to_point.routes.np2 NP 2 COMMAND mpi_suite_point_to_point
                   ENV FERRY_STATS=1
                   EXPECT "ferry stats rank 1: MPI_Send +[0-9]+ +[0-9]+ +[1-9][0-9]* ")
list(APPEND suite_tests mpi_suite.mpich.point_to_point.routes.np2)
foreach(program point_to_point nonblocking matched_probe peer_messages)
  ferry_add_mpi_test(NAME mpi_suite.mpich.${program}.bounce.np3 NP 3 COMMAND mpi_suite_${program}
                     ENV FERRY_PT2PT_CLAIM_US=0)
  list(APPEND suite_tests mpi_suite.mpich.${program}.bounce.np3)
endforeach()
# Disagreeing nonblocking collectives on the engine: the error comes from
# their completion.
foreach(ranks 2 3)
  ferry_add_mpi_test(NAME mpi_suite.mpich.errors.nonblocking_disagree.np${ranks} NP ${ranks}
                     COMMAND mpi_suite_errors
                     ENV FERRY_SUITE_NONBLOCKING_ON_ENGINE=1)
  list(APPEND suite_tests mpi_suite.mpich.errors.nonblocking_disagree.np${ranks})
endforeach()
# The Fortran programs: mpif.h and `use mpi` reach Ferry's C wrappers through
# MPICH's bindings, `use mpi_f08` partly through Ferry's own (mpi_flavour.h).
if(FERRY_HAVE_FORTRAN)
  include(fortran/fortran.cmake)
endif()
set_tests_properties(${suite_tests} PROPERTIES LABELS "mpi_suite;mpich")

# Every function MPICH's headers declare with a buffer (its large-count
# calls among them) has a wrapper, or a reason in the checker's allow-list
# to pass through.
set(mpich_headers)
foreach(dir IN LISTS MPI_C_INCLUDE_DIRS)
  file(GLOB found ${dir}/mpi.h ${dir}/mpi_proto.h ${dir}/mpio.h)
  list(APPEND mpich_headers ${found})
endforeach()
add_test(NAME mpich.mpi_header_coverage
         COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/check_mpi_coverage.py
                 ${PROJECT_SOURCE_DIR}/mpi_shim/mpi_functions.txt ${mpich_headers})
set_tests_properties(mpich.mpi_header_coverage PROPERTIES LABELS mpich)
