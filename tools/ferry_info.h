// The sections of ferry-info, one per command-line mode; main (ferry_info.cc)
// picks one by its arguments. Those that return an int return the process's
// exit status.
#pragma once

namespace ferry_info {

// ferry_info_report.cc: no option, and --markdown.
void print_report();
void print_markdown_table();

// ferry_info_topology.cc: --topo FILE..., and --discover [--ranks N].
int print_topology(int files, char** file_names);
// nranks 0: one rank per GPU (or the ranks the topology file names).
int print_local_topology(int nranks);

// ferry_info_self_test.cc: --self-test; 1 when a check fails.
int self_test();

// ferry_info_model.cc: --model's options (those after --model); -1 when they
// are not understood, for main to print the usage.
int model_command(int argc, char** argv);

}  // namespace ferry_info
