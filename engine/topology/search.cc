#include "engine/topology/search.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace ferry {
namespace {

// Parallel links between two nodes (several NVLink bundles to the switch
// chips of one NVSwitch) add up into one edge.
struct Edge {
  int to;
  PathType type;
  double bandwidth_gbps;
};

PathType path_type_of(const SystemGraph& graph, const Link& link) {
  const NodeType from = graph.nodes[link.from].type, to = graph.nodes[link.to].type;
  switch (link.type) {
    case LinkType::kNvLink:
    case LinkType::kXgmi: return PathType::kNvLink;
    case LinkType::kSys: return PathType::kSys;
    case LinkType::kNet: return PathType::kNet;
    case LinkType::kPcie:
      if (from == NodeType::kCpu || to == NodeType::kCpu) return PathType::kPhb;
      if (from == NodeType::kPciSwitch && to == NodeType::kPciSwitch) return PathType::kPxb;
      return PathType::kPix;
  }
  return PathType::kSys;
}

std::vector<std::vector<Edge>> build_edges(const SystemGraph& graph) {
  std::map<std::pair<int, int>, Edge> merged;
  for (const Link& link : graph.links) {
    auto [it, inserted] = merged.try_emplace({link.from, link.to},
                                             Edge{link.to, path_type_of(graph, link), 0.0});
    it->second.bandwidth_gbps += link.bandwidth_gbps;
  }
  std::vector<std::vector<Edge>> edges(graph.nodes.size());
  for (const auto& [key, edge] : merged) edges[key.first].push_back(edge);
  return edges;
}

// Paths may pass through switches and CPUs, never through another GPU or NIC.
bool can_pass_through(NodeType type) {
  return type == NodeType::kCpu || type == NodeType::kPciSwitch || type == NodeType::kNvSwitch;
}

struct Label {
  PathType type = PathType::kLocal;
  double bandwidth_gbps = std::numeric_limits<double>::infinity();
  int hops = -1;  // -1: not reached
};

// Best first: the mildest path type, then the widest, then the shortest.
// Extending a path never makes it better, so Dijkstra's order is exact.
bool better(const Label& a, const Label& b) {
  if (b.hops < 0) return a.hops >= 0;
  if (a.type != b.type) return a.type < b.type;
  if (a.bandwidth_gbps != b.bandwidth_gbps) return a.bandwidth_gbps > b.bandwidth_gbps;
  return a.hops < b.hops;
}

std::vector<Label> best_paths_from(const SystemGraph& graph, const std::vector<std::vector<Edge>>& edges,
                                   int source) {
  const int count = static_cast<int>(graph.nodes.size());
  std::vector<Label> labels(count);
  std::vector<bool> settled(count, false);
  labels[source].hops = 0;
  for (;;) {
    int node = -1;
    for (int i = 0; i < count; ++i)
      if (!settled[i] && labels[i].hops >= 0 && (node < 0 || better(labels[i], labels[node]))) node = i;
    if (node < 0) return labels;
    settled[node] = true;
    if (node != source && !can_pass_through(graph.nodes[node].type)) continue;
    for (const Edge& edge : edges[node]) {
      const Label extended{std::max(labels[node].type, edge.type),
                           std::min(labels[node].bandwidth_gbps, edge.bandwidth_gbps), labels[node].hops + 1};
      if (!settled[edge.to] && better(extended, labels[edge.to])) labels[edge.to] = extended;
    }
  }
}

// What a GPU can push into the network: its best NIC, limited by the way there.
double network_bandwidth(const SystemGraph& graph, const std::vector<std::vector<Edge>>& edges,
                         const std::vector<Label>& labels) {
  double best = 0;
  for (int nic = 0; nic < static_cast<int>(graph.nodes.size()); ++nic) {
    if (graph.nodes[nic].type != NodeType::kNic || labels[nic].hops < 0) continue;
    double ports = 0;
    for (const Edge& edge : edges[nic])
      if (edge.type == PathType::kNet) ports += edge.bandwidth_gbps;
    best = std::max(best, std::min(labels[nic].bandwidth_gbps, ports));
  }
  return best;
}

struct RingScore {
  double min_bandwidth = -1;
  double total_bandwidth = 0;
  int reused_links = 0;
};

bool better(const RingScore& a, const RingScore& b) {
  if (a.min_bandwidth != b.min_bandwidth) return a.min_bandwidth > b.min_bandwidth;
  if (a.total_bandwidth != b.total_bandwidth) return a.total_bandwidth > b.total_bandwidth;
  return a.reused_links < b.reused_links;
}

// Depth-first branch and bound from rank 0, trying the fastest next hop
// first (rank order among equals), so the first ring found is the greedy
// one and a later ring replaces it only when strictly better.
class RingSearch {
 public:
  // Enough to search 10 GPUs exhaustively; beyond that the best ring found.
  static constexpr long kMaxSteps = 2'000'000;

