// What the MPI benchmark programs that run without a GPU toolkit share:
// libferry.so's entry points found with dlsym, size lists, the host clock
// and medians.
#pragma once

#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ferry/ferry.h"

namespace bench {

struct Ferry {
  decltype(&ferry_device_malloc) malloc = nullptr;
  decltype(&ferry_device_free) free = nullptr;
  decltype(&ferry_memcpy) memcpy = nullptr;
  decltype(&ferry_device_backend) backend = nullptr;
};

// Ends the job when libferry.so is not preloaded.
inline Ferry load_ferry(const char* program) {
  Ferry f;
  f.malloc = reinterpret_cast<decltype(f.malloc)>(dlsym(RTLD_DEFAULT, "ferry_device_malloc"));
  f.free = reinterpret_cast<decltype(f.free)>(dlsym(RTLD_DEFAULT, "ferry_device_free"));
  f.memcpy = reinterpret_cast<decltype(f.memcpy)>(dlsym(RTLD_DEFAULT, "ferry_memcpy"));
  f.backend = reinterpret_cast<decltype(f.backend)>(dlsym(RTLD_DEFAULT, "ferry_device_backend"));
  if (!f.malloc || !f.free || !f.memcpy || !f.backend) {
    std::fprintf(stderr, "%s: libferry.so is not loaded (run with LD_PRELOAD=libferry.so)\n", program);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return f;
}

// "8", "4K", "16M", "1G".
inline std::size_t parse_size(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end && (*end == 'K' || *end == 'k')) value *= 1024;
  if (end && (*end == 'M' || *end == 'm')) value *= 1024 * 1024;
  if (end && (*end == 'G' || *end == 'g')) value *= 1024.0 * 1024 * 1024;
  return static_cast<std::size_t>(value);
}

inline std::vector<std::size_t> parse_sizes(const char* list) {
  std::vector<std::size_t> sizes;
  std::string text(list);
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    sizes.push_back(parse_size(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return sizes;
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace bench
