// The tuner's model of collectives by machine (hierarchy.h): the step
// across machines, ring or tree for an allreduce's shards, chain or tree
// for a bcast among the machines' leaders, and the whole call by machine.
#include <algorithm>
#include <atomic>
#include <string>

#include "engine/collectives/tuner.h"
#include "engine/common/log.h"
#include "engine/common/params.h"

namespace ferry {
namespace {

// Assumed, not measured with a NIC: a device chunk of the net transport
// reaches pinned host memory at about PCIe Gen5's achieved rate; only the
// first and last chunks of a shard are not hidden behind the network.
constexpr double kHostCopyGbps = 50.0;
constexpr double kNetChunkBytes = 1 << 20;
// run_net_chain_bcast's pieces.
constexpr double kChainPieceBytes = 4 << 20;

double transfer_us(double bytes, double gbps) { return bytes / (gbps * 1e3); }  // GB/s = 1e3 bytes/us

// Edges from the root of tree_links' trees (algorithms.h) to their deepest
// position: ceil(log2(n + 1)) - 1.
int tree_depth(int n) {
  int levels = 0;
  while ((1 << levels) < n + 1) ++levels;
  return levels - 1;
}

// The pieces' first and last copies between the device and pinned host
// memory, which nothing hides.
double host_copies_us(double bytes) { return 2 * transfer_us(std::min(bytes, kNetChunkBytes), kHostCopyGbps); }

// Reduce-scatter then allgather around the n machines: 2(n-1) network
// steps, a reduce kernel (launch and wait) after each of the first n-1.
double ring_allreduce_us(double shard, int n, const MachineModel& m, const LinkCost& net) {
  return 2 * (n - 1) * net.hop_us + (n - 1) * m.launch_us + transfer_us(2.0 * (n - 1) / n * shard, net.bandwidth_gbps) +
         host_copies_us(shard);
}

// Each half of the shard up one tree and back down, in pieces: the first
// piece crosses the depth up (a reduce kernel a level) and down, the later
// pieces a reduce each; every rank sends and receives about the whole shard
// in each direction (inner in one tree: twice a half; a leaf in the other).
double tree_allreduce_us(double shard, int n, const MachineModel& m, const LinkCost& net) {
  const int depth = tree_depth(n);
  const double pieces = std::max(1.0, shard / 2 / kNetChunkBytes);
  return 2 * depth * net.hop_us + (depth + pieces - 1) * m.launch_us + 2 * transfer_us(shard, net.bandwidth_gbps) +
         host_copies_us(shard / 2);
}

// The buffer down the chain of n leaders in pieces: n-1 hops, then the
// bytes at the link's rate, the last piece behind the others at each hop.
double chain_bcast_us(double bytes, int n, const LinkCost& net) {
  return (n - 1) * net.hop_us + transfer_us(bytes, net.bandwidth_gbps) +
         (n - 2) * transfer_us(std::min(bytes, kChainPieceBytes), net.bandwidth_gbps) + host_copies_us(bytes);
}

// Down tree 0: depth hops; inner leaders send each piece twice.
double tree_bcast_us(double bytes, int n, const LinkCost& net) {
  const int depth = tree_depth(n);
  return depth * net.hop_us + 2 * transfer_us(bytes, net.bandwidth_gbps) +
         (depth - 1) * transfer_us(std::min(bytes, kNetChunkBytes), net.bandwidth_gbps) + host_copies_us(bytes);
}

double allreduce_across_us(AcrossAlgorithm algorithm, double shard, int machines, const MachineModel& m,
                           const LinkCost& net) {
  if (machines < 2) return 0;
  switch (algorithm) {
    case AcrossAlgorithm::kRing: return ring_allreduce_us(shard, machines, m, net);
    case AcrossAlgorithm::kTree: return tree_allreduce_us(shard, machines, m, net);
    default: return -1;
  }
}

double bcast_across_us(AcrossAlgorithm algorithm, double bytes, int machines, const LinkCost& net) {
  if (machines < 2) return 0;
  switch (algorithm) {
    case AcrossAlgorithm::kChain: return chain_bcast_us(bytes, machines, net);
    case AcrossAlgorithm::kTree: return tree_bcast_us(bytes, machines, net);
    default: return -1;
  }
}

constexpr AcrossAlgorithmInfo kAcrossAlgorithms[] = {
    {AcrossAlgorithm::kRing, "ring",
     "the shard holders of every machine reduce-scatter then allgather around a ring: 2(n-1) network steps, every "
     "link busy at once",
     true, false},
    {AcrossAlgorithm::kTree, "tree",
     "double binary tree over the machines: each half of the shard reduced up one tree and broadcast down, pieces "
     "of FERRY_NET_CHUNK_BYTES pipelined; 2 log2(n) steps (bcast: down one tree from the root's machine)",
     true, true},
    {AcrossAlgorithm::kChain, "chain",
     "the machines' leaders pass the root's buffer along a chain in 4 MiB pieces, each forwarding a piece as the "
     "next arrives",
     false, true},
};
static_assert(sizeof(kAcrossAlgorithms) / sizeof(kAcrossAlgorithms[0]) ==
                  static_cast<std::size_t>(AcrossAlgorithm::kCount),
              "one record per algorithm across machines");

std::atomic<std::uint64_t> g_allreduce_across[static_cast<int>(AcrossAlgorithm::kCount)];
std::atomic<std::uint64_t> g_bcast_across[static_cast<int>(AcrossAlgorithm::kCount)];

// The model the runtime prices the network with.
const MachineModel& network_model() {
  static const MachineModel& model = *find_machine_model("multinode");
  return model;
}

// FERRY_TUNE's rule for collective at bytes, else the model's choice;
// logged at trace level.
template <typename Model>
AcrossAlgorithm tuned_or_modeled(const std::vector<TuneRule>& rules, TunedCollective collective, std::size_t bytes,
                                 int machines, Model model) {
  AcrossAlgorithm choice = AcrossAlgorithm::kCount;
  for (const TuneRule& rule : rules)
    if (rule.collective == collective && bytes >= rule.min_bytes && bytes < rule.max_bytes) {
      choice = rule.across;
      break;
    }
  const bool from_rule = choice != AcrossAlgorithm::kCount;
  if (!from_rule) choice = model();
  FERRY_TRACE(Coll, "%s of %zu bytes across %d machines: %s (%s)",
              collective == TunedCollective::kBcastAcross ? "bcast" : "allreduce", bytes, machines,
              across_algorithm_info(choice).name, from_rule ? "FERRY_TUNE" : "model");
  return choice;
}

// Machine's nodes for nranks ranks, and its ranks a node.
int nodes_of(int nranks, const MachineModel& machine, int* per_node) {
  *per_node = machine.gpus_per_node > 0 ? std::min(nranks, machine.gpus_per_node) : nranks;
  return (nranks + *per_node - 1) / *per_node;
}

}  // namespace

const AcrossAlgorithmInfo& across_algorithm_info(AcrossAlgorithm algorithm) {
  return kAcrossAlgorithms[static_cast<int>(algorithm)];
}

double predict_across_allreduce_us(AcrossAlgorithm algorithm, std::size_t shard_bytes, int machines,
                                   const MachineModel& machine) {
  return allreduce_across_us(algorithm, double(shard_bytes), machines, machine, link_cost(machine.inter));
}

double predict_across_bcast_us(AcrossAlgorithm algorithm, std::size_t bytes, int machines,
                               const MachineModel& machine) {
  return bcast_across_us(algorithm, double(bytes), machines, link_cost(machine.inter));
}

AcrossAlgorithm model_allreduce_across(std::size_t shard_bytes, int machines, const MachineModel& machine) {
  return model_allreduce_across(shard_bytes, machines, machine, link_cost(machine.inter));
}

AcrossAlgorithm model_allreduce_across(std::size_t shard_bytes, int machines, const MachineModel& machine,
                                       const LinkCost& network) {
  const double shard = double(shard_bytes);
  return allreduce_across_us(AcrossAlgorithm::kTree, shard, machines, machine, network) <
                 allreduce_across_us(AcrossAlgorithm::kRing, shard, machines, machine, network)
             ? AcrossAlgorithm::kTree
             : AcrossAlgorithm::kRing;
}

AcrossAlgorithm model_bcast_across(std::size_t bytes, int machines, const MachineModel& machine) {
  return model_bcast_across(bytes, machines, machine, link_cost(machine.inter));
}

AcrossAlgorithm model_bcast_across(std::size_t bytes, int machines, const MachineModel&, const LinkCost& network) {
  return bcast_across_us(AcrossAlgorithm::kTree, double(bytes), machines, network) <
                 bcast_across_us(AcrossAlgorithm::kChain, double(bytes), machines, network)
             ? AcrossAlgorithm::kTree
             : AcrossAlgorithm::kChain;
}

double predict_hierarchical_allreduce_us(std::size_t bytes, int nranks, const MachineModel& machine) {
  int per_node = 0;
  const int nodes = nodes_of(nranks, machine, &per_node);
  if (nodes < 2) return -1;
  const LinkCost& intra = link_cost(machine.intra);
  // Within a node: the model's own choice on one node of per_node ranks.
  const MachineModel node{machine.name, machine.description, machine.launch_us, machine.worker_us, machine.intra,
                          machine.intra, 0};
  const double within =
      per_node > 1 ? predict_allreduce_us(model_allreduce(per_node, bytes, true, node), bytes, per_node, node) : 0;
  const std::size_t shard = bytes / per_node;
  const double across =
      predict_across_allreduce_us(model_allreduce_across(shard, nodes, machine), shard, nodes, machine);
  // The shards gathered: each rank loads the others' from peer memory.
  const double gather =
      per_node > 1 ? machine.launch_us + intra.hop_us +
                         transfer_us(double(per_node - 1) / per_node * bytes, intra.bandwidth_gbps)
                   : 0;
  return within + across + gather;
}

std::string across_nodes_choice(std::size_t bytes, int nranks, const MachineModel& machine) {
  if (static_cast<std::int64_t>(bytes) < params().net_min_bytes) return "staged";
  int per_node = 0;
  const int nodes = nodes_of(nranks, machine, &per_node);
  const AcrossAlgorithm across = model_allreduce_across(bytes / per_node, nodes, machine);
  return std::string("hier+") + across_algorithm_info(across).name;
}

AcrossAlgorithm choose_allreduce_across(const std::vector<TuneRule>& rules, std::size_t bytes,
                                        std::size_t shard_bytes, int machines, const LinkCost& network) {
  return tuned_or_modeled(rules, TunedCollective::kAllreduceAcross, bytes, machines, [&] {
    return model_allreduce_across(shard_bytes, machines, network_model(), network);
  });
}

AcrossAlgorithm choose_bcast_across(const std::vector<TuneRule>& rules, std::size_t bytes, int machines,
                                    const LinkCost& network) {
  return tuned_or_modeled(rules, TunedCollective::kBcastAcross, bytes, machines,
                          [&] { return model_bcast_across(bytes, machines, network_model(), network); });
}

void count_across_run(TunedCollective collective, AcrossAlgorithm algorithm) {
  if (!params().stats) return;
  auto& counts = collective == TunedCollective::kBcastAcross ? g_bcast_across : g_allreduce_across;
  counts[static_cast<int>(algorithm)].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t across_choice_count(TunedCollective collective, AcrossAlgorithm algorithm) {
  const auto& counts = collective == TunedCollective::kBcastAcross ? g_bcast_across : g_allreduce_across;
  return counts[static_cast<int>(algorithm)].load(std::memory_order_relaxed);
}

}  // namespace ferry
