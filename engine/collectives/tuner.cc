#include "engine/collectives/tuner.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "engine/collectives/schedule.h"
#include "engine/collectives/worker.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/common/trace.h"

namespace ferry {
namespace {

// ---- constants of the model -------------------------------------------------
// Every number says where it comes from; the measurements behind them are
// in bench/RESULTS.md ("The tuner's cost-model constants"). "Assumed" ones
// have no measurement behind them yet and are what to replace first when
// hardware exists.

constexpr LinkCost kLinks[] = {
    // hop: GPU-to-GPU flag ping-pong one way (2x H200). bandwidth: the bus
    // bandwidth of a kernel reducing half the vector from the peer, which
    // Ferry's one-shot allreduce matches at 512 MiB.
    {LinkKind::kNvLink, "nvlink", 0.62, 335.0},
    // Assumed: about NCCL's PCIe step latency; 50 GB/s is ~78 % of a Gen5 x16
    // link's 64 GB/s, the usual achieved rate. Not measured here.
    {LinkKind::kPcie, "pcie", 1.0, 50.0},
    // Ferry's shm route on 2x H200: its 8-byte allreduce's time beyond the
    // p2p route's, over its three barriers a chunk, is a step; bandwidth is
    // its allreduce bus bandwidth from 32 MiB up.
    {LinkKind::kShm, "shm", 6.5, 13.2},
    // Assumed: one 400 Gb/s NDR NIC per GPU at ~90 %, a GPU-to-GPU put plus
    // flag across it ~5 us. The measured machine has no NIC.
    {LinkKind::kNet, "net", 5.0, 45.0},
};
static_assert(sizeof(kLinks) / sizeof(kLinks[0]) == static_cast<std::size_t>(LinkKind::kCount), "one cost per link");

// Ferry's blocking one-shot allreduce at 8 B on 2x H200 = launch + sync +
// one NVLink hop. A call on the engine worker (a persistent kernel answering
// a host doorbell) pays kWorkerUs instead.
constexpr double kLaunchUs = 13.9 - 0.62;

// Copy-engine allreduce forced by FERRY_TUNE at 256 MiB-1 GiB against SM
// loads, and a pipeline whose first chunk (>= 1 MiB, schedule.cc) is pulled
// and pushed without overlap.
constexpr double kCopyEngineEfficiency = 331.0 / 335.0;
constexpr double kCopyEngineChunkBytes = 1 << 20;

// Copy-engine push (cepush), measured on 2x H200 with both directions busy:
// the copy engines' rate against SM loads, once the fixed cost of every copy
// (kCopyUs) and the last chunk's reduce are taken out of its bus bandwidth
// on 128 MiB slots; kLocalReduceGbps is what a kernel adding two local
// inputs reads of each.
constexpr double kCopyPushEfficiency = 367.0 / 335.0;
constexpr double kCopyUs = 5.0;
constexpr double kLocalReduceGbps = 1150.0;

// NCCL's tuning model: tree bus bandwidth 0.92 of the ring's, and a pipeline
// of 256 KiB chunks (src/graph/tuning.cc).
constexpr double kTreeEfficiency = 0.92;
constexpr double kTreeChunkBytes = 256 << 10;

// Ring and tree run over the Simple protocol (simple_protocol.h): a step
// hands its piece on with a barrier, a system-scope release and the peer's
// poll, on top of the flag's hop. Calibrated on the forced ring on 2x H200:
// its time at 8 B = launch floor + 2 steps of (hop + this); at 512 MiB-1 GiB
// the same run reached the link rate the model already uses.
constexpr double kSimpleStepUs = 3.6;

// A blocking call on the engine worker (worker.h): doorbell and report
// through host memory (bench/mailbox-latency), plus the engine's handshake;
// calibrated so that one LL hop more gives the LL allreduce's measured
// 32 B - 2 KiB time on 2x H200.
constexpr double kWorkerUs = 7.0;

// One thread block moving LL lines (half of each line is flags): what a
// single SM reaches over NVLink, measured as the worker's one-block copies.
// Above kLlOneBlockBytes an LL call takes a worker block per
// kLlBytesPerSharingBlock (worker.h). Two workers on one H200
// (bench/worker-latency; no NVLink, so the bytes are costed at the link's
// rate below): kLlShareUs, handing the item to the other blocks and waiting
// for their reports, over the one-block floor; kLlRoundUs, every round of
// chunks a thread takes beyond its first. A round is a block's 512 threads
// moving 16 bytes each. The rounds overlap the bytes' crossing of the
// link: with both, the model matches the LL allreduce on 16 blocks
// measured on 2x H200 at 32-512 KiB. Assumed, not measured beyond two
// ranks: a thread polls its chunk's peers one after the other, so each
// further peer costs what a further round does.
constexpr double kLlBlockGbps = 10.0;
constexpr double kLlShareUs = 2.7;
constexpr double kLlRoundUs = 2.2;
constexpr std::size_t kLlRoundBytes = 512 * 16;

// LL128 (worker_common.h) moves 128 bytes of line for 120 of data where LL
// moves 2 for 1, yet measured no faster than LL (two workers on one H200,
// bench/worker-latency, float sums): a lane carries 16 bytes of line
// where an LL thread carries 32, so a call takes more rounds of memory
// latency. Not measured over NVLink. The model charges LL's time and a
// microsecond, so it never picks LL128 over LL; FERRY_TUNE still can.
constexpr double kLl128ExtraUs = 1.0;

const std::vector<MachineModel> kMachines = {
    {"nvlink", "every rank on one NVLink/NVSwitch fabric, links as measured on 2x H200 (NV18)", kLaunchUs, kWorkerUs,
     LinkKind::kNvLink, LinkKind::kNvLink, 0},
    {"pcie", "every rank on one PCIe fabric with peer access", kLaunchUs, kWorkerUs, LinkKind::kPcie,
     LinkKind::kPcie, 0},
    {"multinode", "nodes of 8 GPUs on NVLink, one network NIC per GPU between nodes", kLaunchUs, kWorkerUs,
     LinkKind::kNvLink, LinkKind::kNet, 8},
};

// ---- cost functions ------------------------------------------------------------

double transfer_us(double bytes, double gbps) { return bytes / (gbps * 1e3); }  // GB/s = 1e3 bytes/us

int ceil_log2(int n) {
  int depth = 0;
  while ((1 << depth) < n) ++depth;
  return depth;
}

struct Layout {
  int nodes;
  int per_node;
  const LinkCost& intra;
  const LinkCost& inter;
  double slowest_gbps;  // what a path through every rank runs at
};

Layout layout_of(int nranks, const MachineModel& m) {
  const int per_node = m.gpus_per_node > 0 ? std::min(nranks, m.gpus_per_node) : nranks;
  const int nodes = (nranks + per_node - 1) / per_node;
  const LinkCost& intra = link_cost(m.intra);
  const LinkCost& inter = link_cost(m.inter);
  return {nodes, per_node, intra, inter,
          nodes > 1 ? std::min(intra.bandwidth_gbps, inter.bandwidth_gbps) : intra.bandwidth_gbps};
}

// Each rank loads the n-1 peers' whole inputs: one flag hop, (n-1) * bytes in.
double one_shot_us(std::size_t bytes, int n, const MachineModel& m) {
  const LinkCost& link = link_cost(m.intra);
  return m.launch_us + link.hop_us + transfer_us(double(n - 1) * bytes, link.bandwidth_gbps);
}

// LL one-shot on the worker: one hop (the data carries its flags), each
// rank's blocks send (n-1) copies of its input and receive (n-1) inputs.
double one_shot_ll_us(std::size_t bytes, int n, const MachineModel& m) {
  const LinkCost& link = link_cost(m.intra);
  if (bytes <= kLlOneBlockBytes) return m.worker_us + link.hop_us + transfer_us(2.0 * (n - 1) * bytes, kLlBlockGbps);
  const std::size_t per_round = static_cast<std::size_t>(ll_share_blocks(bytes, worker_blocks())) * kLlRoundBytes;
  const std::size_t rounds = (bytes + per_round - 1) / per_round;
  const double rounds_us = (double(rounds) * (n - 1) - 1) * kLlRoundUs;
  return m.worker_us + kLlShareUs + link.hop_us +
         std::max(rounds_us, transfer_us(2.0 * (n - 1) * bytes, link.bandwidth_gbps));
}

// LL128 one-shot: as measured, LL's time and more (kLl128ExtraUs).
double one_shot_ll128_us(std::size_t bytes, int n, const MachineModel& m) {
  return one_shot_ll_us(bytes, n, m) + kLl128ExtraUs;
}


// Reduce-scatter then all-gather through peer memory: two flag hops,
// 2 (n-1)/n * bytes each way.
double two_shot_us(std::size_t bytes, int n, const MachineModel& m) {
  const LinkCost& link = link_cost(m.intra);
  return m.launch_us + 2 * link.hop_us + transfer_us(2.0 * (n - 1) / n * bytes, link.bandwidth_gbps);
}

double copy_engine_us(std::size_t bytes, int n, const MachineModel& m) {
  const LinkCost& link = link_cost(m.intra);
  const double bw = link.bandwidth_gbps * kCopyEngineEfficiency;
  const double fill = 2 * transfer_us(std::min<double>(double(bytes) / n, kCopyEngineChunkBytes), bw);
  return m.launch_us + 2 * link.hop_us + fill + transfer_us(2.0 * (n - 1) / n * bytes, bw);
}

// Every rank's copy engines push its whole input into each peer's landing
// slots, chunk by chunk, with a flag after each; each rank reduces a chunk
// once every peer's has landed. Only the last chunk's reduce is not hidden
// behind the copies.
double copy_push_us(std::size_t bytes, int n, const MachineModel& m) {
  const LinkCost& link = link_cost(m.intra);
  std::size_t chunks = 0, last = 0;
  for_each_copy_push_chunk(bytes, 1, static_cast<std::size_t>(std::max<std::int64_t>(1, params().ce_slot_bytes)),
                           [&](std::size_t chunk) {
                             ++chunks;
                             last = chunk;
                           });
  const double copies = double(chunks) * (n - 1);
  return m.launch_us + link.hop_us + copies * kCopyUs +
         transfer_us(double(n - 1) * bytes, link.bandwidth_gbps * kCopyPushEfficiency) +
         transfer_us(double(last), kLocalReduceGbps);
}

// NCCL's ring: 2(n-1) steps, of which 2(nodes-1) cross the network; every
// link carries 2 (n-1)/n * bytes at the slowest link's rate.
double ring_us(std::size_t bytes, int n, const MachineModel& m) {
  if (n <= 1) return m.launch_us;
  const Layout l = layout_of(n, m);
  const int steps = 2 * (n - 1);
  const int inter_steps = 2 * (l.nodes - 1);
  const double latency =
      (steps - inter_steps) * (l.intra.hop_us + kSimpleStepUs) + inter_steps * (l.inter.hop_us + kSimpleStepUs);
  return m.launch_us + latency + transfer_us(2.0 * (n - 1) / n * bytes, l.slowest_gbps);
}

// Double binary tree: up to the root and back down, log2 depth within a node
// and across nodes; each tree carries half the data, so every rank's link
// moves 2 * bytes each way. Pipelined in chunks: the first one crosses the
// whole depth before the bandwidth term applies.
double tree_us(std::size_t bytes, int n, const MachineModel& m) {
  if (n <= 1) return m.launch_us;
  const Layout l = layout_of(n, m);
  const int intra_depth = ceil_log2(l.per_node);
  const int inter_depth = ceil_log2(l.nodes);
  const double latency =
      2 * (intra_depth * (l.intra.hop_us + kSimpleStepUs) + inter_depth * (l.inter.hop_us + kSimpleStepUs));
  const double bw = l.slowest_gbps * kTreeEfficiency;
  const double fill = 2 * (intra_depth + inter_depth) * transfer_us(std::min(bytes / 2.0, kTreeChunkBytes), bw);
  return m.launch_us + latency + fill + transfer_us(2.0 * bytes, bw);
}

// Direct algorithms address every peer's buffer: any number of peers, all
// mapped (one node, NVLink or PCIe peer access: one_node_only).
constexpr int kDirectMaxRanks = 0;

constexpr AlgorithmInfo kAllreduceAlgorithms[] = {
    {AllreduceAlgorithm::kOneShot, "oneshot",
     "every rank loads every rank's whole input over peer memory and reduces into its own output", false, true,
     kDirectMaxRanks, true, nullptr, one_shot_us},
    {AllreduceAlgorithm::kTwoShot, "twoshot",
     "rank r loads slice r of every input, reduces, and stores it into every rank's output", true, true,
     kDirectMaxRanks, true, nullptr, two_shot_us},
    {AllreduceAlgorithm::kCopyEngine, "copyengine",
     "copy engines pull the peers' slices into scratch, a kernel reduces, copy engines push the result; "
     "pipelined in chunks, SMs mostly idle",
     true, true, kDirectMaxRanks, true, nullptr, copy_engine_us},
    {AllreduceAlgorithm::kOneShotLl, "ll",
     "on the engine worker: every rank stores its input as LL words (data + flag) into every peer's receive "
     "buffer and reduces what arrives in its own, in rank order; no mapping of the application's buffers and no "
     "closing exchange (up to FERRY_WORKER_MAX_BYTES and the LL slots: 512 KiB at 2 ranks, 64 KiB at 16; "
     "one-shot where no worker runs)",
     true, true, kDirectMaxRanks, true, ll_call_max_bytes, one_shot_ll_us},
    {AllreduceAlgorithm::kRing, "ring",
     "reduce-scatter then all-gather around the ranks in order, 2(n-1) steps, over the Simple protocol's FIFOs "
     "(a 128 KiB slot per step) on FERRY_CHANNELS thread blocks; no mapping of the application's buffers",
     true, true, 0, false, nullptr, ring_us},
    {AllreduceAlgorithm::kTree, "tree",
     "double binary tree: reduce up, broadcast down, log2(n) depth, pipelined in 128 KiB chunks over the Simple "
     "protocol's FIFOs on FERRY_CHANNELS thread blocks",
     true, true, 0, false, nullptr, tree_us},
    {AllreduceAlgorithm::kCopyPush, "cepush",
     "copy engines push every rank's whole input into each peer's landing slots (FERRY_CE_SLOT_BYTES, two per "
     "peer) chunk by chunk, each chunk followed by a flag written from the stream; every rank reduces a chunk once "
     "all of it has landed. No mapping of the application's buffers, no closing exchange, SMs idle but for the "
     "reduce",
     true, true, kDirectMaxRanks, true, nullptr, copy_push_us},
    {AllreduceAlgorithm::kOneShotLl128, "ll128",
     "on the engine worker, as ll but over LL128 lines: 120 data bytes and a flag in each 128-byte line, which "
     "eight lanes of a warp store and load in one instruction each; sums, minima and maxima of 4- and 8-byte "
     "numbers (others take ll), up to FERRY_WORKER_MAX_BYTES and the LL slots (960 KiB at 2 ranks, 120 KiB at "
     "16); measured slower than ll, so only FERRY_TUNE picks it",
     true, true, kDirectMaxRanks, true, ll128_call_max_bytes, one_shot_ll128_us},
};
static_assert(sizeof(kAllreduceAlgorithms) / sizeof(kAllreduceAlgorithms[0]) ==
                  static_cast<std::size_t>(AllreduceAlgorithm::kCount),
              "one record per algorithm");

constexpr BcastAlgorithmInfo kBcastAlgorithms[] = {
    {BcastAlgorithm::kLl, "ll",
     "on the engine worker: the root stores its buffer as LL words into every peer's receive buffer and each "
     "peer copies what arrives into its own; no mapping of the application's buffers (up to "
     "FERRY_WORKER_MAX_BYTES and the LL slots; the engine's choice up to 16 KiB)"},
    {BcastAlgorithm::kPull, "pull",
     "every other rank copies the root's mapped buffer into its own, with one worker block up to 4 KiB and its "
     "copy engine above, then all ranks meet (the engine's choice above 16 KiB, but from 1 MiB at 3 ranks or more)"},
    {BcastAlgorithm::kChain, "chain",
     "the buffer flows from the root down a chain of the ranks over the Simple protocol's FIFOs, pipelined in "
     "slots (3 ranks or more; the engine's choice from 1 MiB there)"},
};
static_assert(sizeof(kBcastAlgorithms) / sizeof(kBcastAlgorithms[0]) ==
                  static_cast<std::size_t>(BcastAlgorithm::kCount),
              "one record per bcast algorithm");

std::atomic<std::uint64_t> g_choices[static_cast<int>(AllreduceAlgorithm::kCount)];
std::atomic<std::uint64_t> g_bcast_choices[static_cast<int>(BcastAlgorithm::kCount)];

bool parse_size(const std::string& text, std::size_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  switch (*end) {
    case 'K': case 'k': value <<= 10; ++end; break;
    case 'M': case 'm': value <<= 20; ++end; break;
    case 'G': case 'g': value <<= 30; ++end; break;
    default: break;
  }
  if (end == text.c_str() || *end != '\0') return false;
  *out = value;
  return true;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(separator, start);
    parts.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

}  // namespace

const LinkCost& link_cost(LinkKind kind) { return kLinks[static_cast<int>(kind)]; }

const std::vector<MachineModel>& machine_models() { return kMachines; }

const MachineModel* find_machine_model(const std::string& name) {
  for (const MachineModel& m : kMachines)
    if (name == m.name) return &m;
  return nullptr;
}

const MachineModel& default_machine_model() { return kMachines[0]; }

const AlgorithmInfo& algorithm_info(AllreduceAlgorithm algorithm) {
  return kAllreduceAlgorithms[static_cast<int>(algorithm)];
}

bool algorithm_applies(AllreduceAlgorithm algorithm, int nranks, const MachineModel& machine) {
  const AlgorithmInfo& info = algorithm_info(algorithm);
  if (nranks < 1 || (info.max_ranks > 0 && nranks > info.max_ranks)) return false;
  if (!info.one_node_only) return true;
  const bool peers_mapped = machine.intra == LinkKind::kNvLink || machine.intra == LinkKind::kPcie;
  return peers_mapped && (machine.gpus_per_node == 0 || nranks <= machine.gpus_per_node);
}

double predict_allreduce_us(AllreduceAlgorithm algorithm, std::size_t bytes, int nranks,
                            const MachineModel& machine) {
  if (!algorithm_applies(algorithm, nranks, machine)) return -1;
  const auto max_bytes = algorithm_info(algorithm).max_bytes;
  if (max_bytes && bytes > max_bytes(nranks)) return -1;
  return algorithm_info(algorithm).time_us(bytes, nranks, machine);
}

double allreduce_busbw_gbps(std::size_t bytes, int nranks, double time_us) {
  if (nranks < 2 || time_us <= 0) return 0;
  return 2.0 * (nranks - 1) / nranks * double(bytes) / (time_us * 1e3);
}

std::vector<TuneRule> parse_tune(const std::string& text, std::vector<std::string>* problems) {
  std::vector<TuneRule> rules;
  if (text.empty()) return rules;
  std::string names, bcast_names, allreduce_across_names, bcast_across_names;
  for (const AlgorithmInfo& info : kAllreduceAlgorithms)
    if (info.implemented) names += std::string(names.empty() ? "" : ", ") + info.name;
  for (const BcastAlgorithmInfo& info : kBcastAlgorithms)
    bcast_names += std::string(bcast_names.empty() ? "" : ", ") + info.name;
  for (int a = 0; a < static_cast<int>(AcrossAlgorithm::kCount); ++a) {
    const AcrossAlgorithmInfo& info = across_algorithm_info(static_cast<AcrossAlgorithm>(a));
    if (info.allreduce)
      allreduce_across_names += std::string(allreduce_across_names.empty() ? "" : ", ") + info.name;
    if (info.bcast) bcast_across_names += std::string(bcast_across_names.empty() ? "" : ", ") + info.name;
  }
  // An entry without a collective continues the one before it:
  // "allreduce:0-64K:oneshot,64K-:copyengine".
  std::string collective;
  for (const std::string& entry : split(text, ',')) {
    std::vector<std::string> fields = split(entry, ':');
    if (fields.size() == 2 && !collective.empty()) fields.insert(fields.begin(), collective);
    const std::vector<std::string> range = fields.size() == 3 ? split(fields[1], '-') : std::vector<std::string>{};
    TuneRule rule{0, ~std::size_t{0}, AllreduceAlgorithm::kCount};
    const bool allreduce = fields.size() == 3 && fields[0] == "allreduce";
    const bool bcast = fields.size() == 3 && fields[0] == "bcast";
    const bool allreduce_across = fields.size() == 3 && fields[0] == "allreduce-across";
    const bool bcast_across = fields.size() == 3 && fields[0] == "bcast-across";
    bool valid = (allreduce || bcast || allreduce_across || bcast_across) && range.size() == 2 &&
                 (range[0].empty() || parse_size(range[0], &rule.min_bytes)) &&
                 (range[1].empty() || parse_size(range[1], &rule.max_bytes));
    if (valid && (allreduce_across || bcast_across)) {
      rule.collective = allreduce_across ? TunedCollective::kAllreduceAcross : TunedCollective::kBcastAcross;
      for (int a = 0; a < static_cast<int>(AcrossAlgorithm::kCount); ++a) {
        const AcrossAlgorithmInfo& info = across_algorithm_info(static_cast<AcrossAlgorithm>(a));
        if (fields[2] == info.name && (allreduce_across ? info.allreduce : info.bcast)) rule.across = info.id;
      }
      valid = rule.across != AcrossAlgorithm::kCount;
    } else if (valid && bcast) {
      rule.collective = TunedCollective::kBcast;
      for (const BcastAlgorithmInfo& info : kBcastAlgorithms)
        if (fields[2] == info.name) rule.bcast = info.id;
      valid = rule.bcast != BcastAlgorithm::kCount;
    } else if (valid) {
      for (const AlgorithmInfo& info : kAllreduceAlgorithms)
        if (fields[2] == info.name) rule.algorithm = info.id;
      if (rule.algorithm != AllreduceAlgorithm::kCount && !algorithm_info(rule.algorithm).implemented) {
        problems->push_back("FERRY_TUNE entry '" + entry + "' names " + fields[2] +
                            ", which the model predicts but no kernel runs yet (algorithms: " + names + ")");
        continue;
      }
      valid = rule.algorithm != AllreduceAlgorithm::kCount;
    }
    if (!valid || rule.min_bytes >= rule.max_bytes) {
      problems->push_back("FERRY_TUNE entry '" + entry +
                          "' is not [collective:]MIN-MAX:algorithm (allreduce: " + names + "; bcast: " + bcast_names +
                          "; allreduce-across: " + allreduce_across_names + "; bcast-across: " + bcast_across_names +
                          ")");
      continue;
    }
    collective = fields[0];
    rules.push_back(rule);
  }
  return rules;
}

AllreduceAlgorithm model_allreduce(int nranks, std::size_t bytes, bool any_in_place, const MachineModel& machine) {
  // Where nothing implemented applies, two-shot only answers queries.
  AllreduceAlgorithm best = AllreduceAlgorithm::kTwoShot;
  double best_us = -1;
  for (const AlgorithmInfo& info : kAllreduceAlgorithms) {
    if (!info.implemented || (any_in_place && !info.in_place_safe)) continue;
    const double us = predict_allreduce_us(info.id, bytes, nranks, machine);
    // Ties go to the earlier record: one-shot needs no remote stores.
    if (us >= 0 && (best_us < 0 || us < best_us)) {
      best = info.id;
      best_us = us;
    }
  }
  return best;
}

AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place,
                                    const std::vector<TuneRule>& rules, const MachineModel& machine,
                                    bool* from_rule) {
  if (from_rule) *from_rule = false;
  for (const TuneRule& rule : rules) {
    if (rule.collective != TunedCollective::kAllreduce || bytes < rule.min_bytes || bytes >= rule.max_bytes) continue;
    if (any_in_place && !algorithm_info(rule.algorithm).in_place_safe) break;
    const auto largest = algorithm_info(rule.algorithm).max_bytes;
    if (largest && bytes > largest(nranks)) break;  // beyond what it runs: the model decides
    if (from_rule) *from_rule = true;
    return rule.algorithm;
  }
  return model_allreduce(nranks, bytes, any_in_place, machine);
}

AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place,
                                    const std::vector<TuneRule>& rules) {
  return choose_allreduce(nranks, bytes, any_in_place, rules, default_machine_model());
}

