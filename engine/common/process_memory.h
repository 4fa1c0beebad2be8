// Memory shared between processes of one machine without a name in the file
// system: a memfd, which the kernel frees with its last descriptor and
// mapping, so nothing is left behind however a job ends (kill -9 included).
// Another process opens it through /proc/<pid>/fd/<fd> while the owner
// lives, which needs the same user (as CUDA IPC does).
#pragma once

#include <cstddef>
#include <string>

namespace ferry {

// A new memfd of bytes named name (seen in /proc as "/memfd:<name>"), or -1
// with errno set. reserve: its pages are allocated now, so that a full
// machine fails here rather than with SIGBUS at the first store.
int create_process_memory(const std::string& name, std::size_t bytes, bool reserve);

// A descriptor of process pid's memfd fd, opened with flags (O_RDWR or
// O_RDONLY), or -1 when it cannot be opened or is not the memfd called name
// (the process ended and its pid or descriptor number was reused).
int open_process_memory(int pid, int fd, const std::string& name, int flags);

// The size of the file behind fd, or 0.
std::size_t process_memory_bytes(int fd);

}  // namespace ferry
