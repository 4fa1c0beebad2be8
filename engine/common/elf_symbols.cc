#include "engine/common/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ferry {

namespace {

// A read-only mapping of a whole file; empty when it cannot be mapped.
class MappedFile {
 public:
  explicit MappedFile(const char* path) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      void* at = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (at != MAP_FAILED) {
        data_ = static_cast<const unsigned char*>(at);
        size_ = static_cast<std::size_t>(st.st_size);
      }
    }
    close(fd);
  }
  ~MappedFile() {
    if (data_) munmap(const_cast<unsigned char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The bytes [offset, offset + bytes), or nullptr when they are not all in
  // the file.
  const unsigned char* at(std::uint64_t offset, std::uint64_t bytes) const {
    if (!data_ || offset > size_ || bytes > size_ - offset) return nullptr;
    return data_ + offset;
  }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

bool elf_names_dynamic_symbol(const char* path, const char* name) {
  const MappedFile file(path);
  const auto* header = reinterpret_cast<const Elf64_Ehdr*>(file.at(0, sizeof(Elf64_Ehdr)));
  if (!header || std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 || header->e_ident[EI_CLASS] != ELFCLASS64 ||
      header->e_shentsize != sizeof(Elf64_Shdr))
    return false;
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(
      file.at(header->e_shoff, std::uint64_t{header->e_shnum} * sizeof(Elf64_Shdr)));
  if (!sections) return false;
  const std::size_t name_length = std::strlen(name);
  for (unsigned s = 0; s < header->e_shnum; ++s) {
    const Elf64_Shdr& table = sections[s];
    if (table.sh_type != SHT_DYNSYM || table.sh_entsize != sizeof(Elf64_Sym) || table.sh_link >= header->e_shnum)
      continue;
    const auto* symbols = reinterpret_cast<const Elf64_Sym*>(file.at(table.sh_offset, table.sh_size));
    const Elf64_Shdr& strings_section = sections[table.sh_link];
    const char* strings = reinterpret_cast<const char*>(file.at(strings_section.sh_offset, strings_section.sh_size));
    if (!symbols || !strings) return false;
    for (std::uint64_t i = 0; i < table.sh_size / sizeof(Elf64_Sym); ++i) {
      const std::uint64_t offset = symbols[i].st_name;
      // The name and its terminating NUL inside the string table.
      if (offset + name_length >= strings_section.sh_size) continue;
      if (std::memcmp(strings + offset, name, name_length + 1) == 0) return true;
    }
  }
  return false;
}

}  // namespace ferry
