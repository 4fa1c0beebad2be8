// Which algorithm runs a collective. Algorithms are self-describing records
// with an alpha-beta cost function each; the default choice is the fastest
// implemented algorithm by that model on the machine's constants, and one
// FERRY_TUNE string overrides it, e.g. "allreduce:0-64K:oneshot,64K-:cepush".
// ferry-info --model prints the predictions for 2-4096 ranks;
// engine/collectives/README.md says what the model assumes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

enum class AllreduceAlgorithm : int {
  kOneShot,
  kTwoShot,
  kCopyEngine,
  kOneShotLl,
  kRing,
  kTree,
  kCopyPush,
  kOneShotLl128,
  kCount
};

// The kinds of link a machine is built of, and what one hop over each costs.
enum class LinkKind : int { kNvLink, kPcie, kShm, kNet, kCount };

struct LinkCost {
  LinkKind kind;
  const char* name;
  double hop_us;          // one step's synchronization across the link (alpha)
  double bandwidth_gbps;  // per direction, with both directions busy (1/beta)
};
const LinkCost& link_cost(LinkKind kind);

// A machine for the model: ranks fill nodes of gpus_per_node GPUs joined by
// `intra` links; nodes are joined by `inter` links. gpus_per_node == 0: every
// rank is on one node.
struct MachineModel {
  const char* name;
  const char* description;
  double launch_us;  // launch + completion of one blocking call, paid once
  double worker_us;  // the same for a call on the engine worker (no launch)
  LinkKind intra;
  LinkKind inter;
  int gpus_per_node;
};
const std::vector<MachineModel>& machine_models();
const MachineModel* find_machine_model(const std::string& name);  // nullptr if unknown
// What the runtime assumes for p2p communicators: the measured NVLink pair.
const MachineModel& default_machine_model();

struct AlgorithmInfo {
  AllreduceAlgorithm id;
  const char* name;
  const char* description;
  bool in_place_safe;  // may run when outputs alias inputs
  bool implemented;    // false: model only, never chosen at run time
  int max_ranks;       // 0: any
  bool one_node_only;  // needs every peer's memory mapped
  std::size_t (*max_bytes)(int nranks);  // largest call it runs on nranks; nullptr: any size
  // Predicted time of one blocking call in microseconds.
  double (*time_us)(std::size_t bytes, int nranks, const MachineModel& machine);
};

const AlgorithmInfo& algorithm_info(AllreduceAlgorithm algorithm);

// Whether the algorithm can run nranks ranks on this machine at all.
bool algorithm_applies(AllreduceAlgorithm algorithm, int nranks, const MachineModel& machine);

// Predicted time in microseconds; negative where the algorithm does not apply.
double predict_allreduce_us(AllreduceAlgorithm algorithm, std::size_t bytes, int nranks,
                            const MachineModel& machine);

// nccl-tests' allreduce bus bandwidth in GB/s: 2(n-1)/n * bytes / time.
double allreduce_busbw_gbps(std::size_t bytes, int nranks, double time_us);

// Ranks spanning nodes (engine/collectives/hierarchy.h) go by machine: an
// allreduce within each node (the model's choice there), an allreduce
// across nodes among the ranks holding the same shard of the buffer (a
// shard per rank of a node, every NIC busy; ring or double binary tree,
// AcrossAlgorithm, each step a reduce kernel, the data through pinned host
// chunks), the shards gathered within each node. Negative where every rank
// fits one node.
double predict_hierarchical_allreduce_us(std::size_t bytes, int nranks, const MachineModel& machine);
// What the runtime does with a device allreduce of bytes on nranks ranks of
// machine across nodes: "hier+ring" or "hier+tree" (the step across nodes),
// or "staged" below FERRY_NET_MIN_BYTES (the real MPI serves small calls
// sooner than the steps by machine, as measured).
std::string across_nodes_choice(std::size_t bytes, int nranks, const MachineModel& machine);

// The step across machines, among one rank of each: an allreduce (ring or
// tree) or a bcast among the machines' leaders (chain or tree).
enum class AcrossAlgorithm : int { kRing, kTree, kChain, kCount };

struct AcrossAlgorithmInfo {
  AcrossAlgorithm id;
  const char* name;
  const char* description;
  bool allreduce;  // runs the allreduce's step
  bool bcast;      // runs the bcast's step
};
const AcrossAlgorithmInfo& across_algorithm_info(AcrossAlgorithm algorithm);

// Predicted time of the step across `machines` machines over machine's
// network links: an allreduce of shard bytes, a bcast of bytes. Negative
// where the algorithm does not run that collective.
double predict_across_allreduce_us(AcrossAlgorithm algorithm, std::size_t shard_bytes, int machines,
                                   const MachineModel& machine);
double predict_across_bcast_us(AcrossAlgorithm algorithm, std::size_t bytes, int machines,
                               const MachineModel& machine);
