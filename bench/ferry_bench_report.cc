#include "ferry_bench_report.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "ferry_bench_options.h"

namespace ferry_bench {
namespace {

// Bus bandwidth / algorithm bandwidth, as nccl-tests defines them.
double busbw_factor(Op op, int nranks) {
  switch (op) {
    case Op::kAllreduce: return 2.0 * (nranks - 1) / nranks;
    case Op::kBcast: return 1.0;
    case Op::kAlltoallv: return static_cast<double>(nranks - 1) / nranks;
    case Op::kSendrecv: return 1.0;
    case Op::kIsendrecv: return 1.0;
    case Op::kPsendrecv: return 1.0;
    case Op::kSend: return 1.0;
  }
  return 0;
}

double busbw_gbps(const Row& row, double us, int nranks) {
  return static_cast<double>(row.bytes) / us / 1e3 * busbw_factor(row.op, nranks);
}

std::string format_number(const char* format, double value) {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// Column widths of the table, in characters.
constexpr int kOpWidth = 10;
constexpr int kBytesWidth = 6;
constexpr int kNumberWidth = 10;
constexpr int kRatioWidth = 12;

std::string pad_left(const std::string& text, int width) {
  return std::string(std::max(0, width - static_cast<int>(text.size())), ' ') + text;
}
std::string pad_right(const std::string& text, int width) {
  return text + std::string(std::max(0, width - static_cast<int>(text.size())), ' ');
}
// "  ---- title ----" over a group `width` characters wide.
std::string banner(const std::string& title, int width) {
  const int inner = width - 2;
  const std::string text = " " + title + " ";
  const int dashes = std::max(0, inner - static_cast<int>(text.size()));
  return "  " + std::string(dashes / 2, '-') + text + std::string(dashes - dashes / 2, '-');
}

}  // namespace

void Table::print_header() const {
  std::string banners(kOpWidth + kBytesWidth, ' ');
  std::string titles = pad_right("op", kOpWidth) + pad_left("bytes", kBytesWidth);
  for (int m = 0; m < kMethodCount; ++m) {
    if (!runs_[m]) continue;
    const int columns = gpu_timed_[m] ? 3 : 2;
    banners += banner(kMethodTitles[m], columns * kNumberWidth);
    titles += pad_left("us", kNumberWidth);
    if (gpu_timed_[m]) titles += pad_left("gpu us", kNumberWidth);
    titles += pad_left("busbw", kNumberWidth);
  }
  if (with_ratio()) titles += pad_left("ferry/nccl", kRatioWidth);
  banners.erase(banners.find_last_not_of(' ') + 1);
  std::printf("%s\n%s\n", banners.c_str(), titles.c_str());
  std::fflush(stdout);
}

void Table::print_row(const Row& row) const {
  std::string line = pad_right(op_name(row.op), kOpWidth) + pad_left(human_bytes(row.bytes), kBytesWidth);
  for (int m = 0; m < kMethodCount; ++m) {
    if (!runs_[m]) continue;
    const Timing& timing = *row.timings[m];
    line += pad_left(format_number("%.1f", timing.blocking_us), kNumberWidth);
    if (gpu_timed_[m]) line += pad_left(format_number("%.1f", *timing.gpu_us), kNumberWidth);
    line += pad_left(format_number("%.2f", busbw_gbps(row, timing.blocking_us, nranks_)), kNumberWidth);
  }
  if (with_ratio())
    line += pad_left(format_number("%.2f", row.timings[kFerry]->blocking_us / row.timings[kNccl]->blocking_us),
                     kRatioWidth);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

CsvFile::CsvFile(const std::string& path, int nranks) : file_(std::fopen(path.c_str(), "w")), nranks_(nranks) {
  if (!file_) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  std::fprintf(file_,
               "op,bytes,ranks,iterations,ferry_us,ferry_gpu_us,ferry_busbw_gbps,nccl_us,nccl_gpu_us,"
               "nccl_busbw_gbps,staged_by_hand_us,staged_by_hand_busbw_gbps,host_mpi_us,host_mpi_busbw_gbps,"
               "ferry_over_nccl\n");
}

CsvFile::~CsvFile() { std::fclose(file_); }

void CsvFile::write_row(const Row& row) {
  std::string line = std::string(op_name(row.op)) + "," + std::to_string(row.bytes) + "," + std::to_string(nranks_) +
                     "," + std::to_string(row.timed_iterations);
  for (int m = 0; m < kMethodCount; ++m) {
    const std::optional<Timing>& timing = row.timings[m];
    line += "," + (timing ? format_number("%.3f", timing->blocking_us) : "");
    if (m != kStaged && m != kHost)
      line += "," + (timing && timing->gpu_us ? format_number("%.3f", *timing->gpu_us) : "");
    line += "," + (timing ? format_number("%.3f", busbw_gbps(row, timing->blocking_us, nranks_)) : "");
  }
  const bool ratio = row.timings[kFerry] && row.timings[kNccl];
  line +=
      "," + (ratio ? format_number("%.4f", row.timings[kFerry]->blocking_us / row.timings[kNccl]->blocking_us) : "");
  std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);
}

}  // namespace ferry_bench
