// MPI-IO on device buffers, to a file in a temporary directory: every rank
// writes its random block from device memory (explicit offsets, individual
// and shared file pointers, ordered, collective, nonblocking, split
// collective; a strided memory type), then reads the file back into device
// memory the same ways and into host memory, and compares with what it
// wrote. A read past the end of the file fills only what the file has.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "suite.h"

namespace {

using namespace suite;

constexpr int kCount = 1001;  // int32 elements a rank writes in each pass

// The file, shared by all ranks, in a fresh temporary directory.
std::string temp_file() {
  char dir[] = "/tmp/ferry-io-XXXXXX";
  std::string path;
  if (world_rank() == 0) path = std::string(mkdtemp(dir)) + "/data";
  int length = int(path.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  path.resize(length);
  MPI_Bcast(path.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

MPI_File open_file(const std::string& path, int mode) {
  MPI_File file = MPI_FILE_NULL;
  check_mpi(MPI_File_open(MPI_COMM_WORLD, path.c_str(), mode, MPI_INFO_NULL, &file), Case{"MPI_File_open", ""});
  MPI_File_set_errhandler(file, MPI_ERRORS_RETURN);
  return file;
}

// How one pass writes or reads this rank's block: call(file, buffer, status)
// with the rank's view already at its block.
struct Way {
  const char* name;
  std::function<int(MPI_File, const void*, MPI_Status*)> write;
  std::function<int(MPI_File, void*, MPI_Status*)> read;
  bool own_view;  // the rank's block is at offset 0 of a view of its own
};

// A nonblocking call's result rc, and its request waited for.
int waited(int rc, MPI_Request* request, MPI_Status* status) {
  return rc != MPI_SUCCESS ? rc : MPI_Wait(request, status);
}

std::vector<Way> ways() {
  const MPI_Offset block = MPI_Offset(kCount) * 4;
  auto at = [block] { return MPI_Offset(world_rank()) * block; };
  return {
      {"write_at/read_at",
       [=](MPI_File f, const void* b, MPI_Status* s) { return MPI_File_write_at(f, at(), b, kCount, MPI_INT32_T, s); },
       [=](MPI_File f, void* b, MPI_Status* s) { return MPI_File_read_at(f, at(), b, kCount, MPI_INT32_T, s); }, false},
      {"write_at_all/read_at_all",
       [=](MPI_File f, const void* b, MPI_Status* s) {
         return MPI_File_write_at_all(f, at(), b, kCount, MPI_INT32_T, s);
       },
       [=](MPI_File f, void* b, MPI_Status* s) { return MPI_File_read_at_all(f, at(), b, kCount, MPI_INT32_T, s); },
       false},
      {"iwrite_at/iread_at",
       [=](MPI_File f, const void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iwrite_at(f, at(), b, kCount, MPI_INT32_T, &r), &r, s);
       },
       [=](MPI_File f, void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iread_at(f, at(), b, kCount, MPI_INT32_T, &r), &r, s);
       },
       false},
      {"iwrite_at_all/iread_at_all",
       [=](MPI_File f, const void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iwrite_at_all(f, at(), b, kCount, MPI_INT32_T, &r), &r, s);
       },
       [=](MPI_File f, void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iread_at_all(f, at(), b, kCount, MPI_INT32_T, &r), &r, s);
       },
       false},
      {"write/read (view)",
       [](MPI_File f, const void* b, MPI_Status* s) { return MPI_File_write(f, b, kCount, MPI_INT32_T, s); },
       [](MPI_File f, void* b, MPI_Status* s) { return MPI_File_read(f, b, kCount, MPI_INT32_T, s); }, true},
      {"write_all/read_all (view)",
       [](MPI_File f, const void* b, MPI_Status* s) { return MPI_File_write_all(f, b, kCount, MPI_INT32_T, s); },
       [](MPI_File f, void* b, MPI_Status* s) { return MPI_File_read_all(f, b, kCount, MPI_INT32_T, s); }, true},
      {"iwrite/iread (view)",
       [](MPI_File f, const void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iwrite(f, b, kCount, MPI_INT32_T, &r), &r, s);
       },
       [](MPI_File f, void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iread(f, b, kCount, MPI_INT32_T, &r), &r, s);
       },
       true},
      {"iwrite_all/iread_all (view)",
       [](MPI_File f, const void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iwrite_all(f, b, kCount, MPI_INT32_T, &r), &r, s);
       },
       [](MPI_File f, void* b, MPI_Status* s) {
         MPI_Request r;
         return waited(MPI_File_iread_all(f, b, kCount, MPI_INT32_T, &r), &r, s);
       },
       true},
      {"write_all_begin/end (view)",
       [](MPI_File f, const void* b, MPI_Status* s) {
         const int rc = MPI_File_write_all_begin(f, b, kCount, MPI_INT32_T);
         return rc ? rc : MPI_File_write_all_end(f, b, s);
       },
       [](MPI_File f, void* b, MPI_Status* s) {
         const int rc = MPI_File_read_all_begin(f, b, kCount, MPI_INT32_T);
         return rc ? rc : MPI_File_read_all_end(f, b, s);
       },
       true},
      {"write_at_all_begin/end",
       [=](MPI_File f, const void* b, MPI_Status* s) {
         const int rc = MPI_File_write_at_all_begin(f, at(), b, kCount, MPI_INT32_T);
         return rc ? rc : MPI_File_write_at_all_end(f, b, s);
       },
       [=](MPI_File f, void* b, MPI_Status* s) {
         const int rc = MPI_File_read_at_all_begin(f, at(), b, kCount, MPI_INT32_T);
         return rc ? rc : MPI_File_read_at_all_end(f, b, s);
       },
       false},
      {"write_ordered/read_ordered",
       [](MPI_File f, const void* b, MPI_Status* s) { return MPI_File_write_ordered(f, b, kCount, MPI_INT32_T, s); },
       [](MPI_File f, void* b, MPI_Status* s) { return MPI_File_read_ordered(f, b, kCount, MPI_INT32_T, s); }, false},
      {"write_ordered_begin/end",
       [](MPI_File f, const void* b, MPI_Status* s) {
         const int rc = MPI_File_write_ordered_begin(f, b, kCount, MPI_INT32_T);
         return rc ? rc : MPI_File_write_ordered_end(f, b, s);
       },
       [](MPI_File f, void* b, MPI_Status* s) {
         const int rc = MPI_File_read_ordered_begin(f, b, kCount, MPI_INT32_T);
         return rc ? rc : MPI_File_read_ordered_end(f, b, s);
       },
       false},
  };
}

