// libibverbs for the net transport's ib provider, opened at run time
// (dlopen): libferry.so loads on machines without rdma-core, and the
// provider says why it cannot serve instead of failing to load. Calls that
// verbs.h defines inline (posting, polling) go through the device context
// and need nothing here.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <vector>

namespace ferry {

struct IbVerbs {
  ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(ibv_device**);
  const char* (*get_device_name)(ibv_device*);
  ibv_context* (*open_device)(ibv_device*);
  int (*close_device)(ibv_context*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  // nullptr where rdma-core predates dma-buf registration.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  int (*destroy_qp)(ibv_qp*);
};

// The library, loaded once; nullptr with *why (when given) set where
// libibverbs.so.1 or one of the required symbols is missing.
const IbVerbs* ib_verbs(std::string* why = nullptr);

// One port of an RDMA device as the provider chooses among them.
struct IbPort {
  std::string device;  // e.g. mlx5_0
  int port = 1;
  bool active = false;
  bool ethernet = false;  // RoCE (link layer Ethernet), else InfiniBand
  int mtu_bytes = 0;      // active MTU
};

// Every port of every RDMA device here; empty with *why set where there
// is none (or no library). The second form asks verbs (the loaded library's
// or another table of the same calls).
std::vector<IbPort> ib_ports(std::string* why);
std::vector<IbPort> ib_ports(const IbVerbs& verbs, std::string* why);

// The ports FERRY_IB_HCA chooses, in its syntax (NCCL_IB_HCA's): a comma
// list of device[:port] names, each a prefix of a device's name unless the
// list starts with '=' (exact names); '^' first excludes the listed ones
// instead. Empty: every active port. Only active ports are chosen. An empty
// result sets *error (what was asked for and what there is).
std::vector<IbPort> choose_ib_ports(const std::vector<IbPort>& ports, const std::string& spec, std::string* error);

// The port a rank takes among those chosen (not empty): one of those nearest
// its GPU where the topology says which ("device:port" names,
// nearest_net_ports in engine/topology/search.h), else any; the rank modulo
// their number spreads the ranks that share them. *is_nearest (optional):
// whether the port is one of the nearest.
const IbPort& pick_ib_port(const std::vector<IbPort>& chosen, const std::vector<std::string>& nearest, int rank,
                           bool* is_nearest = nullptr);

}  // namespace ferry
