#include "engine/core/peer_memory.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry {
namespace {

struct Exported {
  void* device = nullptr;
  ExportedBuffer handle{};
};

Exported make_buffer(PeerMemory& exporter, char fill) {
  Exported e;
  EXPECT_EQ(gpu::emulated_backend()->device_alloc(4096, &e.device), Status::kOk);
  std::vector<char> bytes(4096, fill);
  EXPECT_EQ(gpu::copy(e.device, bytes.data(), bytes.size()), Status::kOk);
  EXPECT_EQ(exporter.export_buffer(static_cast<char*>(e.device) + 100, &e.handle), Status::kOk);
  return e;
}

char first_byte(void* mapped) {
  char c = 0;
  EXPECT_EQ(gpu::copy(&c, mapped, 1), Status::kOk);
  return c;
}

TEST(PeerMemory, MapsAtTheExportedOffsetAndReusesMappings) {
  PeerMemory exporter, importer;
  Exported a = make_buffer(exporter, 'a');
  void* first = nullptr;
  void* again = nullptr;
  ASSERT_EQ(importer.import_buffer(a.handle, &first), Status::kOk);
  ASSERT_EQ(importer.import_buffer(a.handle, &again), Status::kOk);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, static_cast<char*>(a.device) + 100);  // a mapping of its own
  EXPECT_EQ(first_byte(first), 'a');
  EXPECT_EQ(importer.mapped_count(), 1u);
  EXPECT_TRUE(ferry::ok(gpu::emulated_backend()->device_free(a.device)));
}

// A peer's buffer never seen before means the peer may have freed others:
// their mappings go, except those the same call needs.
TEST(PeerMemory, ANewBufferClosesThePeersOtherMappings) {
  PeerMemory exporter, importer;
  Exported a = make_buffer(exporter, 'a'), b = make_buffer(exporter, 'b'), c = make_buffer(exporter, 'c');
  void* mapped[2];
  const ExportedBuffer ab[] = {a.handle, b.handle};
  ASSERT_EQ(importer.import_buffers(ab, 2, mapped), Status::kOk);
  EXPECT_EQ(importer.mapped_count(), 2u);
  EXPECT_EQ(first_byte(mapped[0]), 'a');
  EXPECT_EQ(first_byte(mapped[1]), 'b');

  const ExportedBuffer ac[] = {a.handle, c.handle};
  ASSERT_EQ(importer.import_buffers(ac, 2, mapped), Status::kOk);
  EXPECT_EQ(importer.mapped_count(), 2u);  // b closed, a kept for this call
  EXPECT_EQ(first_byte(mapped[0]), 'a');
  EXPECT_EQ(first_byte(mapped[1]), 'c');

  // Freed and reallocated: a new identity, so a new mapping of new memory.
  EXPECT_TRUE(ferry::ok(gpu::emulated_backend()->device_free(c.device)));
  Exported d = make_buffer(exporter, 'd');
  ASSERT_EQ(importer.import_buffer(d.handle, mapped), Status::kOk);
  EXPECT_EQ(first_byte(mapped[0]), 'd');
  EXPECT_EQ(importer.mapped_count(), 1u);
  for (void* p : {a.device, b.device, d.device}) EXPECT_TRUE(ferry::ok(gpu::emulated_backend()->device_free(p)));
}

}  // namespace
}  // namespace ferry
