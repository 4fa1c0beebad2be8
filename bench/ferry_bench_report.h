// ferry-bench's output on rank 0: the table on stdout and, with --csv, the
// same rows as CSV.
#pragma once

#include <array>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>

#include "ferry_bench_methods.h"
#include "ferry_bench_ops.h"
#include "ferry_bench_timing.h"

namespace ferry_bench {

struct Row {
  Op op;
  std::size_t bytes;
  int timed_iterations;
  std::array<std::optional<Timing>, kMethodCount> timings;
};

// The table on rank 0: one group of columns per method that runs, then the
// ferry/nccl time ratio when both ran.
class Table {
 public:
  Table(const std::array<bool, kMethodCount>& runs, const std::array<bool, kMethodCount>& gpu_timed, int nranks)
      : runs_(runs), gpu_timed_(gpu_timed), nranks_(nranks) {}

  void print_header() const;
  // Every method that runs has a timing in `row`.
  void print_row(const Row& row) const;

 private:
  bool with_ratio() const { return runs_[kFerry] && runs_[kNccl]; }

  std::array<bool, kMethodCount> runs_;
  std::array<bool, kMethodCount> gpu_timed_;
  int nranks_;
};

// Fixed columns, empty where a method did not run, so runs compare by script.
class CsvFile {
 public:
  // Writes the header line; throws when `path` cannot be written.
  CsvFile(const std::string& path, int nranks);
  ~CsvFile();
  CsvFile(const CsvFile&) = delete;
  CsvFile& operator=(const CsvFile&) = delete;

  void write_row(const Row& row);

 private:
  std::FILE* file_;
  int nranks_;
};

}  // namespace ferry_bench
