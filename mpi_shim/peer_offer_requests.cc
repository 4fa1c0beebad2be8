#include "mpi_shim/peer_offer_requests.h"

#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/common/log.h"
#include "mpi_shim/peer_claims.h"
#include "mpi_shim/requests.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::peer {

namespace {

struct OfferTable {
  std::mutex mutex;
  // Shared with the completion that finishes each one: once the real MPI has
  // freed its handle, another thread's new offer may take the handle's entry.
  std::unordered_map<MPI_Request, std::shared_ptr<PendingOffer>> offers;
  std::atomic<int> live_offers{0};
  std::unordered_map<MPI_Request, std::unique_ptr<PersistentSend>> persistent_sends;
  std::atomic<int> live_persistent_sends{0};
};

OfferTable& table() {
  static auto* t = new OfferTable;
  return *t;
}

PersistentSend* find_persistent_send(MPI_Request request) {
  OfferTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.persistent_sends.find(request);
  return it == t.persistent_sends.end() ? nullptr : it->second.get();
}

std::unique_ptr<PersistentSend> take_persistent_send(MPI_Request request) {
  OfferTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.persistent_sends.find(request);
  if (it == t.persistent_sends.end()) return nullptr;
  std::unique_ptr<PersistentSend> entry = std::move(it->second);
  t.persistent_sends.erase(it);
  t.live_persistent_sends.fetch_sub(1, std::memory_order_release);
  return entry;
}

std::shared_ptr<PendingOffer> find_offer(MPI_Request request) {
  OfferTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.offers.find(request);
  return it == t.offers.end() ? nullptr : it->second;
}

// An entry left by an offer whose request the real MPI completed and
// another thread's finish_offer has not yet taken is replaced (and no
// longer counted).
std::shared_ptr<PendingOffer> add_offer(MPI_Request request, const Offer& offer, bool persistent) {
  OfferTable& t = table();
  auto n = std::make_shared<PendingOffer>(PendingOffer{offer});
  n->persistent = persistent;
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.offers.insert_or_assign(request, n).second) t.live_offers.fetch_add(1, std::memory_order_release);
  return n;
}

// After the real MPI completed the request of offer n: gives back what it
// held, once; its entry leaves the table unless a new offer took it.
int finish_offer(MPI_Request request, PendingOffer& n) {
  OfferTable& t = table();
  if (n.released) return MPI_SUCCESS;
  n.released = true;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.offers.find(request);
    if (it != t.offers.end() && it->second.get() == &n) {
      t.offers.erase(it);
      t.live_offers.fetch_sub(1, std::memory_order_release);
    }
  }
  // Its request completed, so the word came: from the receive once it had
  // copied the buffer, unless this rank ended the offer itself.
  if (n.persistent && n.slot_lost) {
    if (PersistentSend* p = find_persistent_send(request)) p->held.slot = -1;
  }
  return release_offer(n, counters().straight_nonblocking);
}

// finish_offer of a persistent send's current offer (its handle stays the
// application's, so the table finds it).
int finish_persistent_offer(MPI_Request request) {
  const std::shared_ptr<PendingOffer> n = find_offer(request);
  return n ? finish_offer(request, *n) : MPI_SUCCESS;
}

// MPI_Start of a persistent send: its offer, before the real MPI starts the
// request (the receive of the word that ends it).
int start_persistent_send(MPI_Request request) {
  PersistentSend* p = find_persistent_send(request);
  if (!p) return MPI_SUCCESS;
  if (p->held.slot < 0) {
    // Its word was lost to a claim never finished: another one.
    std::uint64_t ticket = 0;
    p->held.slot = take_claim(&ticket);
    if (p->held.slot < 0) {
      FERRY_WARN(Shim, "MPI_Start of a persistent device send: every claim word is in use");
      return raise_error(p->comm, MPI_ERR_OTHER);
    }
  }
  Offer offer;
  bool handled = false;
  const int rc = offer_start(p->id, p->mode, p->e, p->dest, p->tag, p->comm, nullptr, &offer, &handled, &p->held);
  if (!handled) return raise_error(p->comm, MPI_ERR_OTHER);
  add_offer(request, offer, true);
  return rc;
}

}  // namespace

void track_offer(MPI_Request request, const Offer& offer) {
  std::shared_ptr<PendingOffer> n = add_offer(request, offer, false);
  track_request(request, [request, n] { return finish_offer(request, *n); });
}

void track_persistent_offers(MPI_Request request, const PersistentSend& send) {
  OfferTable& t = table();
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    t.persistent_sends[request] = std::make_unique<PersistentSend>(send);
    t.live_persistent_sends.fetch_add(1, std::memory_order_release);
  }
  track_persistent_send(
      request, [request] { return start_persistent_send(request); },
      [request] { return finish_persistent_offer(request); });
}

bool offers_live() { return table().live_offers.load(std::memory_order_acquire) > 0; }

bool any_persistent_send(int count, const MPI_Request* requests) {
  if (table().live_persistent_sends.load(std::memory_order_acquire) == 0 || !requests) return false;
  for (int i = 0; i < count; ++i)
    if (find_persistent_send(requests[i])) return true;
  return false;
}

bool is_offer(MPI_Request request) { return offers_live() && find_offer(request); }

bool any_offer(int count, const MPI_Request* requests) {
  if (!offers_live() || !requests) return false;
  for (int i = 0; i < count; ++i)
    if (find_offer(requests[i])) return true;
  return false;
}

void settle_offers(int count, const MPI_Request* requests, bool wait) {
  if (!offers_live() || !requests) return;
  std::vector<std::shared_ptr<PendingOffer>> offers;
  for (int i = 0; i < count; ++i)
    if (std::shared_ptr<PendingOffer> n = find_offer(requests[i])) offers.push_back(std::move(n));
  for (int polls = 0; !offers.empty(); ++polls) {
    bool all_ended = true;
    for (const std::shared_ptr<PendingOffer>& n : offers) {
      look_at(*n, false);
      all_ended = all_ended && n->ended;
    }
    if (all_ended || !wait) return;
    claim_what_arrived();
    if (polls > 1024) std::this_thread::yield();
  }
}

int free_offer(MPI_Request request) {
  const std::shared_ptr<PendingOffer> n = offers_live() ? find_offer(request) : nullptr;
  int rc = MPI_SUCCESS;
  if (n) {
    for (look_at(*n, true); !n->ended; look_at(*n, true)) std::this_thread::yield();
    rc = finish_offer(request, *n);
  }
  const std::unique_ptr<PersistentSend> persistent = take_persistent_send(request);
  if (persistent && persistent->held.slot >= 0) give_claim(persistent->held.slot);
  return rc;
}

}  // namespace ferry::shim::peer
