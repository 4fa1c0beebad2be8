#include "mpi_shim/peer_comms.h"

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "mpi_shim/peer_pt2pt.h"

namespace ferry::shim::peer {

namespace {

struct CommEntry {
  std::uint64_t id = 0;
  std::vector<int> world;     // by rank in the communicator
  std::vector<char> on_host;  // another process of this machine
  std::vector<char> remote;   // a process of another machine
  bool any_on_host = false;
  bool any_remote = false;
  std::uint64_t constructions = 0;
  std::map<std::pair<std::uint64_t, int>, std::uint64_t> group_constructions;  // (group, tag)
};

struct Comms {
  std::mutex mutex;
  std::unordered_map<MPI_Comm, CommEntry> entries;
  // Changes whenever entries does, so a thread may keep its last answer.
  std::atomic<std::uint64_t> generation{0};
  std::vector<std::uint64_t> host_of;  // by world rank
  int world_rank = 0;
  bool reach_remote = false;
};

Comms& comms() {
  static auto* c = new Comms;
  return *c;
}

// Registers comm under id; call with the mutex held.
void register_locked(Comms& c, MPI_Comm comm, std::uint64_t id) {
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  int size = 0;
  if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || PMPI_Comm_group(comm, &group) != MPI_SUCCESS) return;
  PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
  CommEntry entry;
  entry.id = id;
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  entry.world.assign(size, MPI_UNDEFINED);
  PMPI_Group_translate_ranks(group, size, ranks.data(), world_group, entry.world.data());
  PMPI_Group_free(&group);
  PMPI_Group_free(&world_group);
  entry.on_host.assign(size, 0);
  entry.remote.assign(size, 0);
  for (int r = 0; r < size; ++r) {
    const int w = entry.world[r];
    // A rank outside MPI_COMM_WORLD (a spawned process) is never a peer.
    if (w == MPI_UNDEFINED || w == c.world_rank) continue;
    entry.on_host[r] = c.host_of[w] == c.host_of[c.world_rank];
    entry.remote[r] = c.reach_remote && !entry.on_host[r];
    entry.any_on_host = entry.any_on_host || entry.on_host[r];
    entry.any_remote = entry.any_remote || entry.remote[r];
  }
  c.entries[comm] = std::move(entry);
  c.generation.fetch_add(1, std::memory_order_release);
}

}  // namespace

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void start_comms(int world_rank, std::vector<std::uint64_t> host_of, bool reach_remote) {
  Comms& c = comms();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.world_rank = world_rank;
  c.reach_remote = reach_remote;
  c.host_of = std::move(host_of);
  register_locked(c, MPI_COMM_WORLD, mix(0x46657272795f5750ULL, 1));
}

void stop_comms() {
  Comms& c = comms();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.entries.clear();
}

int world_rank() { return comms().world_rank; }

bool peer_rank(MPI_Comm comm, int rank, PeerRank* out) {
  Comms& c = comms();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.entries.find(comm);
  if (it == c.entries.end() || rank < 0 || rank >= static_cast<int>(it->second.world.size())) return false;
  const CommEntry& entry = it->second;
  if (!entry.on_host[rank] && !entry.remote[rank]) return false;
  *out = PeerRank{entry.id, entry.world[rank], entry.remote[rank] != 0};
  return true;
}

void derived(MPI_Comm parent, MPI_Comm child, std::uint64_t salt) {
  if (!active()) return;
  Comms& c = comms();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.entries.find(parent);
  if (it == c.entries.end()) return;
  // Every member of parent counts the call, including those left out of it.
  const std::uint64_t id = mix(mix(it->second.id, ++it->second.constructions), salt);
  int inter = 0;
  if (child == MPI_COMM_NULL || PMPI_Comm_test_inter(child, &inter) != MPI_SUCCESS || inter) return;
  register_locked(c, child, id);
}

void derived_from_group(MPI_Comm parent, MPI_Comm child, int tag) {
  if (!active() || child == MPI_COMM_NULL) return;
  Comms& c = comms();
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  int size = 0;
  PMPI_Comm_group(child, &group);
  PMPI_Group_size(group, &size);
  PMPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(size), world(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  PMPI_Group_translate_ranks(group, size, ranks.data(), world_group, world.data());
  PMPI_Group_free(&group);
  PMPI_Group_free(&world_group);
  std::uint64_t members = 0x67726f7570ULL;
  for (int w : world) members = mix(members, static_cast<std::uint64_t>(w));
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.entries.find(parent);
  if (it == c.entries.end()) return;
  // Only the group's members take part, so they count among themselves.
  const std::uint64_t n = ++it->second.group_constructions[{members, tag}];
  register_locked(c, child, mix(mix(mix(it->second.id, members), static_cast<std::uint64_t>(tag)), n));
}

void forget(MPI_Comm comm) {
  if (!active()) return;
  Comms& c = comms();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.entries.erase(comm);
  c.generation.fetch_add(1, std::memory_order_release);
}

bool checks_receives(MPI_Comm comm) {
  if (!active()) return false;
  Comms& c = comms();
  // Asked on every receive, most often about the communicator asked last.
  struct LastAnswer {
    MPI_Comm comm = MPI_COMM_NULL;
    std::uint64_t generation = ~std::uint64_t{0};
    bool checks = false;
  };
  thread_local LastAnswer last;
  const std::uint64_t generation = c.generation.load(std::memory_order_acquire);
  if (last.comm == comm && last.generation == generation) return last.checks;
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.entries.find(comm);
  last = LastAnswer{comm, generation, it != c.entries.end() && (it->second.any_on_host || it->second.any_remote)};
  return last.checks;
}

}  // namespace ferry::shim::peer
