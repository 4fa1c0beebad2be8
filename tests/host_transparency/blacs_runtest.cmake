# Stands in for ScaLAPACK's BLACS/TESTING/runtest.cmake, which the package's
# BLACS CTestTestfile.cmake calls from its build tree but Debian does not
# ship. Same verdict as upstream: the tester ends by calling BLACS_ABORT on
# purpose, so the run passes when it reached "DONE BLACS_GRIDEXIT".
#
# Inputs (-D): MPIEXEC, MPIEXEC_NUMPROC_FLAG, MPIEXEC_PREFLAGS, TEST_PROG.
separate_arguments(preflags NATIVE_COMMAND "${MPIEXEC_PREFLAGS}")
execute_process(
  COMMAND ${MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} 4 ${preflags} ./${TEST_PROG}
  OUTPUT_VARIABLE tester_output
  ERROR_FILE error_${TEST_PROG}.txt)
# stdout only: what the abort prints on stderr arrives in no fixed order.
message("${tester_output}")
if(NOT tester_output MATCHES "DONE BLACS_GRIDEXIT")
  file(READ error_${TEST_PROG}.txt tester_errors)
  message(FATAL_ERROR "${TEST_PROG} did not reach DONE BLACS_GRIDEXIT\n${tester_errors}")
endif()
