# Ranks of this machine as several machines (virtual nodes), and the net
# transport between them: collectives by machine, messages and windows
# across nodes, and unusable network settings. Included by CMakeLists.txt,
# whose suite_tests list these tests join.

# Virtual nodes: ranks of this machine on several host names
# (virtual_node.sh sets FERRY_HOSTNAME, FERRY_SUITE_RANKS_PER_NODE ranks a
# name). On the whole job device collectives go by machine over the net
# transport, and so do messages (FERRY_STATS: engine, and net bytes); on each
# node's communicator the engine's own transports carry them. Cases:
# <ranks a node>x<nodes>:<scope>:<what the stats line names>:<route>, and
# optionally :<network provider> (FERRY_NET; default mpi).
add_executable(mpi_suite_virtual_nodes virtual_nodes.cc)
target_link_libraries(mpi_suite_virtual_nodes PRIVATE ferry_mpi_suite)
foreach(case 2x2:world:MPI_Allreduce:engine 2x2:world:MPI_Bcast:engine 2x2:world:MPI_Alltoallv:engine
             2x2:world:MPI_Sendrecv:engine 1x3:world:MPI_Alltoallv:engine 4x2:world:MPI_Alltoallv:engine
             2x2:world:net:net 2x2:node:MPI_Allreduce:engine 2x2:node:MPI_Sendrecv:engine
             1x3:world:MPI_Allreduce:engine 1x3:world:MPI_Bcast:engine 4x2:world:MPI_Allreduce:engine
             4x2:world:MPI_Bcast:engine
             2x2:world:MPI_Allreduce:engine:socket 2x2:world:net:net:socket 2x4:world:MPI_Allreduce:engine:socket
             2x4:world:MPI_Alltoallv:engine:socket 2x4:world:net:net:socket)
  string(REPLACE ":" ";" parts ${case})
  list(GET parts 0 shape)
  list(GET parts 1 scope)
  list(GET parts 2 function)
  list(GET parts 3 route)
  set(provider_env)
  set(provider_suffix)
  list(LENGTH parts fields)
  if(fields GREATER 4)
    list(GET parts 4 provider)
    set(provider_env FERRY_NET=${provider})
    set(provider_suffix .${provider})
  endif()
  ferry_virtual_shape(${shape} per_node ranks)
  if(route STREQUAL "net")
    set(expect "ferry stats rank 0: net transport [1-9][0-9]* bytes sent, [1-9][0-9]* bytes received")
  elseif(route STREQUAL "staged")
    set(expect "ferry stats rank 0: ${function} +[0-9]+ +[0-9]+ +0 +[1-9][0-9]* ")
  else()
    set(expect "ferry stats rank 0: ${function} +[0-9]+ +[0-9]+ +[1-9][0-9]* ")
  endif()
  set(name mpi_suite.virtual_nodes.${shape}.${scope}.${function}${provider_suffix})
  ferry_add_mpi_test(NAME ${name} NP ${ranks}
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_virtual_nodes> ${scope}
                     ENV FERRY_STATS=1 FERRY_SUITE_RANKS_PER_NODE=${per_node} FERRY_NET_MIN_BYTES=0 ${provider_env}
                     EXPECT "${expect}")
  list(APPEND suite_tests ${name})
endforeach()
# The step across machines down double binary trees (FERRY_TUNE), in small
# pieces so that each shard's pieces cycle through the receive slots; the
# stats name the step each call took. <ranks a node>x<nodes>:<collective
# the stats line names>:<network provider>.
foreach(case 1x3:allreduce:mpi 1x3:bcast:mpi 1x4:allreduce:mpi 1x4:bcast:socket 2x3:allreduce:mpi
             1x5:allreduce:socket 1x5:bcast:mpi)
  string(REPLACE ":" ";" parts ${case})
  list(GET parts 0 shape)
  list(GET parts 1 collective)
  list(GET parts 2 provider)
  ferry_virtual_shape(${shape} per_node ranks)
  set(name mpi_suite.virtual_nodes.${shape}.world.tree_${collective}.${provider})
  ferry_add_mpi_test(NAME ${name} NP ${ranks}
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_virtual_nodes> world
                     ENV FERRY_STATS=1 FERRY_SUITE_RANKS_PER_NODE=${per_node} FERRY_NET_MIN_BYTES=0
                         FERRY_NET=${provider} FERRY_NET_CHUNK_BYTES=65536
                         FERRY_TUNE=allreduce-across:0-:tree,bcast-across:0-:tree
                     EXPECT "ferry stats rank 0: across machines ${collective} +tree +[1-9][0-9]*")
  list(APPEND suite_tests ${name})
