// Fuzzes the topology XML reader (topology_xml.h) with arbitrary text.
// Contracts checked: a rejected file leaves the graph as it was and says
// why; an accepted one dumps to text that loads again to the same graph.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/topology/topology_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ferry::SystemGraph graph;
  std::string error;
  if (!ferry::ok(ferry::load_topology_xml(text, graph, &error))) {
    if (error.empty() || !(graph == ferry::SystemGraph{})) std::abort();
    return 0;
  }
  if (graph.host_count != 1) std::abort();
  const std::string dumped = ferry::dump_topology_xml(graph, 0);
  ferry::SystemGraph reloaded;
  if (!ferry::ok(ferry::load_topology_xml(dumped, reloaded, &error))) std::abort();
  if (ferry::dump_topology_xml(reloaded, 0) != dumped) std::abort();
  return 0;
}
