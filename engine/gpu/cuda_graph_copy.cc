// Device-to-device copies through a CUDA graph, which CudaBackend's copy()
// and copy_and_wait() try before cudaMemcpy (cuda_backend.cc).
#include <atomic>
#include <chrono>
#include <mutex>

#include "engine/gpu/cuda_backend_internal.h"

namespace ferry::gpu {
namespace {

using cuda_detail::from_cuda;
using cuda_detail::memops_driver;
using cuda_detail::MemOpsDriver;

// Copies between device buffers through a CUDA graph: a copy-engine copy
// whose node takes each call's pointers (or still holds them from a copy
// before), then a stream write of a word in mapped host memory that the
// caller spins on. On an H200 this returns sooner than cudaMemcpy and a
// synchronize (bench/copy-latency, bench/RESULTS.md), and, unlike a copy
// kernel, needs no SM an application kernel may be holding. Launched on the
// caller's stream (copy(): the legacy default stream, where cudaMemcpy's
// copy runs, so it is ordered after the same work). One per device; one copy
// at a time (a busy copier sends the caller the ordinary way).
class GraphCopier {
 public:
  // The copier of the current device, made at first use; nullptr when the
  // driver lacks stream memory operations or making it failed.
  static GraphCopier* current() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
      cudaGetLastError();
      return nullptr;
    }
    static std::mutex made_mutex;
    static GraphCopier* copiers[kMaxDevices] = {};
    static bool failed[kMaxDevices] = {};
    std::lock_guard<std::mutex> lock(made_mutex);
    if (!copiers[device] && !failed[device]) {
      auto* copier = new GraphCopier;
      if (copier->make()) {
        copiers[device] = copier;
      } else {
        delete copier;  // its resources leak: a failure here is rare and once
        failed[device] = true;
        FERRY_INFO(Gpu, "device %d: no copy graph; device copies take cudaMemcpy", device);
      }
    }
    return copiers[device];
  }

