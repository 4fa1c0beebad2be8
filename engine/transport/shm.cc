#include "engine/transport/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ferry {
namespace {

// How a rank's segment is found by the others.
struct SegmentAddress {
  std::int32_t pid;
  std::int32_t fd;  // -1: the rank could not create one
};
static_assert(sizeof(SegmentAddress) == 8, "SegmentAddress travels between processes; keep its layout fixed");

char* map_fd(int fd, std::size_t bytes) {
  void* view = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return view == MAP_FAILED ? nullptr : static_cast<char*>(view);
}

}  // namespace

Status SharedSegments::create(Bootstrap& bootstrap, gpu::Backend* backend, std::size_t bytes,
                              std::unique_ptr<SharedSegments>* out) {
  std::unique_ptr<SharedSegments> segments(new SharedSegments(backend, bytes));
  const int n = bootstrap.size();
  segments->views_.assign(n, nullptr);
  segments->registered_.assign(n, false);

  SegmentAddress mine{static_cast<std::int32_t>(getpid()), -1};
  segments->fd_ = memfd_create("ferry-shm-transport", MFD_CLOEXEC);
  if (segments->fd_ >= 0 && ftruncate(segments->fd_, static_cast<off_t>(bytes)) == 0 &&
      (segments->views_[bootstrap.rank()] = map_fd(segments->fd_, bytes)) != nullptr)
    mine.fd = segments->fd_;
  std::vector<SegmentAddress> all(n);
  FERRY_CHECK(bootstrap.allgather(&mine, all.data(), sizeof(mine)));

  // Map every peer's segment and pin all of them for the device; then agree,
  // so that either every rank has the transport or none uses it.
  std::int32_t ready = 1;
  for (int r = 0; r < n && ready; ++r) {
    if (all[r].fd < 0) {
      ready = 0;
      break;
    }
    if (r != bootstrap.rank()) {
      const std::string path = "/proc/" + std::to_string(all[r].pid) + "/fd/" + std::to_string(all[r].fd);
      const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) {
        FERRY_WARN(Transport, "shm: cannot open rank %d's segment %s: %s", r, path.c_str(), std::strerror(errno));
        ready = 0;
        break;
      }
      segments->views_[r] = map_fd(fd, bytes);
      close(fd);
      if (!segments->views_[r]) {
        ready = 0;
        break;
      }
    }
    if (backend) {
      segments->registered_[r] = ok(backend->host_register(segments->views_[r], bytes));
      ready = segments->registered_[r];
    }
  }
  std::vector<std::int32_t> everyone(n);
  FERRY_CHECK(bootstrap.allgather(&ready, everyone.data(), sizeof(ready)));
  for (std::int32_t r : everyone)
    if (!r) return Status::kUnavailable;
  FERRY_INFO(Transport, "shm transport: %d segments of %zu bytes", n, bytes);
  *out = std::move(segments);
  return Status::kOk;
}

SharedSegments::~SharedSegments() {
  for (std::size_t r = 0; r < views_.size(); ++r) {
    if (!views_[r]) continue;
    if (registered_[r]) FERRY_LOG_IF_FAILED(backend_->host_unregister(views_[r]));
    munmap(views_[r], bytes_);
  }
  if (fd_ >= 0) close(fd_);
}

}  // namespace ferry
