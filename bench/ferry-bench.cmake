# ferry-bench: Ferry against NCCL and against hand-written host staging, on
# device buffers (see the header of ferry_bench.cc). Included from
# bench/CMakeLists.txt. The binary links only MPI (and, with the CUDA toolkit,
# the static CUDA runtime); libferry.so arrives by LD_PRELOAD and NCCL by
# dlopen, so neither is a link dependency.
ferry_bench_program(ferry-bench ${CMAKE_CURRENT_LIST_DIR}/ferry_bench.cc)
if(FERRY_HAVE_CUDA)
  # CUDA events, streams, pinned staging memory and NCCL; host code only, so
  # no .cu file and no device code.
  target_compile_definitions(ferry-bench PRIVATE FERRY_BENCH_HAVE_CUDA=1)
  target_link_libraries(ferry-bench PRIVATE CUDA::cudart_static)
endif()
