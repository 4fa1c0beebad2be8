// Completing requests as programs do, with every completion call, checking
// what each call reports. Shared by the programs that make requests.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "suite.h"

namespace suite {

// How long a loop of Test calls may wait for a request before the job ends.
constexpr double kPatienceSeconds = 30;

// Reports a failure after which the ranks can no longer stay in step, and
// ends the job.
[[noreturn]] void give_up(const Case& what, const std::string& problem);

enum class Call { wait, test, waitall, testall, waitany, testany, waitsome, testsome };
constexpr int kCalls = 8;

// A completion call, and whether it is passed MPI_STATUS(ES)_IGNORE.
struct Completion {
  Call call;
  bool ignore_status;
};
// Every Completion, numbered 0..kCompletions-1; cases rotate through them.
constexpr int kCompletions = 2 * kCalls;

Completion completion(int number);
// The calls that return statuses only: cases that need one rotate through these.
Completion completion_with_status(int number);
std::string completion_name(Completion how);

// Ends the job when a loop of Test calls has waited too long.
class Deadline {
 public:
  Deadline(const Case& what, std::string call) : what_(what), call_(std::move(call)) {}
  void check() const {
    if (MPI_Wtime() - start_ > kPatienceSeconds) {
      give_up(what_, call_ + " did not complete within " + std::to_string(int(kPatienceSeconds)) +
                         " s");
    }
  }

 private:
  const Case& what_;
  std::string call_;
  double start_ = MPI_Wtime();
};

// Completes every active request of `requests` (MPI_REQUEST_NULL entries are
// allowed) with `how`, as a program would: one call per request for MPI_Wait
// and MPI_Test, one MPI_Waitall, and repeated calls for the others, the Test
// calls until they report completion. Checks what the calls report (indices,
// counts, no request completed twice, at the end every handle
// MPI_REQUEST_NULL, or unchanged where `persistent` is true) and returns the
// status of each request, indexed like `requests`, or nothing under
// MPI_STATUS(ES)_IGNORE. Persistent requests must be active.
std::optional<std::vector<MPI_Status>> complete(Completion how, std::vector<MPI_Request>& requests,
                                                const Case& what,
                                                const std::vector<bool>& persistent = {});

}  // namespace suite
