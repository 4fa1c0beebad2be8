#include "engine/topology/topology_xml.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

namespace ferry {
namespace {

// NCCL's class code for an NVSwitch as an NVLink target.
constexpr const char* kNvSwitchClass = "0x068000";

struct XmlElement {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attributes;
  std::vector<XmlElement> children;
  int line = 0;

  const std::string* attribute(const std::string& key) const {
    for (const auto& [k, v] : attributes)
      if (k == key) return &v;
    return nullptr;
  }
};

// A strict reader for the subset topology files use: one root element,
// attributes in quotes, the five predefined entities, comments, an optional
// <?xml ...?> declaration. Anything else is an error naming the line.
class XmlReader {
 public:
  explicit XmlReader(const std::string& text) : text_(text) {}

  bool parse_document(XmlElement& root) {
    skip_misc();
    if (starts_with("<?xml")) {
      if (!skip_past("?>", "unterminated <?xml declaration")) return false;
      skip_misc();
    }
    if (!at('<')) return fail("expected the root element");
    if (!parse_element(root)) return false;
    skip_misc();
    if (pos_ < text_.size()) return fail("unexpected content after the root element");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool parse_element(XmlElement& element) {
    element.line = line_;
    ++pos_;  // '<'
    if (!parse_name(element.name)) return fail("expected an element name");
    for (;;) {
      const bool had_space = skip_space();
      if (at('/')) {
        ++pos_;
        if (!at('>')) return fail("expected '>' after '/' in <" + element.name + ">");
        ++pos_;
        return true;
      }
      if (at('>')) {
        ++pos_;
        break;
      }
      if (!had_space) return fail("expected whitespace between attributes of <" + element.name + ">");
      std::string key, value;
      if (!parse_name(key)) return fail("bad attribute name in <" + element.name + ">");
      skip_space();
      if (!at('=')) return fail("expected '=' after attribute " + key);
      ++pos_;
      skip_space();
      if (!parse_quoted(value)) return false;
      if (element.attribute(key)) return fail("attribute " + key + " given twice");
      element.attributes.emplace_back(std::move(key), std::move(value));
    }
    for (;;) {
      skip_misc();
      if (pos_ >= text_.size()) return fail("<" + element.name + "> is never closed");
      if (starts_with("</")) {
        pos_ += 2;
        std::string closing;
        if (!parse_name(closing) || closing != element.name)
          return fail("</" + closing + "> closes <" + element.name + "> opened on line " +
                      std::to_string(element.line));
        skip_space();
        if (!at('>')) return fail("expected '>' in </" + closing + ">");
        ++pos_;
        return true;
      }
      if (!at('<')) return fail("unexpected text inside <" + element.name + ">");
      element.children.emplace_back();
      if (!parse_element(element.children.back())) return false;
    }
  }

  bool parse_name(std::string& name) {
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '_' || text_[pos_] == '-' || text_[pos_] == '.' ||
                                   text_[pos_] == ':'))
      ++pos_;
    name = text_.substr(begin, pos_ - begin);
    return !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
  }

  bool parse_quoted(std::string& value) {
    if (!at('"') && !at('\'')) return fail("expected a quoted attribute value");
    const char quote = text_[pos_++];
    while (pos_ < text_.size() && text_[pos_] != quote) {
      const char c = text_[pos_];
      if (c == '<') return fail("'<' inside an attribute value");
      if (c == '\n') ++line_;
      if (c == '&') {
        if (!parse_entity(value)) return false;
        continue;
      }
      value += c;
      ++pos_;
    }
    if (pos_ >= text_.size()) return fail("unterminated attribute value");
    ++pos_;
    return true;
  }

  bool parse_entity(std::string& value) {
    static const std::pair<const char*, char> kEntities[] = {
        {"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (const auto& [entity, c] : kEntities) {
      if (starts_with(entity)) {
        value += c;
        pos_ += std::char_traits<char>::length(entity);
        return true;
      }
    }
    return fail("unknown entity in an attribute value");
  }

  // Whitespace and comments.
  void skip_misc() {
    for (;;) {
      skip_space();
      if (!starts_with("<!--")) return;
      if (!skip_past("-->", "unterminated comment")) return;
    }
  }

  bool skip_space() {
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      if (text_[pos_] == '\n') ++line_;
      ++pos_;
    }
    return pos_ > begin;
  }

