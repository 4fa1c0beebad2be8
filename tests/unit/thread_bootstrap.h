// N ranks as threads of one process, for testing engine collectives without
// MPI: an in-memory Bootstrap and a runner that starts one thread per rank.
#pragma once

#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/bootstrap/bootstrap.h"

namespace ferry::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), slots_(size) {}

  // Every rank deposits its bytes, waits for all, copies all out.
  void allgather(int rank, const void* mine, void* all, std::size_t bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t round = round_;
    slots_[rank].assign(static_cast<const char*>(mine), static_cast<const char*>(mine) + bytes);
    if (++arrived_ == size_) {
      gathered_.clear();
      for (auto& s : slots_) gathered_.insert(gathered_.end(), s.begin(), s.end());
      arrived_ = 0;
      ++round_;
      wake_.notify_all();
    } else {
      wake_.wait(lock, [&] { return round_ != round; });
    }
    std::memcpy(all, gathered_.data(), bytes * size_);
    // Keep gathered_ alive until every rank copied it out.
    if (++copied_ == size_) {
      copied_ = 0;
      ++copy_round_;
      wake_.notify_all();
    } else {
      const std::uint64_t copy_round = copy_round_;
      wake_.wait(lock, [&] { return copy_round_ != copy_round; });
    }
  }

  int size() const { return size_; }

 private:
  int size_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::vector<char>> slots_;
  std::vector<char> gathered_;
  int arrived_ = 0;
  int copied_ = 0;
  std::uint64_t round_ = 0;
  std::uint64_t copy_round_ = 0;
};

class ThreadBootstrap final : public Bootstrap {
 public:
  ThreadBootstrap(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Status allgather(const void* mine, void* all, std::size_t bytes) override {
    group_->allgather(rank_, mine, all, bytes);
    return Status::kOk;
  }
  Status barrier() override {
    char none = 0;
    std::vector<char> all(group_->size());
    group_->allgather(rank_, &none, all.data(), 1);
    return Status::kOk;
  }

 private:
  ThreadGroup* group_;
  int rank_;
};

// Runs body(rank, bootstrap) on `size` threads and joins them.
inline void run_ranks(int size, const std::function<void(int, std::unique_ptr<Bootstrap>)>& body) {
  ThreadGroup group(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] { body(r, std::make_unique<ThreadBootstrap>(&group, r)); });
  for (auto& t : threads) t.join();
}

}  // namespace ferry::testing
