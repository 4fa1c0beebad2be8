#include "completion.h"

#include <cstdlib>

namespace suite {

[[noreturn]] void give_up(const Case& what, const std::string& problem) {
  fail(what, problem);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

Completion completion(int number) {
  number %= kCompletions;
  return {Call(number / 2), number % 2 == 1};
}

Completion completion_with_status(int number) { return {Call(number % kCalls), false}; }

std::string completion_name(Completion how) {
  static const char* const kNames[] = {"MPI_Wait",    "MPI_Test",    "MPI_Waitall",  "MPI_Testall",
                                       "MPI_Waitany", "MPI_Testany", "MPI_Waitsome", "MPI_Testsome"};
  const bool single = how.call == Call::wait || how.call == Call::test ||
                      how.call == Call::waitany || how.call == Call::testany;
  std::string name = kNames[int(how.call)];
  if (how.ignore_status) name += single ? "(MPI_STATUS_IGNORE)" : "(MPI_STATUSES_IGNORE)";
  return name;
}

std::optional<std::vector<MPI_Status>> complete(Completion how, std::vector<MPI_Request>& requests,
                                                const Case& what, const std::vector<bool>& persistent) {
  const int n = int(requests.size());
  const std::vector<MPI_Request> handles = requests;
  const std::string name = completion_name(how);
  std::vector<MPI_Status> statuses(n);
  std::vector<char> pending(n);
  int remaining = 0;
  for (int i = 0; i < n; ++i) {
    pending[i] = requests[i] != MPI_REQUEST_NULL;
    remaining += pending[i];
  }
  const Deadline deadline(what, name);
  MPI_Status one;
  MPI_Status* one_arg = how.ignore_status ? MPI_STATUS_IGNORE : &one;
  std::vector<MPI_Status> some(n);
  MPI_Status* some_arg = how.ignore_status ? MPI_STATUSES_IGNORE : some.data();
  std::vector<int> indices(n);
  // A call reported request `index` complete, with `status` unless ignored.
  auto completed = [&](int index, const MPI_Status* status) {
    if (index < 0 || index >= n || !pending[index]) {
      give_up(what, name + " reported request " + std::to_string(index) +
                        " complete, which was not pending");
    }
    pending[index] = 0;
    --remaining;
    if (!how.ignore_status) statuses[index] = *status;
  };

  switch (how.call) {
    case Call::wait:
      for (int i = 0; i < n; ++i) {
        if (!pending[i]) continue;
        check_mpi(MPI_Wait(&requests[i], one_arg), what);
        completed(i, &one);
      }
      break;
    case Call::test:
      for (int i = 0; i < n; ++i) {
        if (!pending[i]) continue;
        for (int flag = 0; !flag;) {
          check_mpi(MPI_Test(&requests[i], &flag, one_arg), what);
          if (!flag) deadline.check();
        }
        completed(i, &one);
      }
      break;
    case Call::waitall:
      check_mpi(MPI_Waitall(n, requests.data(), some_arg), what);
      for (int i = 0; i < n; ++i) {
        if (pending[i]) completed(i, &some[i]);
      }
      break;
    case Call::testall:
      for (int flag = 0; !flag;) {
        check_mpi(MPI_Testall(n, requests.data(), &flag, some_arg), what);
        if (flag) break;
        // No request completes until all of them do.
        for (int i = 0; i < n; ++i) {
          if (pending[i] && requests[i] == MPI_REQUEST_NULL) {
            give_up(what, name + " returned flag=false but freed request " + std::to_string(i));
          }
        }
        deadline.check();
      }
      for (int i = 0; i < n; ++i) {
        if (pending[i]) completed(i, &some[i]);
      }
      break;
    case Call::waitany:
      while (remaining > 0) {
        int index = -1;
        check_mpi(MPI_Waitany(n, requests.data(), &index, one_arg), what);
        if (index == MPI_UNDEFINED) {
          give_up(what, name + " returned MPI_UNDEFINED with " + std::to_string(remaining) +
                            " requests pending");
        }
        completed(index, &one);
      }
      break;
    case Call::testany:
      while (remaining > 0) {
        int index = -1;
        int flag = 0;
        check_mpi(MPI_Testany(n, requests.data(), &index, &flag, one_arg), what);
        if (!flag) {
          deadline.check();
          continue;
        }
        if (index == MPI_UNDEFINED) {
          give_up(what, name + " returned MPI_UNDEFINED with " + std::to_string(remaining) +
                            " requests pending");
        }
        completed(index, &one);
      }
      break;
    case Call::waitsome:
    case Call::testsome:
      while (remaining > 0) {
        int outcount = -1;
        if (how.call == Call::waitsome) {
          check_mpi(MPI_Waitsome(n, requests.data(), &outcount, indices.data(), some_arg), what);
        } else {
          check_mpi(MPI_Testsome(n, requests.data(), &outcount, indices.data(), some_arg), what);
        }
        if (outcount == MPI_UNDEFINED || outcount < 0 || outcount > remaining ||
            (how.call == Call::waitsome && outcount == 0)) {
          give_up(what, name + " returned outcount=" + std::to_string(outcount) + " with " +
                            std::to_string(remaining) + " requests pending");
        }
        if (outcount == 0) deadline.check();
        // Statuses come in the order of the indices, not of the requests.
        for (int k = 0; k < outcount; ++k) completed(indices[k], &some[k]);
      }
      break;
  }
  for (int i = 0; i < n; ++i) {
    if (i < int(persistent.size()) && persistent[i]) {
      expect(requests[i] == handles[i], what,
             name + " changed the handle of persistent request " + std::to_string(i));
    } else {
      expect(requests[i] == MPI_REQUEST_NULL, what,
             name + " left request " + std::to_string(i) + " not MPI_REQUEST_NULL");
    }
  }
  if (how.ignore_status) return std::nullopt;
  return statuses;
}

}  // namespace suite