const std::vector<TuneRule>& tune_rules() {
  static const std::vector<TuneRule> rules = [] {
    std::vector<std::string> problems;
    std::vector<TuneRule> parsed = parse_tune(params().tune, &problems);
    for (const std::string& problem : problems) FERRY_WARN(Coll, "%s", problem.c_str());
    return parsed;
  }();
  return rules;
}

AllreduceAlgorithm choose_allreduce(int nranks, std::size_t bytes, bool any_in_place) {
  const std::vector<TuneRule>& rules = tune_rules();
  const MachineModel& machine = default_machine_model();
  // The rules and the model never change, so the answer for the call before
  // holds for a call like it (loops repeat one size; costing the model is a
  // measurable part of a small call's host time, bench/RESULTS.md).
  struct LastChoice {
    int nranks = -1;
    std::size_t bytes = 0;
    bool any_in_place = false;
    bool from_rule = false;
    AllreduceAlgorithm choice{};
  };
  thread_local LastChoice last;
  if (last.nranks != nranks || last.bytes != bytes || last.any_in_place != any_in_place) {
    last.choice = choose_allreduce(nranks, bytes, any_in_place, rules, machine, &last.from_rule);
    last.nranks = nranks;
    last.bytes = bytes;
    last.any_in_place = any_in_place;
  }
  const AllreduceAlgorithm choice = last.choice;
  const bool from_rule = last.from_rule;
  FERRY_TRACE(Coll, "allreduce of %zu bytes on %d ranks%s: %s (%s; %.1f us predicted on %s)", bytes, nranks,
              any_in_place ? " in place" : "", algorithm_info(choice).name, from_rule ? "FERRY_TUNE" : "model",
              predict_allreduce_us(choice, bytes, nranks, machine), machine.name);
  return choice;
}

