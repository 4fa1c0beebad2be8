# ferry_add_mpi_test(NAME <name> NP <ranks> COMMAND <program> [args...]
#                    [ENV VAR=VALUE ...] [NO_PRELOAD] [TIMEOUT <seconds>]
#                    [EXPECT <regex>])
#
# Registers a CTest test that runs <program> (a target or a path) on <ranks>
# MPI ranks under mpirun (in MPICH builds its mpiexec), with libferry.so (the
# `ferry` target) preloaded into every rank unless NO_PRELOAD. Each ENV assignment is exported to the ranks;
# FERRY_DEVICE defaults to FERRY_MPI_TEST_DEVICE. The test passes when mpirun
# exits 0 and its standard output holds a line that is exactly "No Errors"
# (the MPICH test-suite convention), and also a match of EXPECT's regular
# expression in its standard output or error when given (e.g. a FERRY_STATS line showing that a route was taken).
#
# Run with `cmake -P`, this file is also the script that runs such a test and
# checks both conditions: CTest alone can require a pattern in the output or a
# zero exit status, not both.

if(CMAKE_SCRIPT_MODE_FILE)
  list(JOIN FERRY_MPI_TEST_COMMAND " " command_line)
  execute_process(
    COMMAND ${FERRY_MPI_TEST_COMMAND}
    RESULT_VARIABLE exit_status
    OUTPUT_VARIABLE output
    ERROR_VARIABLE errors
    ECHO_OUTPUT_VARIABLE ECHO_ERROR_VARIABLE)
  if(NOT exit_status STREQUAL "0")
    message(FATAL_ERROR "exit status ${exit_status} from: ${command_line}")
  endif()
  # The verdict on standard output, kept apart from standard error (where
  # FERRY_STATS and logs go, and could cut the line); EXPECT may match
  # either.
  if(NOT output MATCHES "(^|\n)No Errors\r?\n")
    message(FATAL_ERROR "no \"No Errors\" line in the output of: ${command_line}")
  endif()
  if(DEFINED FERRY_MPI_TEST_EXPECT AND NOT "${output}${errors}" MATCHES "${FERRY_MPI_TEST_EXPECT}")
    message(FATAL_ERROR "nothing matches \"${FERRY_MPI_TEST_EXPECT}\" in the output of: ${command_line}")
  endif()
  return()
endif()

include_guard(GLOBAL)

find_package(MPI REQUIRED COMPONENTS C)
if(FERRY_MPI_FLAVOUR STREQUAL "mpich")
  # The launcher of the MPI built against: beside its compiler wrapper.
  get_filename_component(mpich_bin "${MPI_C_COMPILER}" DIRECTORY)
  find_program(FERRY_MPICH_MPIEXEC NAMES mpiexec.mpich mpiexec.hydra mpiexec HINTS "${mpich_bin}" NO_DEFAULT_PATH)
  find_program(FERRY_MPICH_MPIEXEC NAMES mpiexec.mpich mpiexec.hydra mpiexec REQUIRED)
endif()

set(FERRY_MPI_TEST_DEVICE "emulated" CACHE STRING
    "FERRY_DEVICE exported to MPI tests that do not set their own")
set(FERRY_MPI_TEST_TIMEOUT 120 CACHE STRING
    "Seconds an MPI test may run before it is stopped")

# Open MPI 4.1 in a container with few cores (mpirun also gets
# --oversubscribe): no binding, shared memory without the single-copy
# mechanisms (CMA, KNEM) that containers usually forbid, and the ob1 PML so
# that no network stack is probed. Without the UCX PML, osc/ucx cannot serve
# MPI_Win_create yet still wins the selection: it is left out so that osc/pt2pt
# serves host windows.
set(FERRY_MPIEXEC_FLAGS
    --bind-to none
    --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca osc ^ucx)

set(_FERRY_MPI_TEST_SCRIPT "${CMAKE_CURRENT_LIST_FILE}")

