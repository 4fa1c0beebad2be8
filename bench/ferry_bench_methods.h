// The columns of ferry-bench's table: ways to run one case on the same
// device buffers. Ferry's and staging by hand are here; NCCL's, which needs
// the CUDA toolkit, is in ferry_bench_nccl_method.h.
#pragma once

#include <array>
#include <optional>

#include "ferry_bench_cuda.h"
#include "ferry_bench_memory.h"
#include "ferry_bench_ops.h"

namespace ferry_bench {

enum MethodId { kFerry, kNccl, kStaged, kHost, kMethodCount };
constexpr std::array<const char*, kMethodCount> kMethodTitles{"ferry", "nccl", "staged (by hand)",
                                                              "host mpi (no copies)"};

class Method {
 public:
  virtual ~Method() = default;
  // Runs the operation on the device buffers. An MPI call has completed on
  // return; NCCL work is only queued.
  virtual void start(const Case& c) = 0;
  // start() as the check runs it (the result must reach the device buffers).
  virtual void start_checked(const Case& c) { start(c); }
  // Waits for what start() queued.
  virtual void finish() {}
  // The stream on which CUDA events time start(); none where only the host
  // clock means anything.
  virtual std::optional<cuda::Stream> event_stream() const { return std::nullopt; }
};

// The plain MPI call on device buffers: Ferry intercepts it.
class FerryMethod final : public Method {
 public:
  FerryMethod(Buffers device, bool gpu_events) : device_(device), gpu_events_(gpu_events) {}
  void start(const Case& c) override;
  std::optional<cuda::Stream> event_stream() const override;

 private:
  Buffers device_;
  bool gpu_events_;
};

// Host staging as written by hand: Ferry sees only host buffers and passes
// the MPI call through. Not timed with events: it is host-driven throughout.
class StagedMethod final : public Method {
 public:
  StagedMethod(Buffers device, Buffers host, CopyFunction copy, int rank)
      : device_(device), host_(host), copy_(copy), rank_(rank) {}
  void start(const Case& c) override;

 private:
  Buffers device_;
  Buffers host_;
  CopyFunction copy_;
  int rank_;
};

// The same MPI call on host buffers, with no copies: what the real MPI does
// with host memory (across nodes, the raw path under Ferry's net transport).
// Checked with staging's copies around it; timed without them.
class HostMethod final : public Method {
 public:
  HostMethod(Buffers device, Buffers host, CopyFunction copy, int rank)
      : staged_(device, host, copy, rank), host_(host) {}
  void start(const Case& c) override;
  void start_checked(const Case& c) override { staged_.start(c); }

 private:
  StagedMethod staged_;
  Buffers host_;
};

}  // namespace ferry_bench
