#include "mpi_shim/peer_claims.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/common/process_memory.h"
#include "mpi_shim/peer_comms.h"

namespace ferry::shim::peer {

namespace {

constexpr std::size_t kClaimsBytes = kClaimSlots * (sizeof(std::uint64_t) + sizeof(PushRequest));

// This process's claims segment and its free words, and the peers'
// segments mapped here, by (process, nonce).
struct Claims {
  std::mutex mutex;
  std::atomic<std::uint64_t>* words = nullptr;
  PushRequest* push_requests = nullptr;  // after the words
  std::uint64_t tickets = 0;
  bool failed = false;
  int fd = -1;  // its memfd
  std::uint64_t nonce = 0;
  std::vector<int> free;
  std::map<std::pair<int, std::uint64_t>, std::atomic<std::uint64_t>*> peers;
};

Claims& claims() {
  static auto* c = new Claims;
  return *c;
}

std::string claims_segment_name(std::uint64_t nonce) { return "ferry-claims-" + std::to_string(nonce); }

// The claims segment behind fd, mapped; nullptr if it cannot be.
std::atomic<std::uint64_t>* map_claims(int fd) {
  if (fd < 0 || process_memory_bytes(fd) < kClaimsBytes) return nullptr;
  void* view = mmap(nullptr, kClaimsBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return view == MAP_FAILED ? nullptr : static_cast<std::atomic<std::uint64_t>*>(view);
}

}  // namespace

int take_claim(std::uint64_t* ticket) {
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.words && !c.failed) {
    c.nonce = mix(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()),
                  static_cast<std::uint64_t>(world_rank()));
    c.fd = create_process_memory(claims_segment_name(c.nonce), kClaimsBytes, true);
    c.words = map_claims(c.fd);
    c.failed = c.words == nullptr;
    if (c.words) c.push_requests = reinterpret_cast<PushRequest*>(c.words + kClaimSlots);
    for (int slot = kClaimSlots - 1; c.words && slot >= 0; --slot) c.free.push_back(slot);
  }
  if (c.free.empty()) return -1;
  *ticket = ++c.tickets;
  const int slot = c.free.back();
  c.free.pop_back();
  return slot;
}

void give_claim(int slot) {
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.free.push_back(slot);
}

std::uint64_t next_ticket() {
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  return ++c.tickets;
}

std::atomic<std::uint64_t>& own_claim(int slot) { return claims().words[slot]; }

const PushRequest& own_push_request(int slot) { return claims().push_requests[slot]; }

std::uint64_t claims_nonce() { return claims().nonce; }

int claims_fd() { return claims().fd; }

std::atomic<std::uint64_t>* peer_claim(const Envelope& env) {
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto& words = c.peers[{env.claim_pid, env.claim_nonce}];
  if (!words) {
    const int fd = open_process_memory(env.claim_pid, env.segment_fd, claims_segment_name(env.claim_nonce), O_RDWR);
    words = map_claims(fd);
    if (fd >= 0) close(fd);
  }
  return words && env.claim_slot >= 0 && env.claim_slot < kClaimSlots ? words + env.claim_slot : nullptr;
}

PushRequest* peer_push_request(const Envelope& env) {
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.peers.find({env.claim_pid, env.claim_nonce});
  if (it == c.peers.end() || !it->second) return nullptr;
  return reinterpret_cast<PushRequest*>(it->second + kClaimSlots) + env.claim_slot;
}

void unmap_claims() {
  Claims& c = claims();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [owner, words] : c.peers)
    if (words) munmap(words, kClaimsBytes);
  c.peers.clear();
  if (c.words) munmap(c.words, kClaimsBytes);
  c.words = nullptr;
  if (c.fd >= 0) close(c.fd);
  c.fd = -1;
}

}  // namespace ferry::shim::peer
