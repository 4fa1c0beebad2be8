#include "engine/core/transport_table.h"

#include <algorithm>
#include <cctype>

#include "engine/topology/search.h"

namespace ferry {

AllowedTransports allowed_transports(const std::string& list, bool p2p_disable, bool shm_disable,
                                     std::vector<std::string>* unknown) {
  AllowedTransports listed{false, false, false};
  bool known_name = false;  // none and net included
  std::size_t start = 0;
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (start <= list.size()) {
    std::size_t end = std::min(list.find(',', start), list.size());
    const std::size_t next = end + 1;
    while (start < end && space(list[start])) ++start;
    while (end > start && space(list[end - 1])) --end;
    const std::string word = list.substr(start, end - start);
    start = next;
    std::string name = word;
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.empty()) continue;
    if (name == "p2p") {
      listed.p2p = true;
    } else if (name == "shm") {
      listed.shm = true;
    } else if (name == "net") {
      listed.net = true;
    } else if (name != "none") {
      if (unknown) unknown->push_back(word);
      continue;
    }
    known_name = true;
  }
  if (!known_name) listed = AllowedTransports{};
  return {listed.p2p && !p2p_disable, listed.shm && !shm_disable, listed.net};
}

std::vector<TransportKind> topology_paths(int rank, const std::vector<RankIdentity>& ranks,
                                          const SystemGraph* topology) {
  const int n = static_cast<int>(ranks.size());
  RankPaths paths;  // between ranks, when the topology names them all
  bool ranked = topology != nullptr;
  for (int r = 0; ranked && r < n; ++r) ranked = topology->gpu_of_rank(r) >= 0;
  if (ranked) {
    std::vector<int> gpu_of_rank;
    ranked = ok(find_rank_gpus(*topology, n, gpu_of_rank));
    if (ranked) paths = compute_rank_paths(*topology, gpu_of_rank);
  }
  bool has_gpus = false;
  if (topology)
    for (const Node& node : topology->nodes) has_gpus = has_gpus || node.type == NodeType::kGpu;
  const bool by_machine_gpus = !ranked && has_gpus && ranks[rank].physical_devices;
  const TransportKind machine =
      by_machine_gpus ? worst_transport_between_gpus(*topology, 0) : TransportKind::kP2p;
  std::vector<TransportKind> kinds(n, machine);
  if (ranked)
    for (int peer = 0; peer < n; ++peer) kinds[peer] = choose_transport(paths.at(rank, peer));
  return kinds;
}

TransportTable::TransportTable(const AllowedTransports& allowed, gpu::Backend* backend,
                               std::size_t shm_segment_bytes, std::size_t net_chunk_bytes, int net_chunks)
    : shm_(backend, shm_segment_bytes), net_(net_chunk_bytes, net_chunks) {
  if (allowed.p2p) candidates_.push_back(&p2p_);
  if (allowed.shm) candidates_.push_back(&shm_);
  if (allowed.net) candidates_.push_back(&net_);
}

bool TransportTable::uses_net() const {
  return std::find(peers_.begin(), peers_.end(), &net_) != peers_.end();
}

void TransportTable::plan(int rank, const std::vector<RankIdentity>& ranks, const SystemGraph* topology) {
  rank_ = rank;
  const std::vector<TransportKind> paths = topology_paths(rank, ranks, topology);
  peers_.assign(ranks.size(), nullptr);
  for (int peer = 0; peer < static_cast<int>(ranks.size()); ++peer) {
    if (peer == rank) continue;
    const PeerView view{ranks[rank], ranks[peer], paths[peer]};
    for (Transport* transport : candidates_) {
      if (transport->can_connect(view)) {
        peers_[peer] = transport;
        break;
      }
    }
  }
}

const char* TransportTable::name_to(int peer) const {
  if (peer == rank_) return "self";
  return peers_[peer] ? peers_[peer]->name() : "none";
}

}  // namespace ferry
