// GPU kernels of the collectives. The direct reduce reads its inputs from
// mapped peer memory over NVLink, reduces, and stores the result into one or
// more outputs (local or mapped): one pass, no staging buffers.
#include "engine/core/executor.h"
#include "engine/core/pack_device.cuh"
#include "engine/core/reduce_common.h"
#include "engine/gpu/gpu_runtime.h"

namespace ferry {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread and rank

// Input r and output k: inline, or with a table (more than kInlineRanks of
// either) from the table. Kernels without a table index only the inline
// arrays: choosing between them and the table at run time made every call
// slower (bench/RESULTS.md).
template <bool kTable>
__device__ __forceinline__ const void* input_of(const DirectReduceArgs& a, int r) {
  if constexpr (kTable) {
    return r < kInlineRanks ? a.inputs[r] : a.table[r];
  } else {
    return a.inputs[r];
  }
}
template <bool kTable>
__device__ __forceinline__ void* output_of(const DirectReduceArgs& a, int k) {
  if constexpr (kTable) {
    return k < kInlineRanks ? a.outputs[k] : const_cast<void*>(a.table[a.ninputs + k]);
  } else {
    return a.outputs[k];
  }
}

template <typename T, ReduceOp Op, bool kTable>
__global__ void __launch_bounds__(kThreads) direct_reduce_packed(DirectReduceArgs args, std::size_t packs) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads * kUnroll;
  for (std::size_t base = static_cast<std::size_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x; base < packs;
       base += stride) {
    Pack<T> acc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t p = base + u * kThreads;
      if (p < packs) acc[u] = static_cast<const Pack<T>*>(input_of<kTable>(args, 0))[p];
    }
    for (int r = 1; r < args.ninputs; ++r) {
      Pack<T> in[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::size_t p = base + u * kThreads;
        if (p < packs) in[u] = static_cast<const Pack<T>*>(input_of<kTable>(args, r))[p];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc[u] = reduce_pack<T, Op>(acc[u], in[u]);
    }
    for (int k = 0; k < args.noutputs; ++k) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::size_t p = base + u * kThreads;
        if (p < packs) static_cast<Pack<T>*>(output_of<kTable>(args, k))[p] = acc[u];
      }
    }
  }
}

// Elements from first on, one at a time: the tail after the packs, or all of
// it when a buffer is not 16-byte aligned.
template <typename T, ReduceOp Op, bool kTable>
__global__ void __launch_bounds__(kThreads) direct_reduce_scalar(DirectReduceArgs args, std::size_t first) {
  for (std::size_t i = first + static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < args.count;
       i += static_cast<std::size_t>(gridDim.x) * kThreads) {
    T acc = static_cast<const T*>(input_of<kTable>(args, 0))[i];
    for (int r = 1; r < args.ninputs; ++r)
      acc = reduce<T, Op>(acc, static_cast<const T*>(input_of<kTable>(args, r))[i]);
    for (int k = 0; k < args.noutputs; ++k) static_cast<T*>(output_of<kTable>(args, k))[i] = acc;
  }
}

__global__ void __launch_bounds__(kThreads) copy_list(CopyListArgs args) {
  copy_list_part<kThreads, kUnroll>(args, blockIdx.x, gridDim.x);
}

int grid_limit() {
  static const int limit = [] {
    int device = 0, sms = 0;
    (void)cudaGetDevice(&device);
    (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return sms > 0 ? sms * 4 : 512;
  }();
  return limit;
}

unsigned blocks_for(std::size_t work_items) {
  const std::size_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > static_cast<std::size_t>(grid_limit()) ? grid_limit() : blocks));
}

struct CudaDirectReduce {
  const DirectReduceArgs& args;
  cudaStream_t stream;
  cudaError_t error = cudaSuccess;

  template <typename T, ReduceOp Op>
  void run() {
    // Past kInlineRanks the table, in device memory, answers for itself.
    bool aligned = !args.table || args.table_aligned;
    for (int r = 0; r < args.ninputs && r < kInlineRanks; ++r)
      aligned = aligned && reinterpret_cast<std::uintptr_t>(args.inputs[r]) % 16 == 0;
    for (int k = 0; k < args.noutputs && k < kInlineRanks; ++k)
      aligned = aligned && reinterpret_cast<std::uintptr_t>(args.outputs[k]) % 16 == 0;
    const std::size_t packs = aligned ? args.count / Pack<T>::kCount : 0;
    const bool table = args.table != nullptr;
    if (packs > 0) {
      const unsigned blocks = blocks_for((packs + kUnroll - 1) / kUnroll);
      if (table) {
        direct_reduce_packed<T, Op, true><<<blocks, kThreads, 0, stream>>>(args, packs);
      } else {
        direct_reduce_packed<T, Op, false><<<blocks, kThreads, 0, stream>>>(args, packs);
      }
    }
    const std::size_t first = packs * Pack<T>::kCount;
    if (first < args.count) {
      const unsigned blocks = blocks_for(args.count - first);
      if (table) {
        direct_reduce_scalar<T, Op, true><<<blocks, kThreads, 0, stream>>>(args, first);
      } else {
        direct_reduce_scalar<T, Op, false><<<blocks, kThreads, 0, stream>>>(args, first);
      }
    }
    error = cudaGetLastError();
  }
};

}  // namespace

Status gpu_launch_direct_reduce(const DirectReduceArgs& args, gpu::Stream stream) {
  CudaDirectReduce visitor{args, reinterpret_cast<cudaStream_t>(stream)};
  if (!dispatch_reduction(args.type, args.op, visitor)) return Status::kUnsupported;
  if (visitor.error != cudaSuccess) {
    FERRY_WARN(Coll, "direct reduce launch failed: %s", cudaGetErrorString(visitor.error));
    return Status::kGpuError;
  }
  return Status::kOk;
}

Status gpu_launch_copies(const CopyListArgs& args, gpu::Stream stream) {
  std::uint64_t largest = 0;
  for (int k = 0; k < args.count; ++k) largest = largest > args.bytes[k] ? largest : args.bytes[k];
  // Enough threads for 4-byte accesses, the narrowest but bytes.
  const unsigned blocks = blocks_for((largest / 4 + kUnroll - 1) / kUnroll);
  copy_list<<<blocks, kThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(args);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    FERRY_WARN(Coll, "copy list launch failed: %s", cudaGetErrorString(error));
    return Status::kGpuError;
  }
  return Status::kOk;
}

}  // namespace ferry
