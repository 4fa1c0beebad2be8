#include "engine/collectives/call.h"

#include <utility>

#include "engine/common/log.h"

namespace ferry::coll {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "MPI_Allreduce";
    case CollectiveKind::kBcast: return "MPI_Bcast";
    case CollectiveKind::kAlltoallv: return "MPI_Alltoallv";
  }
  return "?";
}

Placement placement_of(const void* buffer) {
  const gpu::PointerInfo info = gpu::classify(buffer);
  if (info.kind != gpu::MemoryKind::kDevice) return {};
  return {gpu::owner_backend(info), info.device, info};
}

PeerReach reach_of(Communicator& comm) {
  if (comm.all_peers_mapped()) return {true, true, nullptr};
  return {comm.shm() != nullptr, false, comm.shm()};
}

PhaseTotals g_phase_totals[static_cast<int>(EngineCollective::kCount)];
thread_local bool t_ran_on_worker = false;

const char* engine_phase_name(EnginePhase phase) {
  switch (phase) {
    case EnginePhase::kSetup: return "set-up";
    case EnginePhase::kHandshake: return "handshake";
    case EnginePhase::kRun: return "device";
    case EnginePhase::kFinish: return "finish";
    case EnginePhase::kCount: break;
  }
  return "?";
}

thread_local PhaseClock* PhaseClock::t_open_clock = nullptr;

void PhaseClock::note_algorithm(const char* name) {
  if (t_open_clock) t_open_clock->algorithm_ = name;
}

void PhaseClock::trace_call() {
  std::string args = std::string("\"worker\":") + (t_ran_on_worker ? "true" : "false");
  if (algorithm_) args += std::string(",\"algorithm\":\"") + algorithm_ + "\"";
  if (carried_bytes_ > 0)
    args += std::string(",\"transport\":\"") + transport_kind_label(carried_kind_) + "\",\"bytes\":" +
            std::to_string(carried_bytes_);
  const std::int64_t end_us = trace_now_us();
  trace_span((std::string("engine ") + engine_collective_name(which_)).c_str(), "engine", start_us_, end_us, args);
  gpu_span_.emit((std::string("gpu ") + engine_collective_name(which_)).c_str(), start_us_, end_us, args);
}

Status agree(Communicator& comm, Handshake& mine, std::vector<Handshake>* all, bool* everyone, PhaseClock& clock) {
  clock.mark(EnginePhase::kSetup);
  all->resize(comm.size());
  FERRY_CHECK(comm.bootstrap().allgather(&mine, all->data(), sizeof(Handshake)));
  *everyone = true;
  std::vector<CallSignature> signatures;
  signatures.reserve(all->size());
  for (const Handshake& h : *all) {
    if (h.kind != mine.kind) {
      FERRY_WARN(Coll, "ranks entered different collectives on one communicator");
      return Status::kInvalidArgument;
    }
    *everyone = *everyone && h.eligible;
    signatures.push_back(h.signature);
  }
  FERRY_CHECK(compare_signatures(signatures, collective_name(mine.kind)));
  clock.mark(EnginePhase::kHandshake);
  return Status::kOk;
}

Status finish_together(Communicator& comm, Status local, PhaseClock& clock) {
  clock.mark(EnginePhase::kRun);
  std::vector<std::int32_t> statuses(comm.size());
  const std::int32_t mine = static_cast<std::int32_t>(local);
  FERRY_CHECK(comm.bootstrap().allgather(&mine, statuses.data(), sizeof(mine)));
  for (int r = 0; r < comm.size(); ++r) {
    if (statuses[r] != 0) {
      if (r != comm.rank())
        FERRY_WARN(Coll, "rank %d failed its part of the collective: %s", r,
                   status_name(static_cast<Status>(statuses[r])));
      return local != Status::kOk ? local : Status::kGpuError;
    }
  }
  clock.mark(EnginePhase::kFinish);
  clock.count_call();
  return Status::kOk;
}

Status finish_alone(Status local, PhaseClock& clock) {
  clock.mark(EnginePhase::kRun);
  if (ok(local)) clock.count_call();
  return local;
}

Status map_all(Communicator& comm, const std::vector<Handshake>& all, const void* input, void* output,
               bool need_outputs, MappedBuffers* mapped) {
  std::vector<ExportedBuffer> wanted;
  std::vector<std::pair<int, bool>> slots;  // (rank, is output) of each wanted buffer
  mapped->inputs.assign(comm.size(), nullptr);
  mapped->outputs.assign(comm.size(), nullptr);
  for (int r = 0; r < comm.size(); ++r) {
    mapped->inputs[r] = input;
    mapped->outputs[r] = output;
    if (r == comm.rank()) continue;
    wanted.push_back(all[r].first);
    slots.push_back({r, false});
    if (need_outputs) {
      wanted.push_back(all[r].second);
      slots.push_back({r, true});
    }
  }
  std::vector<void*> pointers(wanted.size());
  FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), pointers.data()));
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].second) {
      mapped->outputs[slots[i].first] = pointers[i];
    } else {
      mapped->inputs[slots[i].first] = pointers[i];
    }
  }
  return Status::kOk;
}

Worker* worker_for_call(Communicator& comm, const Placement& where, std::size_t bytes) {
  if (bytes > std::min(worker_max_bytes(), kWorkerOneBlockBytes)) return nullptr;
  return comm.worker_for(where.backend, where.device);
}

Status list_direct_pointers(Communicator& comm, const Placement& where, gpu::Stream stream,
                            const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                            DirectReduceArgs* args) {
  return ferry::list_direct_pointers(where.backend, comm.resources(), where.device, stream, inputs, outputs, args);
}

Status run_on_worker(Worker& worker, std::size_t bytes, WorkItem item) {
  item.blocks = 1;
  t_ran_on_worker = true;
  FERRY_TRACE(Coll, "%s of %zu bytes on the engine worker (%d blocks)",
              item.kind == WorkKind::kCopies ? "copies" : "direct reduce", bytes, item.blocks);
  return worker.run(item);
}

bool all_chose(const std::vector<Handshake>& all, std::uint16_t algorithm) {
  for (const Handshake& h : all)
    if (h.algorithm != algorithm) return false;
  return true;
}

}  // namespace ferry::coll

void ferry::note_traced_algorithm(const char* name) { coll::PhaseClock::note_algorithm(name); }