// The faster by the model (ties: ring, chain), over machine's network
// links or the given network (a measured one).
AcrossAlgorithm model_allreduce_across(std::size_t shard_bytes, int machines, const MachineModel& machine);
AcrossAlgorithm model_allreduce_across(std::size_t shard_bytes, int machines, const MachineModel& machine,
                                       const LinkCost& network);
AcrossAlgorithm model_bcast_across(std::size_t bytes, int machines, const MachineModel& machine);
AcrossAlgorithm model_bcast_across(std::size_t bytes, int machines, const MachineModel& machine,
                                   const LinkCost& network);

// How a bcast moves the root's buffer (collectives.cc). Without a FERRY_TUNE
// rule the engine decides by size, as measured on 2x H200 (no model yet).
enum class BcastAlgorithm : int { kLl, kPull, kChain, kCount };

struct BcastAlgorithmInfo {
  BcastAlgorithm id;
  const char* name;
  const char* description;
};
const BcastAlgorithmInfo& bcast_algorithm_info(BcastAlgorithm algorithm);

// The collectives FERRY_TUNE names; the -across ones are the step across
// machines of a call by machine, by the whole call's bytes.
enum class TunedCollective : int { kAllreduce, kBcast, kAllreduceAcross, kBcastAcross };

// One FERRY_TUNE rule: sizes in [min_bytes, max_bytes) of the collective
// use algorithm (an allreduce), bcast (a bcast) or across (a step across
// machines).
struct TuneRule {
  std::size_t min_bytes;
  std::size_t max_bytes;
  AllreduceAlgorithm algorithm;
  TunedCollective collective = TunedCollective::kAllreduce;
  BcastAlgorithm bcast = BcastAlgorithm::kCount;
  AcrossAlgorithm across = AcrossAlgorithm::kCount;
};

// Parses "allreduce:LO-HI:name,...,bcast:LO-HI:name,...,
// allreduce-across:LO-HI:ring|tree,bcast-across:LO-HI:chain|tree" (sizes
// with K/M/G, HI empty = no limit). Malformed entries, and entries naming a
// model-only algorithm, are skipped and described in problems.
std::vector<TuneRule> parse_tune(const std::string& text, std::vector<std::string>* problems);
// FERRY_TUNE, parsed once (its problems warned about once).
const std::vector<TuneRule>& tune_rules();

// The step across machines for a call of bytes among machines machines
// (shard_bytes of it crossing in an allreduce): FERRY_TUNE's rule, else the
// model's choice on the multinode machine over network (as measured:
// Hierarchy::network). Every rank computes the same answer from the same
// inputs. Logged at trace level.
AcrossAlgorithm choose_allreduce_across(const std::vector<TuneRule>& rules, std::size_t bytes,
                                        std::size_t shard_bytes, int machines, const LinkCost& network);
AcrossAlgorithm choose_bcast_across(const std::vector<TuneRule>& rules, std::size_t bytes, int machines,
                                    const LinkCost& network);
// FERRY_STATS: a step across machines ran, and the calls per algorithm.
void count_across_run(TunedCollective collective, AcrossAlgorithm algorithm);
std::uint64_t across_choice_count(TunedCollective collective, AcrossAlgorithm algorithm);

// FERRY_TUNE's bcast algorithm for a call of bytes; kCount when no rule
// names one (the engine's own choice). Logs the rule's choice at trace level.
BcastAlgorithm tuned_bcast(const std::vector<TuneRule>& rules, std::size_t bytes);
BcastAlgorithm tuned_bcast(std::size_t bytes);

// FERRY_STATS: an engine bcast ran with algorithm, and the calls per
// algorithm since load. With FERRY_TRACE, the algorithm (and an
// allreduce's, below) is noted for the call's span.
void count_bcast_run(BcastAlgorithm algorithm);
// With FERRY_TRACE: the innermost engine call open on this thread ran the
// algorithm name (a string that outlives the call), which its span says.
void note_traced_algorithm(const char* name);
std::uint64_t bcast_choice_count(BcastAlgorithm algorithm);

// The fastest implemented algorithm by the model that may run this call.
AllreduceAlgorithm model_allreduce(int nranks, std::size_t bytes, bool any_in_place, const MachineModel& machine);

// The choice for this call: FERRY_TUNE's rule for bytes if one matches and
// is safe for the call, else the model's. Every rank computes the same
// answer from the same inputs. *from_rule (if given) says which decided.
AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place,
                                    const std::vector<TuneRule>& rules, const MachineModel& machine,
                                    bool* from_rule = nullptr);
AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place,
                                    const std::vector<TuneRule>& rules);
// With FERRY_TUNE and the default machine; logs the choice at trace level.
AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place);

// FERRY_STATS: an engine allreduce ran with algorithm (counted only then),
// and the calls per algorithm since load.
void count_allreduce_run(AllreduceAlgorithm algorithm);
std::uint64_t allreduce_choice_count(AllreduceAlgorithm algorithm);

}  // namespace ferry