  bool skip_past(const char* terminator, const char* message) {
    const std::size_t end = text_.find(terminator, pos_);
    if (end == std::string::npos) {
      pos_ = text_.size();
      return fail(message);
    }
    line_ += static_cast<int>(std::count(text_.begin() + pos_, text_.begin() + end, '\n'));
    pos_ = end + std::char_traits<char>::length(terminator);
    return true;
  }

  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool starts_with(const char* s) const { return text_.compare(pos_, std::char_traits<char>::length(s), s) == 0; }

  bool fail(const std::string& message) {
    if (error_.empty()) error_ = "line " + std::to_string(line_) + ": " + message;
    return false;
  }

  const std::string& text_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::string error_;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Turns the element tree of one <system> into nodes and links of one host.
class GraphBuilder {
 public:
  GraphBuilder(SystemGraph& graph, int host) : graph_(graph), host_(host) {}

  bool build(const XmlElement& system) {
    if (system.name != "system") return fail(system, "the root element is <" + system.name + ">, not <system>");
    for (const XmlElement& child : system.children)
      if (child.name == "cpu" && !add_cpu(child)) return false;
    for (const auto& [gpu, element] : gpu_links_)
      for (const XmlElement& link : element->children)
        if ((link.name == "nvlink" || link.name == "xgmi") && !add_gpu_link(gpu, link)) return false;
    link_sockets();
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool add_cpu(const XmlElement& element) {
    Node cpu;
    cpu.type = NodeType::kCpu;
    cpu.host = host_;
    if (!read_int(element, "numaid", cpu.numa_id)) return false;
    read_string(element, "affinity", cpu.affinity);
    read_string(element, "arch", cpu.arch);
    read_string(element, "vendor", cpu.vendor);
    const int id = graph_.add_node(cpu);
    cpus_.push_back(id);
    return add_children(element, id);
  }

  bool add_children(const XmlElement& element, int parent) {
    for (const XmlElement& child : element.children) {
      if (child.name == "pci" && !add_pci(child, parent)) return false;
      if (child.name == "nic" && !add_nic(child, parent, nullptr)) return false;
    }
    return true;
  }

  // A <pci> is a GPU or a NIC when it holds one, otherwise a switch (bridge).
  bool add_pci(const XmlElement& element, int parent) {
    Node pci;
    pci.host = host_;
    pci.parent = parent;
    if (!element.attribute("busid")) return fail(element, "<pci> without busid");
    pci.busid = lower(*element.attribute("busid"));
    read_string(element, "class", pci.pci_class);
    read_string(element, "link_speed", pci.link_speed);
    if (!read_int(element, "link_width", pci.link_width)) return false;
    if (busids_.count(pci.busid)) return fail(element, "busid " + pci.busid + " appears twice");

    const XmlElement* gpu = child_named(element, "gpu");
    const XmlElement* nic = child_named(element, "nic");
    if (gpu && nic) return fail(element, "<pci> holds both a <gpu> and a <nic>");
    if (gpu) {
      // An NVLink's tclass names its target's class: this one would read
      // back as a link to an NVSwitch.
      if (lower(pci.pci_class) == kNvSwitchClass)
        return fail(element, "a <gpu>'s <pci> has the NVSwitch class " + pci.pci_class);
      pci.type = NodeType::kGpu;
      if (!read_int(*gpu, "dev", pci.dev) || !read_int(*gpu, "sm", pci.sm) ||
          !read_int(*gpu, "rank", pci.rank) || !read_bool(*gpu, "gdr", pci.gdr))
        return false;
      read_string(*gpu, "gcn", pci.gcn);
    } else if (!nic) {
      pci.type = NodeType::kPciSwitch;
    }
    if (nic) return add_nic(*nic, parent, &pci);

    const int id = graph_.add_node(pci);
    busids_[pci.busid] = id;
    graph_.add_link_pair(parent, id, LinkType::kPcie, 1, pcie_bandwidth(pci.link_speed, pci.link_width));
    if (gpu) gpu_links_.emplace_back(id, gpu);
    return gpu || add_children(element, id);
  }

  // pci is the enclosing <pci> element's node, or null for a <nic> directly
  // under a <cpu>.
  bool add_nic(const XmlElement& element, int parent, const Node* pci) {
    Node nic = pci ? *pci : Node{};
    nic.type = NodeType::kNic;
    nic.host = host_;
    nic.parent = parent;
    const int id = graph_.add_node(nic);
    if (pci) busids_[nic.busid] = id;
    graph_.add_link_pair(parent, id, LinkType::kPcie, 1, pcie_bandwidth(nic.link_speed, nic.link_width));
    for (const XmlElement& child : element.children) {
      if (child.name != "net") continue;
      Node net;
      net.type = NodeType::kNet;
      net.host = host_;
      net.parent = id;
      read_string(child, "name", net.name);
      if (!read_int(child, "dev", net.dev) || !read_int(child, "speed", net.speed_mbps) ||
          !read_int(child, "port", net.port) || !read_bool(child, "gdr", net.gdr))
        return false;
      const int net_id = graph_.add_node(net);
      graph_.add_link_pair(id, net_id, LinkType::kNet, 1, net_bandwidth(net.speed_mbps));
    }
    return true;
  }

  bool add_gpu_link(int gpu, const XmlElement& element) {
    const std::string* target = element.attribute("target");
    if (!target) return fail(element, "<" + element.name + "> without target");
    int count = 1;
    if (!read_int(element, "count", count)) return false;
    if (count <= 0) return fail(element, "<" + element.name + "> count must be positive");
    const bool xgmi = element.name == "xgmi";
    const double bandwidth =
        count * (xgmi ? xgmi_bandwidth_per_link() : nvlink_bandwidth_per_link(graph_.nodes[gpu].sm));
    const LinkType type = xgmi ? LinkType::kXgmi : LinkType::kNvLink;

    const std::string* tclass = element.attribute("tclass");
    if (!xgmi && tclass && lower(*tclass) == kNvSwitchClass) {
      // Like NCCL, every switch chip of the host folds into one NVSwitch node.
      if (nvswitch_ < 0) {
        Node nvswitch;
        nvswitch.type = NodeType::kNvSwitch;
        nvswitch.host = host_;
        nvswitch_ = graph_.add_node(nvswitch);
      }
      graph_.add_link({gpu, nvswitch_, type, count, bandwidth, lower(*target)});
      graph_.add_link({nvswitch_, gpu, type, count, bandwidth, lower(*target)});
      return true;
    }
    const auto peer = busids_.find(lower(*target));
    if (peer == busids_.end() || graph_.nodes[peer->second].type != NodeType::kGpu)
      return fail(element, "<" + element.name + "> target " + *target +
                               " is not a GPU or NVSwitch of this system (NVLink to a CPU is not supported)");
    // Each GPU lists its own side, so one direction per element.
    graph_.add_link({gpu, peer->second, type, count, bandwidth, {}});
    return true;
  }

  void link_sockets() {
    for (std::size_t a = 0; a < cpus_.size(); ++a)
      for (std::size_t b = a + 1; b < cpus_.size(); ++b)
        graph_.add_link_pair(cpus_[a], cpus_[b], LinkType::kSys, 1,
                             inter_socket_bandwidth(graph_.nodes[cpus_[a]].vendor));
  }

  static const XmlElement* child_named(const XmlElement& element, const char* name) {
    for (const XmlElement& child : element.children)
      if (child.name == name) return &child;
    return nullptr;
  }

  static void read_string(const XmlElement& element, const char* key, std::string& out) {
    if (const std::string* value = element.attribute(key)) out = *value;
  }

  // Absent attributes keep the default; present ones must be whole integers.
  bool read_int(const XmlElement& element, const char* key, int& out) {
    const std::string* value = element.attribute(key);
    if (!value) return true;
    errno = 0;
    char* end = nullptr;
    const long parsed = std::strtol(value->c_str(), &end, 0);
    if (value->empty() || *end != '\0' || errno != 0 || parsed < INT32_MIN || parsed > INT32_MAX)
      return fail(element, std::string(key) + "=\"" + *value + "\" is not an integer");
    out = static_cast<int>(parsed);
    return true;
  }

  bool read_bool(const XmlElement& element, const char* key, bool& out) {
    int value = out;
    if (!read_int(element, key, value)) return false;
    out = value != 0;
    return true;
  }

  bool fail(const XmlElement& element, const std::string& message) {
    error_ = "line " + std::to_string(element.line) + ": " + message;
    return false;
  }

  SystemGraph& graph_;
  const int host_;
  std::vector<int> cpus_;
  std::map<std::string, int> busids_;
  std::vector<std::pair<int, const XmlElement*>> gpu_links_;
  int nvswitch_ = -1;
  std::string error_;
};


class XmlWriter {
 public:
  explicit XmlWriter(const SystemGraph& graph, int host) : graph_(graph), host_(host) {}

