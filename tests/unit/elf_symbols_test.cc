// elf_names_dynamic_symbol against real ELF files (this test program and a
// shared library the build makes) and against damaged copies of them.
#include "engine/common/elf_symbols.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ferry {
namespace {

std::vector<char> read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A temporary file holding bytes, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::vector<char>& bytes) {
    char name[] = "/tmp/ferry-elf-XXXXXX";
    const int fd = mkstemp(name);
    path_ = name;
    if (fd >= 0) {
      EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
      close(fd);
    }
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const char* path() const { return path_.c_str(); }

 private:
  std::string path_;
};

TEST(ElfSymbols, NamesUndefinedAndDefinedDynamicSymbols) {
  // The stand-in ROCm SMI library defines rsmi_init and calls snprintf from
  // libc (undefined there, in every build: sanitizers' interceptors are
  // bound at run time).
  EXPECT_TRUE(elf_names_dynamic_symbol(FERRY_FAKE_ROCM_SMI, "rsmi_init"));
  EXPECT_TRUE(elf_names_dynamic_symbol(FERRY_FAKE_ROCM_SMI, "snprintf"));
  EXPECT_FALSE(elf_names_dynamic_symbol("/proc/self/exe", "ferry_win_device_handle"));
  EXPECT_FALSE(elf_names_dynamic_symbol(FERRY_FAKE_ROCM_SMI, "rsmi_ini"));
  EXPECT_FALSE(elf_names_dynamic_symbol(FERRY_FAKE_ROCM_SMI, "rsmi_init_"));
  EXPECT_FALSE(elf_names_dynamic_symbol(FERRY_FAKE_ROCM_SMI, "ferry_win_device_handle"));
}

TEST(ElfSymbols, AnythingButAWholeElfFileNamesNothing) {
  EXPECT_FALSE(elf_names_dynamic_symbol("/nonexistent/ferry-elf", "malloc"));
  EXPECT_FALSE(elf_names_dynamic_symbol("/tmp", "malloc"));
  const std::vector<char> library = read_file(FERRY_FAKE_ROCM_SMI);
  ASSERT_GT(library.size(), sizeof(Elf64_Ehdr));
  {
    const TempFile whole(library);
    ASSERT_TRUE(elf_names_dynamic_symbol(whole.path(), "rsmi_init")) << "the copy itself is read";
  }
  {
    const TempFile text(std::vector<char>(4096, 'x'));
    EXPECT_FALSE(elf_names_dynamic_symbol(text.path(), "rsmi_init"));
  }
  for (std::size_t keep : {std::size_t{16}, sizeof(Elf64_Ehdr), library.size() / 2, library.size() - 1}) {
    const TempFile truncated(std::vector<char>(library.begin(), library.begin() + keep));
    EXPECT_FALSE(elf_names_dynamic_symbol(truncated.path(), "rsmi_init")) << "kept " << keep << " bytes";
  }
  {
    // Section headers said to lie past the end of the file.
    std::vector<char> damaged = library;
    Elf64_Ehdr header;
    std::memcpy(&header, damaged.data(), sizeof header);
    header.e_shoff = damaged.size() - 8;
    std::memcpy(damaged.data(), &header, sizeof header);
    const TempFile file(damaged);
    EXPECT_FALSE(elf_names_dynamic_symbol(file.path(), "rsmi_init"));
  }
  {
    // Every string-table link pointing past the section headers.
    std::vector<char> damaged = library;
    Elf64_Ehdr header;
    std::memcpy(&header, damaged.data(), sizeof header);
    for (unsigned s = 0; s < header.e_shnum; ++s) {
      Elf64_Shdr section;
      char* at = damaged.data() + header.e_shoff + s * sizeof(Elf64_Shdr);
      std::memcpy(&section, at, sizeof section);
      if (section.sh_type != SHT_DYNSYM) continue;
      section.sh_link = header.e_shnum + 3;
      std::memcpy(at, &section, sizeof section);
    }
    const TempFile file(damaged);
    EXPECT_FALSE(elf_names_dynamic_symbol(file.path(), "rsmi_init"));
  }
}

}  // namespace
}  // namespace ferry