  // Copies device memory to device memory and returns once the bytes are in
  // dst (*done), or leaves both untouched (*done false) when the copier is
  // busy or the graph cannot take these pointers: the caller copies another
  // way.
  Status copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, bool* done) {
    *done = false;
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock() || broken_) return Status::kOk;
    Exec* exec = exec_for(dst, src, bytes);
    if (!exec) return Status::kOk;
    __atomic_store_n(done_word_, 0u, __ATOMIC_RELAXED);
    const cudaError_t launched = cudaGraphLaunch(exec->exec, stream);
    if (launched != cudaSuccess) {
      // Nothing queued (e.g. another context is current): copies take
      // cudaMemcpy from now on.
      FERRY_INFO(Gpu, "copy graph: launch failed (%s); device copies take cudaMemcpy", cudaGetErrorString(launched));
      cudaGetLastError();
      broken_ = true;
      return Status::kOk;
    }
    // Spins through the short copies this is for; one still waiting for
    // other work after kSpin is waited for by synchronizing, which spins or
    // blocks as the application chose, and reports errors.
    const auto spin_end = std::chrono::steady_clock::now() + kSpin;
    for (unsigned spins = 1; __atomic_load_n(done_word_, __ATOMIC_ACQUIRE) == 0; ++spins) {
      if (spins % 1024 || std::chrono::steady_clock::now() < spin_end) continue;
      const cudaError_t state = cudaStreamSynchronize(stream);
      if (state != cudaSuccess) {
        broken_ = true;
        return from_cuda(state, "device copy graph");
      }
      break;  // the word is written by then
    }
    copies_.fetch_add(1, std::memory_order_relaxed);
    *done = true;
    return Status::kOk;
  }

  static std::uint64_t copies() { return copies_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kMaxDevices = 64;
  static constexpr std::chrono::microseconds kSpin{50};
  // Instantiations of the graph, each keeping the pointers of its last copy:
  // a copy like one of them launches it as it is, sooner than after an
  // update (bench/copy-latency, bench/RESULTS.md). Loops repeat their copies.
  static constexpr int kExecs = 8;
  struct Exec {
    cudaGraphExec_t exec = nullptr;
    void* dst = nullptr;  // null: holds no copy that can be launched as it is
    const void* src = nullptr;
    std::size_t bytes = 0;
    std::uint64_t used = 0;
  };

  // The instantiation that copies src to dst, updated for it if none does
  // (the least recently used; instantiated at its first use); nullptr when
  // the graph cannot take these pointers.
  Exec* exec_for(void* dst, const void* src, std::size_t bytes) {
    Exec* oldest = &execs_[0];
    for (Exec& e : execs_) {
      if (e.exec && e.dst == dst && e.src == src && e.bytes == bytes) {
        e.used = ++uses_;
        return &e;
      }
      if (e.used < oldest->used) oldest = &e;
    }
    if (!oldest->exec && cudaGraphInstantiate(&oldest->exec, graph_, 0) != cudaSuccess) {
      oldest->exec = nullptr;
      cudaGetLastError();
      return nullptr;
    }
    oldest->dst = nullptr;
    // Refused: pointers of another context than the graph's, and
    // cudaMemcpyDefault (the kind must be named).
    const cudaError_t taken =
        cudaGraphExecMemcpyNodeSetParams1D(oldest->exec, copy_node_, dst, src, bytes, cudaMemcpyDeviceToDevice);
    if (taken != cudaSuccess) {
      FERRY_TRACE(Gpu, "copy graph refused %p -> %p (%zu bytes): %s", src, dst, bytes, cudaGetErrorString(taken));
      cudaGetLastError();
      return nullptr;
    }
    *oldest = Exec{oldest->exec, dst, src, bytes, ++uses_};
    return oldest;
  }

  // Captures the graph on a stream of its own, copying between two words of
  // a scratch allocation; later calls give it their own pointers.
  bool make() {
    const MemOpsDriver* d = memops_driver();
    if (!d) return false;
    // Each step's failure is named once, in the INFO log.
    auto fine = [](cudaError_t error, const char* step) {
      if (error == cudaSuccess) return true;
      FERRY_INFO(Gpu, "copy graph: %s: %s", step, cudaGetErrorString(error));
      cudaGetLastError();
      return false;
    };
    cudaStream_t capture = nullptr;
    cudaGraph_t graph = nullptr;  // kept as graph_
    void* word_on_device = nullptr;
    bool made = fine(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking), "stream") &&
                fine(cudaMalloc(&scratch_, 16), "scratch") &&
                fine(cudaHostAlloc(reinterpret_cast<void**>(&done_word_), sizeof(std::uint32_t),
                                   cudaHostAllocMapped | cudaHostAllocPortable),
                     "word") &&
                fine(cudaHostGetDevicePointer(&word_on_device, done_word_, 0), "word's device address") &&
                fine(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal), "capture");
    if (made) {
      // (Both queued even if the first fails: the capture must be ended.)
      char* words = static_cast<char*>(scratch_);
      const bool copied =
          fine(cudaMemcpyAsync(words + 8, words, 8, cudaMemcpyDeviceToDevice, capture), "copy in capture");
      const bool written = ok(FERRY_CU(d, write_value(reinterpret_cast<CUstream>(capture),
                                                      reinterpret_cast<CUdeviceptr>(word_on_device), 1,
                                                      CU_STREAM_WRITE_VALUE_DEFAULT)));
      made = fine(cudaStreamEndCapture(capture, &graph), "end of capture") && copied && written;
    }
    // The copy is the root: the write after it is captured as a copy node too.
    std::size_t roots = 1;
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    made = made && fine(cudaGraphGetRootNodes(graph, &copy_node_, &roots), "root node") && roots == 1 &&
           fine(cudaGraphNodeGetType(copy_node_, &type), "node type");
    if (made && type != cudaGraphNodeTypeMemcpy) {
      FERRY_INFO(Gpu, "copy graph: the captured copy is not a copy node");
      made = false;
    }
    made = made && copy_node_ && fine(cudaGraphInstantiate(&execs_[0].exec, graph, 0), "instantiate");
    // The graph stays: its node names the copy in every instantiation's update.
    graph_ = graph;
    if (capture) cudaStreamDestroy(capture);
    return made;
  }

  static inline std::atomic<std::uint64_t> copies_{0};
  std::mutex mutex_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphNode_t copy_node_ = nullptr;  // graph_'s, the copy in each Exec
  Exec execs_[kExecs];
  std::uint64_t uses_ = 0;
  void* scratch_ = nullptr;
  std::uint32_t* done_word_ = nullptr;  // mapped host memory
  bool broken_ = false;
};

// (classify: a call's buffers are known already, gpu::CallBuffers.)
bool is_device_memory(const void* ptr) {
  const PointerInfo info = classify(ptr);
  return info.owner == BackendKind::kCuda && info.kind == MemoryKind::kDevice;
}

}  // namespace

std::uint64_t cuda_graph_copies() { return GraphCopier::copies(); }

namespace cuda_detail {

// Device to device through the current device's copy graph (*done), or
// nothing done.
Status copy_by_graph(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, bool* done) {
  *done = false;
  if (!is_device_memory(dst) || !is_device_memory(src)) return Status::kOk;
  GraphCopier* copier = GraphCopier::current();
  return copier ? copier->copy(dst, src, bytes, stream, done) : Status::kOk;
}

}  // namespace cuda_detail
}  // namespace ferry::gpu