  RingSearch(const RankPaths& paths, const std::vector<int>& used) : paths_(paths), used_(used) {
    const int n = paths.nranks;
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        if (a != b) fastest_hop_ = std::max(fastest_hop_, paths.at(a, b).bandwidth_gbps);
    visited_.assign(n, false);
  }

  Ring run() {
    ring_ = {0};
    visited_[0] = true;
    extend({std::numeric_limits<double>::infinity(), 0, 0});
    return best_ring_;
  }

 private:
  RingScore with_hop(RingScore score, int from, int to) const {
    const GpuPath& hop = paths_.at(from, to);
    score.min_bandwidth = std::min(score.min_bandwidth, hop.bandwidth_gbps);
    score.total_bandwidth += hop.bandwidth_gbps;
    if (hop.direct) score.reused_links += used_[from * paths_.nranks + to];
    return score;
  }

  void extend(const RingScore& score) {
    const int n = paths_.nranks;
    const int last = ring_.back();
    if (static_cast<int>(ring_.size()) == n) {
      const RingScore closed = with_hop(score, last, 0);
      if (best_ring_.empty() || better(closed, best_)) {
        best_ = closed;
        best_ring_ = ring_;
      }
      return;
    }
    const int hops_left = n + 1 - static_cast<int>(ring_.size());
    const RingScore bound{score.min_bandwidth, score.total_bandwidth + hops_left * fastest_hop_,
                          score.reused_links};
    if (!best_ring_.empty() && !better(bound, best_)) return;

    std::vector<int> next;
    for (int step = 1; step < n; ++step)
      if (!visited_[(last + step) % n]) next.push_back((last + step) % n);
    std::stable_sort(next.begin(), next.end(), [&](int a, int b) {
      return paths_.at(last, a).bandwidth_gbps > paths_.at(last, b).bandwidth_gbps;
    });
    for (int rank : next) {
      if (++steps_ > kMaxSteps) return;
      visited_[rank] = true;
      ring_.push_back(rank);
      extend(with_hop(score, last, rank));
      ring_.pop_back();
      visited_[rank] = false;
    }
  }

  const RankPaths& paths_;
  const std::vector<int>& used_;
  double fastest_hop_ = 0;
  std::vector<bool> visited_;
  Ring ring_, best_ring_;
  RingScore best_;
  long steps_ = 0;
};

// NCCL's binary tree over positions 0..n-1: a position's lowest set bit
// gives its level; odd positions are leaves, 0 is the root with one child.
BinaryTree binary_tree_over(int n, const std::vector<int>& rank_at) {
  BinaryTree tree;
  tree.parent.assign(n, -1);
  tree.children.assign(n, {-1, -1});
  tree.root = rank_at[0];
  for (int position = 0; position < n; ++position) {
    int bit = 1;
    while (bit < n && !(bit & position)) bit <<= 1;
    const int rank = rank_at[position];
    if (position == 0) {
      if (n > 1) tree.children[rank][1] = rank_at[bit >> 1];
      continue;
    }
    int up = (position ^ bit) | (bit << 1);
    if (up >= n) up = position ^ bit;
    tree.parent[rank] = rank_at[up];
    int step = bit >> 1;
    if (step == 0) continue;
    tree.children[rank][0] = rank_at[position - step];
    while (step > 0 && position + step >= n) step >>= 1;
    if (step > 0) tree.children[rank][1] = rank_at[position + step];
  }
  return tree;
}

}  // namespace

const char* path_type_name(PathType type) {
  switch (type) {
    case PathType::kLocal: return "LOC";
    case PathType::kNvLink: return "NVL";
    case PathType::kPix: return "PIX";
    case PathType::kPxb: return "PXB";
    case PathType::kPhb: return "PHB";
    case PathType::kSys: return "SYS";
    case PathType::kNet: return "NET";
  }
  return "?";
}

const char* transport_name(TransportKind transport) {
  switch (transport) {
    case TransportKind::kP2p: return "P2P";
    case TransportKind::kShm: return "SHM";
    case TransportKind::kNet: return "NET";
  }
  return "?";
}

const char* transport_kind_label(TransportKind transport) {
  switch (transport) {
    case TransportKind::kP2p: return "p2p";
    case TransportKind::kShm: return "shm";
    case TransportKind::kNet: return "net";
  }
  return "?";
}

Status find_rank_gpus(const SystemGraph& graph, int nranks, std::vector<int>& gpu_of_rank) {
  gpu_of_rank.assign(nranks, -1);
  for (int rank = 0; rank < nranks; ++rank) {
    gpu_of_rank[rank] = graph.gpu_of_rank(rank);
    if (gpu_of_rank[rank] < 0) {
      FERRY_WARN(Topo, "no GPU in the topology has rank %d (of %d)", rank, nranks);
      return Status::kInvalidArgument;
    }
  }
  return Status::kOk;
}