endforeach()
# Across three machines the tuner prices the step across them with the
# network as timed between two of them at the first call, the same figures
# on every rank.
ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.1x3.world.network_timed NP 3
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_virtual_nodes> world
                   ENV FERRY_SUITE_RANKS_PER_NODE=1 FERRY_NET_MIN_BYTES=0 FERRY_DEBUG=INFO FERRY_DEBUG_SUBSYS=COLL
                   EXPECT "node2:[0-9]+:2 .* the network between machines, as priced: [0-9.]+ us a hop, [0-9.]+ GB/s \\(timed\\)")
list(APPEND suite_tests mpi_suite.virtual_nodes.1x3.world.network_timed)
# Machines of two sizes (2 ranks and 1): the shards are the smaller's.
ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.uneven.world NP 3
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_virtual_nodes> world
                   ENV FERRY_STATS=1 FERRY_SUITE_RANKS_PER_NODE=2 FERRY_NET_MIN_BYTES=0
                   EXPECT "ferry stats rank 0: MPI_Allreduce +[0-9]+ +[0-9]+ +[1-9][0-9]* ")
# By default calls under FERRY_NET_MIN_BYTES are staged, the larger go by
# machine: both routes counted.
ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.2x2.world.small_staged NP 4
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_virtual_nodes> world
                   ENV FERRY_STATS=1
                   EXPECT "ferry stats rank 0: MPI_Allreduce +[0-9]+ +[0-9]+ +[1-9][0-9]* +[1-9][0-9]* ")
# Without the net transport, calls across machines are staged.
ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.2x2.world.without_net NP 4
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_virtual_nodes> world
                   ENV FERRY_STATS=1 FERRY_TRANSPORTS=p2p,shm
                   EXPECT "ferry stats rank 0: MPI_Allreduce +[0-9]+ +[0-9]+ +0 +[1-9][0-9]* ")
list(APPEND suite_tests mpi_suite.virtual_nodes.uneven.world mpi_suite.virtual_nodes.2x2.world.small_staged
     mpi_suite.virtual_nodes.2x2.world.without_net)
# Messages across nodes are staged, at growing sizes: blocks cached for
# the small ones make room for the large ones in a 4 MiB pinned pool (the
# 1 MiB messages take two 2 MiB blocks), so none stages through pageable
# memory.
ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.2x2.world.staging_pool NP 4
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_virtual_nodes> world
                   ENV FERRY_STATS=1 FERRY_STAGING_POOL_MAX_BYTES=4194304
                   EXPECT "ferry stats rank 0: staging memory: [0-9]+ pinned blocks, at most [0-9]+ pinned bytes held. 0 pageable blocks")
list(APPEND suite_tests mpi_suite.virtual_nodes.2x2.world.staging_pool)

# Point-to-point on device buffers between virtual nodes over the net
# transport's channel (mpi_shim/peer_net.h): FERRY_STATS counts the sends
# that took it. One rank a node with small chunks (many per message), two
# ranks a node over each provider; on one machine (peer memory) and on plain
# Open MPI with host buffers as references.
add_executable(mpi_suite_net_messages net_messages.cc)
target_link_libraries(mpi_suite_net_messages PRIVATE ferry_mpi_suite)
foreach(variant 1x2:mpi:65536 2x2:mpi:1048576 2x2:socket:1048576)
  string(REPLACE ":" ";" parts ${variant})
  list(GET parts 0 shape)
  list(GET parts 1 provider)
  list(GET parts 2 chunk)
  ferry_virtual_shape(${shape} per_node ranks)
  set(name mpi_suite.net_messages.virtual_${shape}.${provider}.np${ranks})
  ferry_add_mpi_test(NAME ${name} NP ${ranks}
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_net_messages>
                     ENV FERRY_SUITE_RANKS_PER_NODE=${per_node} FERRY_STATS=1 FERRY_NET=${provider}
                         FERRY_NET_CHUNK_BYTES=${chunk}
                     EXPECT "ferry stats rank 1: device sends to other machines over the net transport [1-9][0-9]*")
  list(APPEND suite_tests ${name})
