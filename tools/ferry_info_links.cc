// ferry-info --self-test's links check, built with the PMIx bootstrap only:
// under mpirun every ordered pair of ranks copies over the transport the
// engine chose between them, the bytes are checked and rank 0 reports each
// link with its small-copy latency and bandwidth.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/bootstrap/pmix_bootstrap.h"
#include "engine/collectives/communicator.h"
#include "engine/gpu/gpu.h"
#include "tools/ferry_info_self_test.h"

namespace ferry_info {
namespace {

// One ordered pair's link as the receiving rank measured it.
struct LinkResult {
  std::int32_t destination;
  std::int32_t source;
  std::int32_t transport;  // 0 none, 1 p2p, 2 shm
  std::int32_t data_ok;
  double latency_us;  // one small copy from the source, completed
  double gbps;        // the best of several whole-buffer copies
};

std::uint8_t link_pattern(int rank, std::size_t i) { return static_cast<std::uint8_t>(rank * 97 + i * 13 + (i >> 12)); }

// The device a rank tests: its rank on the node, as the launcher tells it,
// modulo the devices (what applications usually pick), so two ranks on a
// two-GPU node test the link between the GPUs, not one GPU's memory.
int device_of_local_rank(ferry::gpu::Backend* backend, int rank) {
  int local = rank;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"}) {
    if (const char* value = std::getenv(name)) {
      local = std::atoi(value);
      break;
    }
  }
  const int devices = backend->device_count();
  return devices > 0 ? local % devices : 0;
}

}  // namespace