RankPaths compute_rank_paths(const SystemGraph& graph, const std::vector<int>& gpu_of_rank) {
  const auto edges = build_edges(graph);
  const int n = static_cast<int>(gpu_of_rank.size());
  std::vector<std::vector<Label>> labels(n);
  std::vector<double> network(n);
  for (int rank = 0; rank < n; ++rank) {
    labels[rank] = best_paths_from(graph, edges, gpu_of_rank[rank]);
    network[rank] = network_bandwidth(graph, edges, labels[rank]);
  }
  RankPaths result;
  result.nranks = n;
  result.paths.resize(static_cast<std::size_t>(n) * n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      GpuPath& path = result.paths[a * n + b];
      const Label& label = labels[a][gpu_of_rank[b]];
      if (graph.nodes[gpu_of_rank[a]].host != graph.nodes[gpu_of_rank[b]].host) {
        path = {PathType::kNet, std::min(network[a], network[b]), false};
      } else if (label.hops < 0) {
        path = {PathType::kSys, 0.0, false};  // nothing joins them in the file
      } else {
        path = {label.type, a == b ? 0.0 : label.bandwidth_gbps, label.hops == 1};
      }
      FERRY_TRACE(Topo, "rank %d -> %d: %s %.1f GB/s", a, b, path_type_name(path.type), path.bandwidth_gbps);
    }
  }
  return result;
}

std::vector<NetPortReach> net_ports_from(const SystemGraph& graph, int gpu_node) {
  const std::vector<Label> labels = best_paths_from(graph, build_edges(graph), gpu_node);
  std::vector<NetPortReach> ports;
  for (const Node& node : graph.nodes) {
    if (node.type != NodeType::kNet || node.host != graph.nodes[gpu_node].host) continue;
    NetPortReach reach{node.name, node.port, PathType::kSys, 0.0};
    if (node.parent >= 0 && labels[node.parent].hops >= 0) {
      reach.type = labels[node.parent].type;
      reach.bandwidth_gbps = labels[node.parent].bandwidth_gbps;
    }
    ports.push_back(reach);
  }
  std::sort(ports.begin(), ports.end(), [](const NetPortReach& a, const NetPortReach& b) {
    return std::tie(a.type, b.bandwidth_gbps, a.name, a.port) < std::tie(b.type, a.bandwidth_gbps, b.name, b.port);
  });
  return ports;
}

std::vector<std::string> nearest_net_ports(const SystemGraph& graph, int gpu_node) {
  std::vector<std::string> nearest;
  const std::vector<NetPortReach> ports = net_ports_from(graph, gpu_node);
  for (const NetPortReach& p : ports) {
    if (p.type != ports.front().type || p.bandwidth_gbps != ports.front().bandwidth_gbps) break;
    nearest.push_back(p.name + ":" + std::to_string(p.port));
  }
  return nearest;
}

TransportKind choose_transport(const GpuPath& path) {
  if (path.type == PathType::kNet) return TransportKind::kNet;
  if (path.type <= PathType::kPxb) return TransportKind::kP2p;
  return TransportKind::kShm;
}

TransportKind worst_transport_between_gpus(const SystemGraph& graph, int host) {
  std::vector<int> gpus;
  for (int i = 0; i < static_cast<int>(graph.nodes.size()); ++i)
    if (graph.nodes[i].type == NodeType::kGpu && graph.nodes[i].host == host) gpus.push_back(i);
  const RankPaths paths = compute_rank_paths(graph, gpus);
  TransportKind worst = TransportKind::kP2p;
  for (int a = 0; a < paths.nranks; ++a)
    for (int b = 0; b < paths.nranks; ++b)
      if (a != b) worst = std::max(worst, choose_transport(paths.at(a, b)));
  return worst;
}

double ring_bandwidth(const RankPaths& paths, const Ring& ring) {
  double slowest = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < ring.size() && ring.size() > 1; ++i)
    slowest = std::min(slowest, paths.at(ring[i], ring[(i + 1) % ring.size()]).bandwidth_gbps);
  return slowest;
}

std::vector<Ring> search_rings(const RankPaths& paths, int channels) {
  const int n = paths.nranks;
  std::vector<Ring> rings;
  if (n == 0) return rings;
  std::vector<int> used(static_cast<std::size_t>(n) * n, 0);
  for (int channel = 0; channel < channels; ++channel) {
    Ring ring = RingSearch(paths, used).run();
    for (int i = 0; i < n; ++i) ++used[ring[i] * n + ring[(i + 1) % n]];
    FERRY_INFO(Topo, "channel %d ring of %d ranks: %.1f GB/s", channel, n, ring_bandwidth(paths, ring));
    rings.push_back(std::move(ring));
  }
  return rings;
}

std::array<BinaryTree, 2> build_double_binary_tree(const std::vector<int>& order) {
  const int n = static_cast<int>(order.size());
  std::vector<int> second(n);
  for (int position = 0; position < n; ++position)
    second[position] = n % 2 == 0 ? order[n - 1 - position] : order[(position + 1) % n];
  return {binary_tree_over(n, order), binary_tree_over(n, second)};
}

}  // namespace ferry