void count_allreduce_run(AllreduceAlgorithm algorithm) {
  if (trace_enabled()) note_traced_algorithm(algorithm_info(algorithm).name);
  if (params().stats) g_choices[static_cast<int>(algorithm)].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t allreduce_choice_count(AllreduceAlgorithm algorithm) {
  return g_choices[static_cast<int>(algorithm)].load(std::memory_order_relaxed);
}

const BcastAlgorithmInfo& bcast_algorithm_info(BcastAlgorithm algorithm) {
  return kBcastAlgorithms[static_cast<int>(algorithm)];
}

BcastAlgorithm tuned_bcast(const std::vector<TuneRule>& rules, std::size_t bytes) {
  for (const TuneRule& rule : rules)
    if (rule.collective == TunedCollective::kBcast && bytes >= rule.min_bytes && bytes < rule.max_bytes)
      return rule.bcast;
  return BcastAlgorithm::kCount;
}

BcastAlgorithm tuned_bcast(std::size_t bytes) {
  const BcastAlgorithm choice = tuned_bcast(tune_rules(), bytes);
  if (choice != BcastAlgorithm::kCount)
    FERRY_TRACE(Coll, "bcast of %zu bytes: %s (FERRY_TUNE)", bytes, bcast_algorithm_info(choice).name);
  return choice;
}

void count_bcast_run(BcastAlgorithm algorithm) {
  if (trace_enabled()) note_traced_algorithm(bcast_algorithm_info(algorithm).name);
  if (params().stats) g_bcast_choices[static_cast<int>(algorithm)].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t bcast_choice_count(BcastAlgorithm algorithm) {
  return g_bcast_choices[static_cast<int>(algorithm)].load(std::memory_order_relaxed);
}

}  // namespace ferry