endforeach()
# Device windows across virtual nodes: the real MPI's window over host
# copies, separate memory model (mpi_shim/rma_across.h); also on one
# machine with peer mapping off, where ranks cannot map each other's memory
# either.
add_executable(mpi_suite_rma_across rma_across.cc)
target_link_libraries(mpi_suite_rma_across PRIVATE ferry_mpi_suite)
foreach(shape 1x2 2x2 1x3)
  ferry_virtual_shape(${shape} per_node ranks)
  ferry_add_mpi_test(NAME mpi_suite.rma_across.virtual_${shape}.np${ranks} NP ${ranks}
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_rma_across>
                     ENV FERRY_SUITE_RANKS_PER_NODE=${per_node})
  list(APPEND suite_tests mpi_suite.rma_across.virtual_${shape}.np${ranks})
endforeach()
# The same windows with every one-sided call carried by the GDA queue
# (FERRY_RMA_ACROSS=queue), and the calls program under both carriers.
add_executable(mpi_suite_rma_across_calls rma_across_calls.cc)
target_link_libraries(mpi_suite_rma_across_calls PRIVATE ferry_mpi_suite)
target_include_directories(mpi_suite_rma_across_calls PRIVATE ${PROJECT_SOURCE_DIR}/include)
foreach(shape 1x2 2x2 1x3)
  ferry_virtual_shape(${shape} per_node ranks)
  ferry_add_mpi_test(NAME mpi_suite.rma_across.queue.virtual_${shape}.np${ranks} NP ${ranks}
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_rma_across>
                     ENV FERRY_SUITE_RANKS_PER_NODE=${per_node} FERRY_RMA_ACROSS=queue)
  foreach(carrier mpi queue)
    ferry_add_mpi_test(NAME mpi_suite.rma_across_calls.${carrier}.virtual_${shape}.np${ranks} NP ${ranks}
                       COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_rma_across_calls>
                       ENV FERRY_SUITE_RANKS_PER_NODE=${per_node} FERRY_RMA_ACROSS=${carrier})
    list(APPEND suite_tests mpi_suite.rma_across_calls.${carrier}.virtual_${shape}.np${ranks})
  endforeach()
  list(APPEND suite_tests mpi_suite.rma_across.queue.virtual_${shape}.np${ranks})
endforeach()
ferry_add_mpi_test(NAME mpi_suite.rma_across.p2p_off.np3 NP 3 COMMAND mpi_suite_rma_across
                   ENV FERRY_P2P_DISABLE=1)
list(APPEND suite_tests mpi_suite.rma_across.p2p_off.np3)
# Without the net transport the same messages are staged.
ferry_add_mpi_test(NAME mpi_suite.net_messages.virtual_2x2.without_net.np4 NP 4
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_net_messages>
                   ENV FERRY_SUITE_RANKS_PER_NODE=2 FERRY_TRANSPORTS=p2p,shm)
ferry_add_mpi_test(NAME mpi_suite.net_messages.np4 NP 4 COMMAND mpi_suite_net_messages)
ferry_add_mpi_test(NAME mpi_suite.net_messages.host_baseline.np4 NP 4
                   COMMAND mpi_suite_net_messages
                   ENV FERRY_SUITE_HOST_BUFFERS=1
                   NO_PRELOAD)
# Unusable network settings are reported on stderr without FERRY_DEBUG, and
# the messages staged: an unknown provider (the default used), an interface
# name that matches none (every rank says so).
ferry_add_mpi_test(NAME mpi_suite.net_messages.bogus_provider_reported.np2 NP 2
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_net_messages>
                   ENV FERRY_SUITE_RANKS_PER_NODE=1 FERRY_NET=bogus
                   EXPECT "ferry: FERRY_NET=bogus is not one of auto, ib, mpi, socket. using the default \\(auto\\)")
ferry_add_mpi_test(NAME mpi_suite.net_messages.bogus_ifname_reported.np2 NP 2
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_net_messages>
                   ENV FERRY_SUITE_RANKS_PER_NODE=1 FERRY_NET=socket FERRY_SOCKET_IFNAME=bogus0
                   EXPECT "ferry: rank 1: FERRY_SOCKET_IFNAME=bogus0: no interface of that name or prefix is up")
# FERRY_NET=ib on a machine without an RDMA port (as every machine here).
ferry_add_mpi_test(NAME mpi_suite.net_messages.ib_without_device_reported.np2 NP 2
                   COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_net_messages>
                   ENV FERRY_SUITE_RANKS_PER_NODE=1 FERRY_NET=ib
                   EXPECT "ferry: rank 1: FERRY_NET=ib: no RDMA device. device calls between machines are staged")