void check_links(SelfTest& test, ferry::gpu::Backend* backend) {
  const char* check = "links";
  if (!std::getenv("PMIX_RANK"))
    return test.skip(check, "not started by a PMIx launcher: run `mpirun -np N ferry-info --self-test` to test "
                            "the links between the ranks of a node");
  std::unique_ptr<ferry::Bootstrap> bootstrap;
  std::string why;
  if (!ok(ferry::make_pmix_bootstrap(&bootstrap, &why))) return test.fail(check, "PMIx bootstrap: " + why);
  const int n = bootstrap->size(), me = bootstrap->rank();
  if (n < 2) return test.skip(check, "one rank: nothing to link");
  if (!backend) return test.fail(check, "no device backend");
  std::unique_ptr<ferry::Communicator> comm;
  if (!ok(ferry::Communicator::create(std::move(bootstrap), &comm))) return test.fail(check, "engine set-up failed");

  const std::size_t bytes = backend->physical_devices() ? (256u << 20) : (16u << 20);
  std::vector<std::uint8_t> host(bytes);
  for (std::size_t i = 0; i < bytes; ++i) host[i] = link_pattern(me, i);
  void* mine = nullptr;
  void* landing = nullptr;
  ferry::gpu::Stream stream = nullptr;
  ferry::SharedSegments* shm = comm->shm();
  const std::size_t shm_bytes = shm ? std::min(bytes, shm->bytes()) : 0;
  const std::int32_t device = device_of_local_rank(backend, me);
  std::vector<std::int32_t> devices(n);
  // A failed exchange fails the check once every step has been taken, so
  // that no rank leaves the others waiting in a later one.
  bool exchanged = ok(comm->bootstrap().allgather(&device, devices.data(), sizeof(device)));
  std::int32_t ready = ok(backend->set_device(device)) && ok(backend->device_alloc(bytes, &mine)) &&
                       ok(backend->device_alloc(bytes, &landing)) &&
                       ok(backend->copy(mine, host.data(), bytes)) && ok(backend->stream_create(&stream));
  if (shm) std::memcpy(shm->segment(me), host.data(), shm_bytes);
  ferry::ExportedBuffer exported{};
  if (ready && comm->all_peers_mapped()) ready = ok(comm->peer_memory().export_buffer(mine, &exported));
  std::vector<ferry::ExportedBuffer> everyone(n);
  std::vector<std::int32_t> all_ready(n);
  exchanged = ok(comm->bootstrap().allgather(&exported, everyone.data(), sizeof(exported))) && exchanged;
  exchanged = ok(comm->bootstrap().allgather(&ready, all_ready.data(), sizeof(ready))) && exchanged;
  const bool usable =
      exchanged && std::all_of(all_ready.begin(), all_ready.end(), [](std::int32_t r) { return r != 0; });

  std::vector<LinkResult> results(static_cast<std::size_t>(n) * n);
  for (int destination = 0; destination < n; ++destination) {
    for (int source = 0; source < n; ++source) {
      if (source == destination) continue;
      exchanged = ok(comm->bootstrap().barrier()) && exchanged;  // one link at a time: nothing else on the wire
      if (me != destination || !usable) continue;
      LinkResult& r = results[static_cast<std::size_t>(destination) * n + source];
      r = LinkResult{destination, source, 0, 0, 0, 0};
      const void* from = nullptr;
      std::size_t length = bytes;
      if (comm->all_peers_mapped()) {
        void* mapped = nullptr;
        if (ok(comm->peer_memory().import_buffer(everyone[source], &mapped))) from = mapped;
        r.transport = 1;
      } else if (shm) {
        from = shm->segment(source);
        length = shm_bytes;
        r.transport = 2;
      }
      if (!from) continue;
      using Clock = std::chrono::steady_clock;
      std::vector<double> small;
      bool fine = true;
      for (int i = 0; i < 50 && fine; ++i) {
        const auto start = Clock::now();
        fine = ok(backend->copy_async(landing, from, 8, stream)) && ok(backend->stream_synchronize(stream));
        small.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      double best = 1e30;
      for (int i = 0; i < 5 && fine; ++i) {
        const auto start = Clock::now();
        fine = ok(backend->copy_async(landing, from, length, stream)) && ok(backend->stream_synchronize(stream));
        best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
      }
      std::vector<std::uint8_t> got(length);
      fine = fine && ok(backend->copy(got.data(), landing, length));
      bool same = fine;
      for (std::size_t i = 0; same && i < length; ++i) same = got[i] == link_pattern(source, i);
      std::sort(small.begin(), small.end());
      r.data_ok = same;
      r.latency_us = small.empty() ? 0 : small[small.size() / 2];
      r.gbps = fine ? length / best / 1e9 : 0;
    }
  }
  std::vector<LinkResult> gathered(results.size() * n);
  exchanged = ok(comm->bootstrap().allgather(results.data(), gathered.data(), results.size() * sizeof(LinkResult))) &&
              exchanged;
  FERRY_LOG_IF_FAILED(backend->stream_destroy(stream));
  FERRY_LOG_IF_FAILED(backend->device_free(mine));
  FERRY_LOG_IF_FAILED(backend->device_free(landing));
  if (!exchanged) return test.fail(check, "the exchange between the ranks over the PMIx bootstrap failed");
  if (!usable) return test.fail(check, "a rank could not set up its test buffer");
  if (me != 0) return;
  for (int destination = 0; destination < n; ++destination)
    for (int source = 0; source < n; ++source) {
      if (source == destination) continue;
      const LinkResult& r = gathered[static_cast<std::size_t>(destination) * n * n + destination * n + source];
      const std::string pair = "rank " + std::to_string(source) + " (device " + std::to_string(devices[source]) +
                               ") -> rank " + std::to_string(destination) + " (device " +
                               std::to_string(devices[destination]) + ")";
      if (r.transport == 0) {
        test.fail(check, pair + ": no engine transport between them (device buffers would be staged)");
        continue;
      }
      char numbers[160];
      std::snprintf(numbers, sizeof(numbers), "%s, 8 B copy %.1f us, %.1f GB/s over %zu MiB",
                    r.transport == 1 ? "p2p (peer memory mapped)" : "shm (host shared memory)", r.latency_us,
                    r.gbps, (r.transport == 1 ? bytes : shm_bytes) >> 20);
      if (r.data_ok)
        test.pass(check, pair + ": " + numbers);
      else
        test.fail(check, pair + ": the bytes that arrived are wrong (" + numbers + ")");
    }
}

}  // namespace ferry_info
