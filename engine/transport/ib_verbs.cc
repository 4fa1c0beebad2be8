#include "engine/transport/ib_verbs.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace ferry {
namespace {

template <typename Function>
bool resolve(void* library, const char* name, Function* out, bool required, std::string* missing) {
  *out = reinterpret_cast<Function>(dlsym(library, name));
  if (!*out && required && missing->empty()) *missing = name;
  return *out || !required;
}

struct Loaded {
  IbVerbs verbs{};
  bool ok = false;
  std::string why;
};

const Loaded& loaded() {
  static const Loaded result = [] {
    Loaded l;
    void* library = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      l.why = "libibverbs.so.1 not found (install rdma-core)";
      return l;
    }
    std::string missing;
    IbVerbs& v = l.verbs;
    bool all = resolve(library, "ibv_get_device_list", &v.get_device_list, true, &missing);
    all = resolve(library, "ibv_free_device_list", &v.free_device_list, true, &missing) && all;
    all = resolve(library, "ibv_get_device_name", &v.get_device_name, true, &missing) && all;
    all = resolve(library, "ibv_open_device", &v.open_device, true, &missing) && all;
    all = resolve(library, "ibv_close_device", &v.close_device, true, &missing) && all;
    all = resolve(library, "ibv_query_device", &v.query_device, true, &missing) && all;
    all = resolve(library, "ibv_query_port", &v.query_port, true, &missing) && all;
    all = resolve(library, "ibv_query_gid", &v.query_gid, true, &missing) && all;
    all = resolve(library, "ibv_alloc_pd", &v.alloc_pd, true, &missing) && all;
    all = resolve(library, "ibv_dealloc_pd", &v.dealloc_pd, true, &missing) && all;
    all = resolve(library, "ibv_reg_mr", &v.reg_mr, true, &missing) && all;
    resolve(library, "ibv_reg_dmabuf_mr", &v.reg_dmabuf_mr, false, &missing);
    all = resolve(library, "ibv_dereg_mr", &v.dereg_mr, true, &missing) && all;
    all = resolve(library, "ibv_create_cq", &v.create_cq, true, &missing) && all;
    all = resolve(library, "ibv_destroy_cq", &v.destroy_cq, true, &missing) && all;
    all = resolve(library, "ibv_create_qp", &v.create_qp, true, &missing) && all;
    all = resolve(library, "ibv_modify_qp", &v.modify_qp, true, &missing) && all;
    all = resolve(library, "ibv_destroy_qp", &v.destroy_qp, true, &missing) && all;
    if (!all) {
      l.why = "libibverbs.so.1 lacks " + missing;
      return l;
    }
    l.ok = true;
    return l;
  }();
  return result;
}

int mtu_bytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

// One entry of FERRY_IB_HCA: a device name (or its prefix) and a port (0: any).
struct Wanted {
  std::string device;
  int port = 0;
};

std::vector<Wanted> parse_spec(std::string spec, bool* exclude, bool* exact) {
  *exclude = !spec.empty() && spec[0] == '^';
  if (*exclude) spec.erase(0, 1);
  *exact = !spec.empty() && spec[0] == '=';
  if (*exact) spec.erase(0, 1);
  std::vector<Wanted> wanted;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t end = std::min(spec.find(',', start), spec.size());
    std::string item = spec.substr(start, end - start);
    start = end + 1;
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
    if (item.empty()) continue;
    Wanted w;
    const std::size_t colon = item.find(':');
    w.device = item.substr(0, colon);
    if (colon != std::string::npos) w.port = std::atoi(item.c_str() + colon + 1);
    wanted.push_back(w);
  }
  return wanted;
}

bool matches(const Wanted& w, const IbPort& port, bool exact) {
  const bool name = exact ? port.device == w.device : port.device.compare(0, w.device.size(), w.device) == 0;
  return name && (w.port == 0 || w.port == port.port);
}

}  // namespace

const IbVerbs* ib_verbs(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.verbs : nullptr;
}

std::vector<IbPort> ib_ports(std::string* why) {
  const IbVerbs* v = ib_verbs(why);
  return v ? ib_ports(*v, why) : std::vector<IbPort>{};
}

std::vector<IbPort> ib_ports(const IbVerbs& verbs, std::string* why) {
  std::vector<IbPort> ports;
  const IbVerbs* v = &verbs;
  int count = 0;
  ibv_device** devices = v->get_device_list(&count);
  if (!devices || count == 0) {
    if (devices) v->free_device_list(devices);
    *why = "no RDMA device";
    return ports;
  }
  for (int d = 0; d < count; ++d) {
    ibv_context* context = v->open_device(devices[d]);
    if (!context) continue;
    ibv_device_attr attr{};
    if (v->query_device(context, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr port{};
        if (v->query_port(context, static_cast<uint8_t>(p), &port) != 0) continue;
        ports.push_back({v->get_device_name(devices[d]), p, port.state == IBV_PORT_ACTIVE,
                         port.link_layer == IBV_LINK_LAYER_ETHERNET, mtu_bytes(port.active_mtu)});
      }
    }
    v->close_device(context);
  }
  v->free_device_list(devices);
  if (ports.empty()) *why = "no RDMA port could be queried";
  return ports;
}

std::vector<IbPort> choose_ib_ports(const std::vector<IbPort>& ports, const std::string& spec, std::string* error) {
  bool exclude = false, exact = false;
  const std::vector<Wanted> wanted = parse_spec(spec, &exclude, &exact);
  std::vector<IbPort> chosen;
  for (const IbPort& port : ports) {
    if (!port.active) continue;
    bool listed = false;
    for (const Wanted& w : wanted) listed = listed || matches(w, port, exact);
    if (wanted.empty() || listed != exclude) chosen.push_back(port);
  }
  if (chosen.empty()) {
    std::string present;
    for (const IbPort& port : ports)
      present += (present.empty() ? "" : ", ") + port.device + ":" + std::to_string(port.port) +
                 (port.active ? "" : " (down)");
    *error = (spec.empty() ? std::string("no active RDMA port") : "FERRY_IB_HCA=" + spec + " chooses no active RDMA port") +
             " (present: " + (present.empty() ? std::string("none") : present) + ")";
  }
  return chosen;
}

const IbPort& pick_ib_port(const std::vector<IbPort>& chosen, const std::vector<std::string>& nearest, int rank,
                           bool* is_nearest) {
  std::vector<const IbPort*> near;
  for (const IbPort& port : chosen)
    if (std::find(nearest.begin(), nearest.end(), port.device + ":" + std::to_string(port.port)) != nearest.end())
      near.push_back(&port);
  if (is_nearest) *is_nearest = !near.empty();
  const std::size_t r = static_cast<std::size_t>(rank < 0 ? 0 : rank);
  return near.empty() ? chosen[r % chosen.size()] : *near[r % near.size()];
}

}  // namespace ferry
