// Whether an ELF file's dynamic symbol table names a symbol: how Ferry tells,
// before main runs, that a program calls a Ferry function it links against.
#pragma once

namespace ferry {

// True when the 64-bit ELF file at path has a dynamic symbol of that name,
// defined or undefined. False for anything else: no such file, not ELF, a
// truncated or malformed file, no dynamic symbol table.
bool elf_names_dynamic_symbol(const char* path, const char* name);

}  // namespace ferry