  std::string write() {
    out_ << "<system version=\"1\">\n";
    for (int id = 0; id < static_cast<int>(graph_.nodes.size()); ++id) {
      const Node& node = graph_.nodes[id];
      if (node.host != host_ || node.type != NodeType::kCpu) continue;
      out_ << "  <cpu numaid=\"" << node.numa_id << "\"" << attr("affinity", node.affinity)
           << attr("arch", node.arch) << attr("vendor", node.vendor) << ">\n";
      write_children(id, 2);
      out_ << "  </cpu>\n";
    }
    out_ << "</system>\n";
    return out_.str();
  }

 private:
  void write_children(int parent, int depth) {
    for (int id = 0; id < static_cast<int>(graph_.nodes.size()); ++id) {
      const Node& node = graph_.nodes[id];
      if (node.parent != parent || node.type == NodeType::kNet) continue;
      const std::string pad(2 * depth, ' ');
      if (node.type == NodeType::kNic && node.busid.empty()) {
        write_nic(id, depth);
        continue;
      }
      out_ << pad << "<pci busid=\"" << xml_escape(node.busid) << "\"" << attr("class", node.pci_class)
           << attr("link_speed", node.link_speed) << " link_width=\"" << node.link_width << "\">\n";
      if (node.type == NodeType::kGpu) write_gpu(id, depth + 1);
      else if (node.type == NodeType::kNic) write_nic(id, depth + 1);
      else write_children(id, depth + 1);
      out_ << pad << "</pci>\n";
    }
  }

