file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/bad.txt "buffers int MPI_Send(const void *buf, int count\n")
execute_process(COMMAND ${PYTHON} ${GENERATOR} ${WORK}/bad.txt ${WORK}/out RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "generator accepted a malformed signature")
endif()
file(WRITE ${WORK}/good.txt "buffers int MPI_Barrier(MPI_Comm comm)\n")
execute_process(COMMAND ${PYTHON} ${GENERATOR} ${WORK}/good.txt ${WORK}/out RESULT_VARIABLE rc)
file(READ ${WORK}/out/wrappers.cc wrappers)
string(FIND "${wrappers}" "extern \"C\" FERRY_EXPORT int MPI_Barrier(MPI_Comm comm)" where)
if(NOT rc EQUAL 0 OR where EQUAL -1)
  message(FATAL_ERROR "generator did not emit the MPI_Barrier wrapper")
endif()
string(FIND "${wrappers}" "fail_from_wrapper(comm, FunctionId::kBarrier)" where)
if(where EQUAL -1)
  message(FATAL_ERROR "wrapper does not report failures through its communicator")
endif()
string(FIND "${wrappers}" "return PMPI_Barrier(comm);" where)
if(where EQUAL -1)
  message(FATAL_ERROR "a buffers-policy wrapper has no pass-through fast path")
endif()
# A function the MPI may lack ("if MACRO"): its wrapper and handler are
# compiled only where mpi_flavour.h defines MACRO.
file(WRITE ${WORK}/guarded.txt "buffers int MPI_Pready(int partition, MPI_Request request) if FERRY_MPI_40\n")
execute_process(COMMAND ${PYTHON} ${GENERATOR} ${WORK}/guarded.txt ${WORK}/guarded RESULT_VARIABLE rc)
file(READ ${WORK}/guarded/wrappers.cc wrappers)
file(READ ${WORK}/guarded/handlers.h handlers)
string(REGEX MATCH "#if defined\\(FERRY_MPI_40\\)\nextern \"C\" FERRY_EXPORT int MPI_Pready\\([^#]*\n#endif" wrapper_guarded "${wrappers}")
string(REGEX MATCH "#if defined\\(FERRY_MPI_40\\)\nint handle_Pready\\(int partition, MPI_Request request\\);\n#endif"
       handler_guarded "${handlers}")
if(NOT rc EQUAL 0 OR NOT wrapper_guarded OR NOT handler_guarded)
  message(FATAL_ERROR "a function with 'if FERRY_MPI_40' is not compiled under that condition alone")
endif()
# A large-count call ("large"): counts narrowed to int through the handler
# of the call without _c, counted as that call; a count past an int goes to
# the real MPI's own unless device memory (or, for point-to-point, a marker)
# may be involved; arrays are narrowed at the length the call gives them.
file(WRITE ${WORK}/large.txt
     "pt2pt int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)\n"
     "buffers int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm)\n"
     "large int MPI_Send_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) if FERRY_MPI_LARGE_COUNT\n"
     "large int MPI_Gatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) if FERRY_MPI_LARGE_COUNT\n")
execute_process(COMMAND ${PYTHON} ${GENERATOR} ${WORK}/large.txt ${WORK}/large RESULT_VARIABLE rc)
file(READ ${WORK}/large/wrappers.cc wrappers)
file(READ ${WORK}/large/function_ids.h ids)
foreach(wanted
        "#if defined(FERRY_MPI_LARGE_COUNT)\nextern \"C\" FERRY_EXPORT int MPI_Send_c(const void *buf, MPI_Count count,"
        "if (names_device_memory({buf}) || ferry::shim::peer::active()) return raise_error(comm, count_beyond_int());"
        "return PMPI_Send_c(buf, count, datatype, dest, tag, comm);"
        "count_call(FunctionId::kSend);\n    return handle_Send(buf, static_cast<int>(count), datatype, dest, tag, comm);"
        "narrow(recvcounts, large_array_length(ArrayGroup::kGroup, comm, ArraySide::kRecv, true, root), &recvcounts_int)"
        "narrow(displs, large_array_length(ArrayGroup::kGroup, comm, ArraySide::kRecv, true, root), &displs_int)"
        "narrowed(recvcounts, recvcounts_int), narrowed(displs, displs_int), recvtype, root, comm)")
  string(FIND "${wrappers}" "${wanted}" where)
  if(NOT rc EQUAL 0 OR where EQUAL -1)
    message(FATAL_ERROR "the large-count wrappers lack: ${wanted}")
  endif()
endforeach()
string(FIND "${ids}" "kSend_c" where)
if(NOT where EQUAL -1)
  message(FATAL_ERROR "a large-count call has a function id of its own")
endif()
file(WRITE ${WORK}/orphan.txt "large int MPI_Bsend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)\n")
execute_process(COMMAND ${PYTHON} ${GENERATOR} ${WORK}/orphan.txt ${WORK}/orphan RESULT_VARIABLE rc ERROR_QUIET)
if(rc EQUAL 0)
  message(FATAL_ERROR "a large-count call without its call in the list was accepted")
endif()
