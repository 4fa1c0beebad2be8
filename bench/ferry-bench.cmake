# ferry-bench: Ferry against NCCL and against hand-written host staging, on
# device buffers (see the header of ferry_bench.cc, which lists its parts).
# Included from bench/CMakeLists.txt. The binary links only MPI (and, with the
# CUDA toolkit, the static CUDA runtime); libferry.so arrives by LD_PRELOAD
# and NCCL by dlopen, so neither is a link dependency.
ferry_bench_program(ferry-bench ${CMAKE_CURRENT_LIST_DIR}/ferry_bench.cc)
target_sources(ferry-bench PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_check.cc
  ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_methods.cc
  ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_options.cc
  ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_report.cc
  ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_timing.cc)
if(FERRY_HAVE_CUDA)
  # CUDA events, streams, pinned staging memory and NCCL; host code only, so
  # no .cu file and no device code.
  target_compile_definitions(ferry-bench PRIVATE FERRY_BENCH_HAVE_CUDA=1)
  target_sources(ferry-bench PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ferry_bench_nccl_method.cc)
  target_link_libraries(ferry-bench PRIVATE CUDA::cudart_static)
endif()
install(TARGETS ferry-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
