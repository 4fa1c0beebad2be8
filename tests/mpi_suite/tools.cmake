# The tools end to end, included by CMakeLists.txt: ferry-bench (a run on
# 8 ranks, across virtual nodes, and its refusal of a bad setting),
# FERRY_TRACE with tools/ferry-trace, NVTX ranges under the tests' NVTX tool,
# tools/ferry-plot and bench/tune_compare.sh. Adds to suite_tests.
# ferry-bench prints a table, not "No Errors": a wrong result aborts the job,
# so its exit status is the test.
add_test(NAME mpi_suite.ferry_bench.np8
         COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 8 ${FERRY_MPIEXEC_FLAGS} --timeout 390
                 -x LD_PRELOAD=$<TARGET_FILE:ferry> -x FERRY_DEVICE=${FERRY_MPI_TEST_DEVICE}
                 $<TARGET_FILE:ferry-bench> --ops allreduce,bcast,alltoallv,sendrecv,send --sizes 8,4100,1M
                 --iters 3 --warmup 1 --nccl none)
set_tests_properties(mpi_suite.ferry_bench.np8 PROPERTIES
  TIMEOUT 400 PROCESSORS 8 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
list(APPEND suite_tests mpi_suite.ferry_bench.np8)
# A setting ferry-bench does not take is refused by name.
add_test(NAME mpi_suite.ferry_bench.usage COMMAND $<TARGET_FILE:ferry-bench> --nccl-net tcp)
set_tests_properties(mpi_suite.ferry_bench.usage PROPERTIES
  PASS_REGULAR_EXPRESSION "--nccl-net takes socket, not tcp"
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
list(APPEND suite_tests mpi_suite.ferry_bench.usage)
# Across two virtual nodes of two ranks (the net transport), with the host
# mpi column beside it.
add_test(NAME mpi_suite.ferry_bench.virtual_nodes.np4
         COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 4 ${FERRY_MPIEXEC_FLAGS} --timeout 290
                 -x LD_PRELOAD=$<TARGET_FILE:ferry> -x FERRY_DEVICE=${FERRY_MPI_TEST_DEVICE}
                 ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh
                 $<TARGET_FILE:ferry-bench> --ops allreduce,bcast,alltoallv,sendrecv --sizes 8,4100,3M
                 --iters 3 --warmup 1 --nccl none --host)
set_tests_properties(mpi_suite.ferry_bench.virtual_nodes.np4 PROPERTIES
  TIMEOUT 300 PROCESSORS 4 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
list(APPEND suite_tests mpi_suite.ferry_bench.virtual_nodes.np4)
# FERRY_TRACE on a program at two ranks, checked and merged by
# tools/ferry-trace (trace_test.sh): name, program, what the trace must
# show, and extra mpirun flags and environment.
list(JOIN FERRY_MPIEXEC_FLAGS " " trace_test_flags)
if(FERRY_SANITIZER_RUNTIME)  # sanitized builds: the runtime first, the options to the ranks
  string(APPEND trace_test_flags " -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS -x TSAN_OPTIONS")
  set(trace_test_preload "PRELOAD_FIRST=${FERRY_SANITIZER_RUNTIME};")
endif()
function(ferry_add_trace_test name program shows mpirun_flags extra_environment)
  add_test(NAME mpi_suite.trace.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/trace_test.sh ${PROJECT_SOURCE_DIR}/tools/ferry-trace
                   $<TARGET_FILE:ferry> $<TARGET_FILE:${program}> ${shows})
  set_tests_properties(mpi_suite.trace.${name} PROPERTIES
    TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "No Errors"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;${trace_test_preload}${extra_environment}MPIRUN_ARGS=${trace_test_flags} -x FERRY_DEVICE=${FERRY_MPI_TEST_DEVICE}${mpirun_flags}")
  set(suite_tests ${suite_tests} mpi_suite.trace.${name} PARENT_SCOPE)
endfunction()
# Engine calls with their device work on the GPU's track: on the engine
# worker, and without it, timed by events on the call's streams.
ferry_add_trace_test(np2 mpi_suite_reductions engine "" "")
ferry_add_trace_test(streams.np2 mpi_suite_reductions engine " -x FERRY_WORKER=0" "")
# Across two virtual nodes: calls by machine, within them the node's calls.
ferry_add_trace_test(across.np2 mpi_suite_reductions engine " -x FERRY_SUITE_RANKS_PER_NODE=1"
                     "TRACE_WRAPPER=${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh;")
# The heat stencil's nonblocking allreduces: their device work on the GPU's track.
ferry_add_trace_test(nonblocking.np2 ferry-heat-stencil nonblocking "" "")
# Device messages through peer memory: an arrow from each send to its receive.
ferry_add_trace_test(messages.np2 mpi_suite_peer_messages messages "" "")
# The GDA queue's operations (a window across two virtual nodes, the queue
# driven from the host): async spans from post to completion.
ferry_add_trace_test(gda.np2 mpi_suite_rma_device_across gda " -x FERRY_SUITE_RANKS_PER_NODE=1"
                     "TRACE_WRAPPER=${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh;")
# NVTX ranges under the tests' NVTX tool (builds with the CUDA toolkit).
if(FERRY_HAVE_CUDA)
  add_test(NAME mpi_suite.nvtx.np2
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/nvtx_test.sh $<TARGET_FILE:nvtx_probe> $<TARGET_FILE:ferry>
                   $<TARGET_FILE:ferry-demo>)
  set_tests_properties(mpi_suite.nvtx.np2 PROPERTIES
    TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "No Errors"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;MPIRUN_ARGS=${trace_test_flags} -x FERRY_DEVICE=${FERRY_MPI_TEST_DEVICE}")
  list(APPEND suite_tests mpi_suite.nvtx.np2)
endif()
# tools/ferry-plot on a ferry-bench run's CSV.
add_test(NAME mpi_suite.ferry_plot.np2
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ferry_plot_test.sh ${PROJECT_SOURCE_DIR}/tools/ferry-plot
                 $<TARGET_FILE:ferry> $<TARGET_FILE:ferry-bench>)
list(JOIN FERRY_MPIEXEC_FLAGS " " ferry_plot_flags)
set_tests_properties(mpi_suite.ferry_plot.np2 PROPERTIES
  TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "No Errors"
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;MPIRUN_ARGS=${ferry_plot_flags} -x FERRY_DEVICE=${FERRY_MPI_TEST_DEVICE}")
list(APPEND suite_tests mpi_suite.ferry_plot.np2)
# bench/tune_compare.sh, the side-by-side of settings, end to end.
list(JOIN FERRY_MPIEXEC_FLAGS " " tune_compare_flags)
add_test(NAME mpi_suite.tune_compare.np2
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tune_compare_test.sh ${PROJECT_SOURCE_DIR}/bench/tune_compare.sh
                 $<TARGET_FILE:ferry> $<TARGET_FILE:ferry-bench>)
set_tests_properties(mpi_suite.tune_compare.np2 PROPERTIES
  TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "No Errors"
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;MPIRUN_ARGS=${tune_compare_flags} -x FERRY_DEVICE=${FERRY_MPI_TEST_DEVICE}")
list(APPEND suite_tests mpi_suite.tune_compare.np2)
