# The MPI suite under an MPICH-ABI library (FERRY_MPI=mpich), launched by its
# own mpiexec: the programs that pass there so far, at 2 ranks, each with its
# host baseline (the same program on MPICH alone, host buffers). Not yet:
# - 3 ranks and more: Debian's MPICH 4.0.2 crashes in MPI_Reduce with
#   MPI_IN_PLACE there, host buffers and no Ferry alike;
# - the programs whose host baseline fails on MPICH 4.0.2 itself (MPI_MIN and
#   MPI_MAX on MPI_UINT8_T compare as signed: reductions, local calls; host
#   windows: rma; the others not yet sorted out);
# - point-to-point through peer memory (staged with this library,
#   peer_pt2pt.cc).
# Included by the suite's CMakeLists.txt instead of the Open MPI list.

set(mpich_programs
    bottom collective_coverage communicators data_movement file_io matched_probe net_messages
    offer_progress peer_messages persistent point_to_point rma_dynamic threads)
foreach(program IN LISTS mpich_programs)
  add_executable(mpi_suite_${program} ${program}.cc)
  target_link_libraries(mpi_suite_${program} PRIVATE ferry_mpi_suite)
  ferry_add_mpi_test(NAME mpi_suite.mpich.${program}.np2 NP 2 COMMAND mpi_suite_${program})
  ferry_add_mpi_test(NAME mpi_suite.mpich.${program}.host_baseline.np2 NP 2 COMMAND mpi_suite_${program}
                     ENV FERRY_SUITE_HOST_BUFFERS=1
                     NO_PRELOAD)
  list(APPEND suite_tests mpi_suite.mpich.${program}.np2 mpi_suite.mpich.${program}.host_baseline.np2)
endforeach()

# The library is MPICH's: it links libmpich.so.12, and the device calls reach
# the engine.
ferry_add_mpi_test(NAME mpi_suite.mpich.data_movement.engine.np2 NP 2 COMMAND mpi_suite_data_movement
                   ENV FERRY_STATS=1
                   EXPECT "ferry stats rank 0: MPI_Bcast +[0-9]+ +[0-9]+ +[1-9]")
list(APPEND suite_tests mpi_suite.mpich.data_movement.engine.np2)
set_tests_properties(${suite_tests} PROPERTIES LABELS "mpi_suite;mpich")
