// NCCL-vocabulary topology XML, so files users already keep for
// NCCL_TOPO_FILE load here too:
//   <system version="1"><cpu numaid= affinity= arch= vendor=>
//     <pci busid= class= link_speed= link_width=>   (nested pci: a switch)
//       <gpu dev= sm= rank= gdr=><nvlink target= count= tclass=/></gpu>
//       <nic><net name= dev= speed= port= gdr=/></nic>
// AMD files (RCCL) use <xgmi> where NVIDIA's use <nvlink>. Attributes that
// Ferry does not use are ignored, and are not written back.
#pragma once

#include <string>

#include "engine/common/status.h"
#include "engine/topology/system_graph.h"

namespace ferry {

// Appends the machine described by text as host graph.host_count. On
// failure graph is unchanged and error says what is wrong, and on which line.
Status load_topology_xml(const std::string& text, SystemGraph& graph, std::string* error);
Status load_topology_file(const std::string& path, SystemGraph& graph, std::string* error);

// One host of the graph, in the form load_topology_xml reads.
std::string dump_topology_xml(const SystemGraph& graph, int host);

// value with XML's special characters as entities, for attribute values.
std::string xml_escape(const std::string& value);

}  // namespace ferry
