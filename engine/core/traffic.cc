#include "engine/core/traffic.h"

#include <atomic>

namespace ferry {
namespace {

std::atomic<std::uint64_t> g_bytes[3] = {};

}  // namespace

void count_traffic(TransportKind kind, std::uint64_t bytes) {
  g_bytes[static_cast<int>(kind)].fetch_add(bytes, std::memory_order_relaxed);
}

std::uint64_t traffic_bytes(TransportKind kind) {
  return g_bytes[static_cast<int>(kind)].load(std::memory_order_relaxed);
}

}  // namespace ferry