function(ferry_add_mpi_test)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "NO_PRELOAD" "NAME;NP;TIMEOUT;EXPECT" "COMMAND;ENV")
  if(ARG_EXPECT MATCHES ";")
    # It would reach the test's script cut at the first ';' (a list separator).
    message(FATAL_ERROR "ferry_add_mpi_test(${ARG_NAME}): EXPECT may not hold ';' (match it with '.')")
  endif()
  if(NOT DEFINED ARG_NAME OR NOT DEFINED ARG_NP OR NOT DEFINED ARG_COMMAND)
    message(FATAL_ERROR "ferry_add_mpi_test needs NAME, NP and COMMAND")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ferry_add_mpi_test(${ARG_NAME}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT DEFINED ARG_TIMEOUT)
    set(ARG_TIMEOUT ${FERRY_MPI_TEST_TIMEOUT})
  endif()

  list(POP_FRONT ARG_COMMAND program)
  if(TARGET ${program})
    set(program "$<TARGET_FILE:${program}>")
  endif()

  set(exports)
  set(device_chosen FALSE)
  foreach(assignment IN LISTS ARG_ENV)
    if(NOT assignment MATCHES "^[A-Za-z_][A-Za-z0-9_]*=")
      message(FATAL_ERROR "ferry_add_mpi_test(${ARG_NAME}): ENV takes VAR=VALUE, not '${assignment}'")
    endif()
    if(assignment MATCHES "^FERRY_DEVICE=")
      set(device_chosen TRUE)
    endif()
    list(APPEND exports -x "${assignment}")
  endforeach()
  if(NOT device_chosen)
    list(PREPEND exports -x "FERRY_DEVICE=${FERRY_MPI_TEST_DEVICE}")
  endif()
  if(NOT ARG_NO_PRELOAD)
    set(preload "$<TARGET_FILE:ferry>")
    if(FERRY_SANITIZER_RUNTIME)
      set(preload "${FERRY_SANITIZER_RUNTIME} ${preload}")
    endif()
    list(PREPEND exports -x "LD_PRELOAD=${preload}")
  endif()
  # The launcher stops the job itself a little before CTest would, so that
  # ranks are not left behind and the output so far is still shown.
  math(EXPR job_timeout "${ARG_TIMEOUT} - 10")
  if(FERRY_MPI_FLAVOUR STREQUAL "mpich")
    # MPICH's launcher (Hydra): -genv NAME VALUE, the time limit from the
    # environment.
    list(TRANSFORM exports REPLACE "^-x$" "-genv")
    list(TRANSFORM exports REPLACE "^([A-Za-z_][A-Za-z0-9_]*)=(.*)$" "\\1;\\2")
    set(command ${FERRY_MPICH_MPIEXEC} -n ${ARG_NP} ${exports} ${program} ${ARG_COMMAND})
    set(launcher_environment "MPIEXEC_TIMEOUT=${job_timeout}")
  else()
    # Sanitized builds: the sanitizers' options (tools/setup.sh sanitize sets
    # them) reach the ranks.
    set(sanitizer_flags)
    if(FERRY_SANITIZER_RUNTIME)
      set(sanitizer_flags -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS -x TSAN_OPTIONS)
    endif()
    set(command
        ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${ARG_NP} ${FERRY_MPIEXEC_FLAGS}
        --timeout ${job_timeout} ${MPIEXEC_PREFLAGS} ${sanitizer_flags} ${exports}
        ${program} ${MPIEXEC_POSTFLAGS} ${ARG_COMMAND})
    set(launcher_environment "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endif()
  set(expectation)
  if(DEFINED ARG_EXPECT)
    set(expectation "-DFERRY_MPI_TEST_EXPECT=${ARG_EXPECT}")
  endif()
  add_test(NAME ${ARG_NAME}
           COMMAND ${CMAKE_COMMAND} "-DFERRY_MPI_TEST_COMMAND=${command}" ${expectation}
                   -P "${_FERRY_MPI_TEST_SCRIPT}")
  set_tests_properties(${ARG_NAME} PROPERTIES
    TIMEOUT ${ARG_TIMEOUT}
    PROCESSORS ${ARG_NP}
    ENVIRONMENT "${launcher_environment}")
endfunction()
