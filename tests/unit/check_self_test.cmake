# ferry-info --self-test: passes the checks that apply here and says which
# it skipped; a bad FERRY_TOPO_FILE, an unknown FERRY_* variable or an unknown
# name in FERRY_TRANSPORTS fails it.
execute_process(COMMAND ${FERRY_INFO} --self-test OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ferry-info --self-test exited ${rc} on this machine")
endif()
set(expected "PASS parameters" "PASS shared memory" "PASS device backend" "PASS device memory"
             "(PASS|SKIP) GPUs visible" "(PASS|SKIP) peer access" "(PASS|SKIP) NVML" "(PASS|SKIP) rocm-smi"
             "self-test: [0-9]+ passed, [0-9]+ skipped, 0 failed")
if(HWLOC)
  list(APPEND expected "PASS hwloc: hwloc [0-9.]+: [1-9][0-9]* NUMA node")
else()
  list(APPEND expected "FAIL hwloc: Ferry was built without hwloc")
endif()
foreach(line IN LISTS expected)
  if(NOT out MATCHES "(^|\n)${line}")
    message(FATAL_ERROR "ferry-info --self-test printed no line matching '${line}'")
  endif()
endforeach()

set(ENV{FERRY_TOPO_FILE} ${BAD_TOPO})
set(ENV{FERRY_NOT_A_PARAMETER} 1)
set(ENV{FERRY_TRANSPORTS} shm,bogus)
execute_process(COMMAND ${FERRY_INFO} --self-test OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "ferry-info --self-test passed with a malformed FERRY_TOPO_FILE")
endif()
foreach(line "FAIL FERRY_TOPO_FILE: ${BAD_TOPO}: line 4: " "FAIL parameters: FERRY_NOT_A_PARAMETER is not"
             "FAIL parameters: FERRY_TRANSPORTS names 'bogus', not a transport"
             "self-test: [0-9]+ passed, [0-9]+ skipped, 3 failed")
  string(REPLACE "." "\\." line "${line}")
  if(NOT out MATCHES "(^|\n)${line}")
    message(FATAL_ERROR "ferry-info --self-test printed no line matching '${line}'")
  endif()
endforeach()
