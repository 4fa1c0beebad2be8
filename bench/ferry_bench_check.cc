#include "ferry_bench_check.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "ferry_bench_options.h"

namespace ferry_bench {

void Harness::prepare(const Case& c) {
  input_.resize(c.count);
  expected_.resize(c.count);
  readback_.resize(c.count);
  switch (c.op) {
    case Op::kAllreduce:
      for (std::size_t i = 0; i < c.count; ++i) input_[i] = input_value(c.seed, rank_, i);
      std::fill(expected_.begin(), expected_.end(), 0.0f);
      for (int r = 0; r < nranks_; ++r)
        for (std::size_t i = 0; i < c.count; ++i) expected_[i] += input_value(c.seed, r, i);
      break;
    case Op::kBcast:
      for (std::size_t i = 0; i < c.count; ++i) {
        expected_[i] = input_value(c.seed, kRoot, i);
        input_[i] = rank_ == kRoot ? expected_[i] : kUntouched;
      }
      break;
    case Op::kAlltoallv: {
      const std::size_t block = c.count / nranks_;
      for (std::size_t i = 0; i < c.count; ++i) input_[i] = input_value(c.seed, rank_, i);
      // Block `peer` of the result is block `rank_` of the peer's input.
      for (int peer = 0; peer < nranks_; ++peer)
        for (std::size_t k = 0; k < block; ++k)
          expected_[peer * block + k] = input_value(c.seed, peer, rank_ * block + k);
      break;
    }
    case Op::kSendrecv:
    case Op::kIsendrecv:
    case Op::kPsendrecv: {
      const int from = previous_rank(rank_, nranks_);
      for (std::size_t i = 0; i < c.count; ++i) {
        input_[i] = input_value(c.seed, rank_, i);
        expected_[i] = input_value(c.seed, from, i);
      }
      break;
    }
    case Op::kSend: {
      // Senders' receive buffers stay as they were.
      const int from = send_partner(rank_, nranks_);
      const bool receives = rank_ % 2 == 1;
      for (std::size_t i = 0; i < c.count; ++i) {
        input_[i] = input_value(c.seed, rank_, i);
        expected_[i] = receives ? input_value(c.seed, from, i) : kUntouched;
      }
      break;
    }
  }
}

void Harness::verify(Method& method, const char* method_title, const Case& c) {
  const std::size_t bytes = c.bytes();
  float* result = c.op == Op::kBcast ? send_.get() : recv_.get();
  copy_or_throw(ferry_.copy, send_.get(), input_.data(), bytes);
  if (result != send_.get()) {
    std::fill(readback_.begin(), readback_.end(), kUntouched);
    copy_or_throw(ferry_.copy, result, readback_.data(), bytes);
  }
  method.start_checked(c);
  method.finish();
  copy_or_throw(ferry_.copy, readback_.data(), result, bytes);

  std::size_t wrong = 0, first_wrong = 0;
  for (std::size_t i = 0; i < c.count; ++i) {
    if (readback_[i] == expected_[i]) continue;
    if (wrong == 0) first_wrong = i;
    ++wrong;
  }
  unsigned long long wrong_anywhere = wrong;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &wrong_anywhere, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  if (wrong_anywhere == 0) return;
  char message[512];
  if (wrong == 0) {
    std::snprintf(message, sizeof message, "%s %s of %s bytes: wrong results on another rank", method_title,
                  op_name(c.op), human_bytes(bytes).c_str());
  } else {
    std::snprintf(message, sizeof message,
                  "%s %s of %s bytes: WRONG RESULT, %zu of %zu floats differ from the host reference; "
                  "first at index %zu: got %.1f, expected %.1f",
                  method_title, op_name(c.op), human_bytes(bytes).c_str(), wrong, c.count, first_wrong,
                  readback_[first_wrong], expected_[first_wrong]);
  }
  throw std::runtime_error(message);
}

}  // namespace ferry_bench