list(APPEND suite_tests mpi_suite.net_messages.bogus_provider_reported.np2
     mpi_suite.net_messages.bogus_ifname_reported.np2 mpi_suite.net_messages.ib_without_device_reported.np2)
list(APPEND suite_tests mpi_suite.net_messages.virtual_2x2.without_net.np4 mpi_suite.net_messages.np4
     mpi_suite.net_messages.host_baseline.np4)

# The device API's handle on a window across machines (one rank a node):
# the GDA queue to the other ranks, driven from the host as the emulated
# device's kernels would (tests/gpu drives it from kernels). Only
# there: a GPU's queue counts its tickets in device memory, which the host
# cannot post into.
add_executable(mpi_suite_rma_device_across rma_device_across.cc)
target_link_libraries(mpi_suite_rma_device_across PRIVATE ferry_mpi_suite)
target_include_directories(mpi_suite_rma_device_across PRIVATE ${PROJECT_SOURCE_DIR}/include)
if(FERRY_MPI_TEST_DEVICE STREQUAL "emulated")
  foreach(ranks 2 3)
    ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.rma_device_across.np${ranks} NP ${ranks}
                       COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_rma_device_across>
                       ENV FERRY_SUITE_RANKS_PER_NODE=1)
    list(APPEND suite_tests mpi_suite.virtual_nodes.rma_device_across.np${ranks})
  endforeach()
  # Two nodes of two ranks: the ranks of one node map each other's memory
  # beside the queue to the other node's.
  ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.rma_device_across.2x2.np4 NP 4
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_rma_device_across>
                     ENV FERRY_SUITE_RANKS_PER_NODE=2)
  list(APPEND suite_tests mpi_suite.virtual_nodes.rma_device_across.2x2.np4)
  # The handle of a window whose host calls use the queue too: the window's own.
  ferry_add_mpi_test(NAME mpi_suite.virtual_nodes.rma_device_across.queue.2x2.np4 NP 4
                     COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh $<TARGET_FILE:mpi_suite_rma_device_across>
                     ENV FERRY_SUITE_RANKS_PER_NODE=2 FERRY_RMA_ACROSS=queue)
  list(APPEND suite_tests mpi_suite.virtual_nodes.rma_device_across.queue.2x2.np4)
  # A rank of such a window killed (SIGKILL, the launcher keeping the job):
  # the survivor's GDA queue fails, quiet returns, and MPI_Win_fence names
  # the lost peer within 10 s.
  add_test(NAME mpi_suite.virtual_nodes.rma_device_across.peer_dies.np2
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/killed_peer_test.sh ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:ferry>
                   $<TARGET_FILE:mpi_suite_rma_device_across> ${FERRY_MPI_TEST_DEVICE} ${FERRY_MPIEXEC_FLAGS})
  set_tests_properties(mpi_suite.virtual_nodes.rma_device_across.peer_dies.np2 PROPERTIES
    TIMEOUT 90 PROCESSORS 2
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;KILLED_PEER_WHEN=peer_dies;KILLED_PEER_CALL=MPI_Win_fence;KILLED_PEER_WRAPPER=${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh")
  list(APPEND suite_tests mpi_suite.virtual_nodes.rma_device_across.peer_dies.np2)
  # The same where the window's host calls use the queue too: the fence
  # returns the error from the failed queue instead of entering the real MPI.
  add_test(NAME mpi_suite.virtual_nodes.rma_device_across.peer_dies.queue.np2
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/killed_peer_test.sh ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:ferry>
                   $<TARGET_FILE:mpi_suite_rma_device_across> ${FERRY_MPI_TEST_DEVICE} ${FERRY_MPIEXEC_FLAGS})
  set_tests_properties(mpi_suite.virtual_nodes.rma_device_across.peer_dies.queue.np2 PROPERTIES
    TIMEOUT 90 PROCESSORS 2
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;KILLED_PEER_WHEN=peer_dies;KILLED_PEER_CALL=MPI_Win_fence;KILLED_PEER_WRAPPER=${CMAKE_CURRENT_SOURCE_DIR}/virtual_node.sh;FERRY_RMA_ACROSS=queue")
  list(APPEND suite_tests mpi_suite.virtual_nodes.rma_device_across.peer_dies.queue.np2)
endif()