void set_view(MPI_File file, bool own_view) {
  const MPI_Offset displacement = own_view ? MPI_Offset(world_rank()) * kCount * 4 : 0;
  check_mpi(MPI_File_set_view(file, displacement, MPI_INT32_T, MPI_INT32_T, "native", MPI_INFO_NULL),
            Case{"MPI_File_set_view", ""});
}

void test_ways(const std::string& path) {
  for (const Way& way : ways()) {
    const uint64_t id = next_case_id();
    const std::vector<int32_t> data = random_values<int32_t>(kCount, id, world_rank());
    const Case what{std::string("MPI_File_") + way.name, "MPI_INT32_T", "", kCount, "device"};
    {
      MPI_File file = open_file(path, MPI_MODE_CREATE | MPI_MODE_RDWR);
      set_view(file, way.own_view);
      Buffer source = make_buffer(data, Memory::device, 4);
      MPI_Status status;
      check_mpi(way.write(file, source.data(), &status), what);
      expect_status(what, status, MPI_INT32_T, kCount, status.MPI_SOURCE, status.MPI_TAG);
      check_mpi(MPI_File_close(&file), what);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (Memory memory : {Memory::device, Memory::host}) {
      MPI_File file = open_file(path, MPI_MODE_RDONLY);
      set_view(file, way.own_view);
      Buffer target = make_buffer(poisoned<int32_t>(kCount), memory, 4);
      MPI_Status status;
      Case read = what;
      read.layout = memory == Memory::device ? "read into device" : "read into host";
      check_mpi(way.read(file, target.data(), &status), read);
      expect_buffer(read, target, data);
      check_mpi(MPI_File_close(&file), read);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// A strided memory type (one int32 every 12 bytes), and a read that asks for
// more than the file holds: only what it has arrives, the rest keeps its bytes.
void test_strided_and_short(const std::string& path) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  MPI_Datatype strided = MPI_DATATYPE_NULL;
  MPI_Type_create_resized(MPI_INT32_T, 0, 12, &strided);
  MPI_Type_commit(&strided);
  std::vector<int32_t> spread = random_values<int32_t>(3 * kCount, id, rank);
  const Case what{"MPI_File_write_at/read_at", "resized(MPI_INT32_T, extent 12)", "", kCount, "device"};
  MPI_File file = open_file(path, MPI_MODE_CREATE | MPI_MODE_RDWR);
  check_mpi(MPI_File_set_size(file, 0), what);
  MPI_Barrier(MPI_COMM_WORLD);
  Buffer source = make_buffer(spread, Memory::device);
  MPI_Status status;
  check_mpi(MPI_File_write_at(file, MPI_Offset(rank) * kCount * 4, source.data(), kCount, strided, &status), what);
  MPI_Barrier(MPI_COMM_WORLD);
  // Read back strided into poisoned device memory: the gaps keep the poison.
  Buffer target = make_buffer(poisoned<int32_t>(3 * kCount), Memory::device);
  check_mpi(MPI_File_read_at(file, MPI_Offset(rank) * kCount * 4, target.data(), kCount, strided, &status), what);
  std::vector<int32_t> expected = poisoned<int32_t>(3 * kCount);
  for (int i = 0; i < kCount; ++i) expected[3 * i] = spread[3 * i];
  expect_buffer(what, target, expected);
  // The last rank's block ends the file: ask for twice as much.
  if (rank == world_size() - 1) {
    const Case short_read{"MPI_File_read_at past the end", "MPI_INT32_T", "", 2 * kCount, "device"};
    Buffer twice = make_buffer(poisoned<int32_t>(2 * kCount), Memory::device);
    check_mpi(MPI_File_read_at(file, MPI_Offset(rank) * kCount * 4, twice.data(), 2 * kCount, MPI_INT32_T, &status),
              short_read);
    std::vector<int32_t> want = poisoned<int32_t>(2 * kCount);
    for (int i = 0; i < kCount; ++i) want[i] = spread[3 * i];
    expect_buffer(short_read, twice, want);
    expect_status(short_read, status, MPI_INT32_T, kCount, status.MPI_SOURCE, status.MPI_TAG);
  }
  check_mpi(MPI_File_close(&file), what);
  MPI_Type_free(&strided);
}

// Shared file pointer: each rank writes its block with write_shared, in some
// order; the file then holds every rank's block once.
void test_shared(const std::string& path) {
  const uint64_t id = next_case_id();
  const int rank = world_rank(), size = world_size();
  const Case what{"MPI_File_iwrite_shared/read_shared", "MPI_INT32_T", "", kCount, "device"};
  MPI_File file = open_file(path, MPI_MODE_CREATE | MPI_MODE_RDWR);
  check_mpi(MPI_File_set_size(file, 0), what);
  MPI_Barrier(MPI_COMM_WORLD);
  // The first int32 of a block names its writer.
  std::vector<int32_t> data = random_values<int32_t>(kCount, id, rank);
  data[0] = rank;
  Buffer source = make_buffer(data, Memory::device);
  MPI_Request request;
  check_mpi(MPI_File_iwrite_shared(file, source.data(), kCount, MPI_INT32_T, &request), what);
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
  MPI_Barrier(MPI_COMM_WORLD);
  check_mpi(MPI_File_seek_shared(file, 0, MPI_SEEK_SET), what);
  // Each rank reads one block through the shared pointer, into device memory.
  Buffer target = make_buffer(poisoned<int32_t>(kCount), Memory::device);
  MPI_Status status;
  check_mpi(MPI_File_read_shared(file, target.data(), kCount, MPI_INT32_T, &status), what);
  std::vector<int32_t> got = read_back<int32_t>(target, kCount);
  const int writer = got[0];
  expect(writer >= 0 && writer < size, what, "a block with no writer's mark");
  if (writer >= 0 && writer < size) {
    std::vector<int32_t> expected = random_values<int32_t>(kCount, id, writer);
    expected[0] = writer;
    expect_values(what, expected, got);
  }
  check_mpi(MPI_File_close(&file), what);
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  const std::string path = temp_file();
  test_ways(path);
  test_strided_and_short(path);
  test_shared(path);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::remove(path.c_str());
    rmdir(path.substr(0, path.rfind('/')).c_str());
  }
  return suite::finish();
}
