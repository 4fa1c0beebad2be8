// Graph search for one communicator: the path and transport between every
// pair of its GPUs, a ring per channel, and a double binary tree. Pure,
// deterministic functions of the graph and the ranks.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "engine/common/status.h"
#include "engine/topology/system_graph.h"

namespace ferry {

// How a path between two GPUs runs, from best to worst (NCCL's PATH_*):
// through NVLink/xGMI (directly or an NVSwitch), one PCIe switch, several,
// the CPU's host bridge, the link between sockets, or the network.
enum class PathType { kLocal, kNvLink, kPix, kPxb, kPhb, kSys, kNet };
// The kinds of transport, best first: what a path calls for, and what each
// engine transport (engine/transport/transport.h) is.
enum class TransportKind { kP2p, kShm, kNet };

const char* path_type_name(PathType type);
// Upper case, as topology reports print them: P2P, SHM, NET.
const char* transport_name(TransportKind transport);
// Lower case, as FERRY_TRANSPORTS and the logs name them: p2p, shm, net.
const char* transport_kind_label(TransportKind transport);

struct GpuPath {
  PathType type = PathType::kLocal;
  double bandwidth_gbps = 0;  // the slowest link on the way
  bool direct = false;        // one point-to-point link, nothing shared between
};

// Paths between the communicator's ranks: at(a, b) is a -> b.
struct RankPaths {
  int nranks = 0;
  std::vector<GpuPath> paths;
  const GpuPath& at(int a, int b) const { return paths[a * nranks + b]; }
};

// gpu_of_rank[r] is the graph node of the GPU whose rank attribute is r.
Status find_rank_gpus(const SystemGraph& graph, int nranks, std::vector<int>& gpu_of_rank);

RankPaths compute_rank_paths(const SystemGraph& graph, const std::vector<int>& gpu_of_rank);

// A network port (a NIC's <net>) as a GPU reaches it: the path to its NIC.
struct NetPortReach {
  std::string name;  // the device's name, e.g. mlx5_0
  int port = 1;
  PathType type = PathType::kSys;
  double bandwidth_gbps = 0;  // the slowest link on the way to the NIC
};

// Every network port of the GPU node's host, nearest first (path type, then
// bandwidth, then name and port); ports whose NIC nothing joins to the GPU
// come last as kSys.
std::vector<NetPortReach> net_ports_from(const SystemGraph& graph, int gpu_node);

// "name:port" of the ports nearest the GPU node (equally near: the same
// path type and bandwidth), in net_ports_from's order; empty where the host
// has none.
std::vector<std::string> nearest_net_ports(const SystemGraph& graph, int gpu_node);

// P2P over NVLink/xGMI or PCIe that stays below the CPU (NCCL's PXB rule),
// SHM elsewhere on one host, NET between hosts.
TransportKind choose_transport(const GpuPath& path);

// The transport between the two GPUs of one host that are worst connected
// (P2P where the host has fewer than two GPUs): what ranks of that host can
// count on when which GPU each of them uses is not known.
TransportKind worst_transport_between_gpus(const SystemGraph& graph, int host);

// A ring is the ranks in visiting order, starting at rank 0; it runs at the
// speed of its slowest hop.
using Ring = std::vector<int>;
double ring_bandwidth(const RankPaths& paths, const Ring& ring);

// One ring per channel: the fastest slowest hop first, then the most total
// bandwidth (fast links used wherever they exist), then the fewest direct
// links already taken by earlier channels, then rank order.
std::vector<Ring> search_rings(const RankPaths& paths, int channels);

struct BinaryTree {
  int root = -1;
  std::vector<int> parent;                   // by rank; -1 at the root
  std::vector<std::array<int, 2>> children;  // by rank; -1 where none
  bool is_interior(int rank) const { return children[rank][0] >= 0 || children[rank][1] >= 0; }
};

// NCCL's double binary tree over the ranks in the given order (a ring order
// keeps tree neighbours close): the second tree mirrors the first (shifts it
// by one for an odd count), so the leaves of one are the interior of the
// other and each rank sends and receives about once per tree pair.
std::array<BinaryTree, 2> build_double_binary_tree(const std::vector<int>& order);

}  // namespace ferry
