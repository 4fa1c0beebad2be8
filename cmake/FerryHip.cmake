# The HIP/ROCm toolchain for -DFERRY_GPU=hip: enables CMake's HIP language
# (the engine's .cu kernels are compiled as HIP) and finds the HIP runtime
# for the host code (hip::host). Sets FERRY_HAVE_HIP.
#
# A ROCm install under /opt/rocm needs nothing here: CMake finds its clang
# and its hip-lang package itself. Debian and Ubuntu's packages (bookworm:
# hipcc and libamdhip64-dev, HIP 5.2.3 on clang 15) need three things CMake
# 3.25 does not do for them, set below unless the caller set them:
#  - the HIP compiler is the clang hipcc runs (clang++-15), not
#    /usr/bin/clang++, which may be another version;
#  - that clang finds neither the HIP headers nor the device libraries by
#    itself: --rocm-path=/usr and --hip-device-lib-path (what hipcc passes);
#  - the hip-lang package lies in lib/<arch>/cmake, where CMake looks for it
#    in <ROCm root>/lib/cmake only: a ROCm root in the build tree links it
#    there, and the packages it depends on are named to CMake's compiler
#    checks (CMAKE_TRY_COMPILE_PLATFORM_VARIABLES).
# The GPU targets: CMAKE_HIP_ARCHITECTURES, gfx908;gfx90a (MI100, MI200) by
# default; clang 15 does not know gfx942 (MI300): name it with a newer ROCm.

if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
  set(CMAKE_HIP_ARCHITECTURES gfx908 gfx90a CACHE STRING "AMD GPU targets of the HIP kernels")
endif()

set(ferry_rocm_cmake_dirs)
foreach(dir /opt/rocm/lib/cmake /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake /usr/lib/cmake)
  if(EXISTS ${dir}/hip-lang/hip-lang-config.cmake)
    list(APPEND ferry_rocm_cmake_dirs ${dir})
  endif()
endforeach()
if(NOT ferry_rocm_cmake_dirs)
  message(FATAL_ERROR "FERRY_GPU=hip: no HIP runtime found (hip-lang-config.cmake); install libamdhip64-dev "
                      "and hipcc (tools/setup.sh hip), or ROCm under /opt/rocm")
endif()
list(GET ferry_rocm_cmake_dirs 0 ferry_hip_lang_dir)

if(NOT ferry_hip_lang_dir STREQUAL "/opt/rocm/lib/cmake" AND NOT CMAKE_HIP_COMPILER_ROCM_ROOT)
  # Debian's layout. The clang version hipcc uses, from hipconfig's flags
  # (-I.../lib/clang/15.0.6).
  execute_process(COMMAND hipconfig --cpp_config OUTPUT_VARIABLE ferry_hip_cpp_config ERROR_QUIET)
  if(NOT CMAKE_HIP_COMPILER)
    if(ferry_hip_cpp_config MATCHES "lib/clang/([0-9]+)")
      find_program(FERRY_HIP_CLANG NAMES clang++-${CMAKE_MATCH_1})
    else()
      find_program(FERRY_HIP_CLANG NAMES clang++)
    endif()
    set(CMAKE_HIP_COMPILER ${FERRY_HIP_CLANG})
  endif()
  file(GLOB ferry_device_libs /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/amdgcn/bitcode/ockl.bc
                              /usr/lib/amdgcn/bitcode/ockl.bc)
  if(ferry_device_libs)
    list(GET ferry_device_libs 0 ferry_ockl)
    get_filename_component(ferry_device_lib_dir ${ferry_ockl} DIRECTORY)
    set(CMAKE_HIP_FLAGS "${CMAKE_HIP_FLAGS} --rocm-path=/usr --hip-device-lib-path=${ferry_device_lib_dir}")
  endif()
  set(ferry_rocm_root ${PROJECT_BINARY_DIR}/rocm-root)
  file(MAKE_DIRECTORY ${ferry_rocm_root}/lib/cmake)
  if(NOT EXISTS ${ferry_rocm_root}/lib/cmake/hip-lang)
    file(CREATE_LINK ${ferry_hip_lang_dir}/hip-lang ${ferry_rocm_root}/lib/cmake/hip-lang SYMBOLIC)
  endif()
  set(CMAKE_HIP_COMPILER_ROCM_ROOT ${ferry_rocm_root})
  foreach(package amd_comgr AMDDeviceLibs)
    foreach(dir ${ferry_rocm_cmake_dirs} /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake /usr/lib/cmake)
      if(NOT ${package}_DIR AND EXISTS ${dir}/${package})
        set(${package}_DIR ${dir}/${package})
      endif()
    endforeach()
  endforeach()
  list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES amd_comgr_DIR AMDDeviceLibs_DIR CMAKE_HIP_COMPILER_ROCM_ROOT)
endif()

enable_language(HIP)
# libferry.so and the programs that link the engine are linked by the C++
# compiler: the kernels carry their device code in their own objects (no
# relocatable device code), so only the HIP runtime library is needed.
set(CMAKE_HIP_LINKER_PREFERENCE_PROPAGATES OFF)
find_package(hip CONFIG REQUIRED HINTS ${ferry_rocm_cmake_dirs})
set(FERRY_HAVE_HIP ON)
message(STATUS "Ferry: HIP ${hip_VERSION} (${CMAKE_HIP_COMPILER}; ${CMAKE_HIP_ARCHITECTURES})")
