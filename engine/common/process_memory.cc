#include "engine/common/process_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry {

int create_process_memory(const std::string& name, std::size_t bytes, bool reserve) {
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return -1;
  const off_t length = static_cast<off_t>(bytes);
  int failed = ftruncate(fd, length) != 0 ? errno : 0;
  if (!failed && reserve) failed = posix_fallocate(fd, 0, length);
  if (failed) {
    close(fd);
    errno = failed;
    return -1;
  }
  return fd;
}

int open_process_memory(int pid, int fd, const std::string& name, int flags) {
  if (pid <= 0 || fd < 0) return -1;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  // The link reads "/memfd:<name> (deleted)".
  char target[256] = {};
  const ssize_t length = readlink(path.c_str(), target, sizeof(target) - 1);
  const std::string expected = "/memfd:" + name + " ";
  if (length <= 0 || std::strncmp(target, expected.c_str(), expected.size()) != 0) return -1;
  return open(path.c_str(), flags | O_CLOEXEC);
}

std::size_t process_memory_bytes(int fd) {
  struct stat info {};
  return fstat(fd, &info) == 0 && info.st_size > 0 ? static_cast<std::size_t>(info.st_size) : 0;
}

}  // namespace ferry