  void write_gpu(int id, int depth) {
    const Node& gpu = graph_.nodes[id];
    const std::string pad(2 * depth, ' ');
    out_ << pad << "<gpu dev=\"" << gpu.dev << "\" sm=\"" << gpu.sm << "\" rank=\"" << gpu.rank
         << "\" gdr=\"" << gpu.gdr << "\"" << attr("gcn", gpu.gcn) << ">\n";
    for (const Link& link : graph_.links) {
      if (link.from != id || (link.type != LinkType::kNvLink && link.type != LinkType::kXgmi)) continue;
      const Node& peer = graph_.nodes[link.to];
      const bool to_switch = peer.type == NodeType::kNvSwitch;
      out_ << pad << "  <" << (link.type == LinkType::kXgmi ? "xgmi" : "nvlink") << " target=\""
           << xml_escape(to_switch ? link.target_busid : peer.busid) << "\" count=\"" << link.count
           << "\" tclass=\"" << xml_escape(to_switch ? kNvSwitchClass : peer.pci_class) << "\"/>\n";
    }
    out_ << pad << "</gpu>\n";
  }

  void write_nic(int id, int depth) {
    const std::string pad(2 * depth, ' ');
    out_ << pad << "<nic>\n";
    for (const Node& net : graph_.nodes) {
      if (net.type != NodeType::kNet || net.parent != id) continue;
      out_ << pad << "  <net name=\"" << xml_escape(net.name) << "\" dev=\"" << net.dev << "\" speed=\""
           << net.speed_mbps << "\" port=\"" << net.port << "\" gdr=\"" << net.gdr << "\"/>\n";
    }
    out_ << pad << "</nic>\n";
  }

  static std::string attr(const char* key, const std::string& value) {
    return value.empty() ? std::string() : " " + std::string(key) + "=\"" + xml_escape(value) + "\"";
  }

  const SystemGraph& graph_;
  const int host_;
  std::ostringstream out_;
};

}  // namespace

Status load_topology_xml(const std::string& text, SystemGraph& graph, std::string* error) {
  XmlElement root;
  XmlReader reader(text);
  if (!reader.parse_document(root)) {
    if (error) *error = reader.error();
    FERRY_WARN(Topo, "topology XML: %s", reader.error().c_str());
    return Status::kInvalidArgument;
  }
  SystemGraph extended = graph;
  GraphBuilder builder(extended, graph.host_count);
  if (!builder.build(root)) {
    if (error) *error = builder.error();
    FERRY_WARN(Topo, "topology XML: %s", builder.error().c_str());
    return Status::kInvalidArgument;
  }
  ++extended.host_count;
  graph = std::move(extended);
  return Status::kOk;
}

Status load_topology_file(const std::string& path, SystemGraph& graph, std::string* error) {
  std::ifstream file(path);
  if (!file) {
    if (error) *error = "cannot open " + path;
    FERRY_WARN(Topo, "cannot open topology file %s", path.c_str());
    return Status::kUnavailable;
  }
  std::ostringstream text;
  text << file.rdbuf();
  const Status status = load_topology_xml(text.str(), graph, error);
  if (!ok(status) && error) *error = path + ": " + *error;
  return status;
}

std::string dump_topology_xml(const SystemGraph& graph, int host) { return XmlWriter(graph, host).write(); }

std::string xml_escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace ferry
