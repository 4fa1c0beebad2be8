#include "tests/unit/soft_verbs.h"

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry::soft_verbs {
namespace {

struct Region {
  std::uintptr_t base;
  std::size_t bytes;
  int access;
};

// A work request that reached its destination before a receive was posted.
struct Inbound {
  bool with_data;  // a send: payload copied into the receive
  std::vector<char> payload;
  std::uint32_t imm_data;
  std::uint32_t byte_len;
  bool has_imm;
  // The sender's request, done once a receive takes it (a device's
  // receiver-not-ready retries hold the send until then).
  std::uint32_t sender_qpn;
  std::uint64_t sender_request;
};

// A posted send request, completed in posting order (a reliable
// connection's rule) once it is done.
struct Due {
  std::uint64_t id;
  std::uint64_t wr_id;
  ibv_wc_opcode opcode;
  ibv_wc_status status;
  bool signaled;
  bool done;
};

struct Queue {
  ibv_qp* qp;
  ibv_qp_state state = IBV_QPS_RESET;
  std::uint32_t dest = 0;
  // Send-queue slots: taken at posting, freed when the completion of a
  // signaled request (for it and the unsignaled ones before it) is polled.
  std::uint32_t max_send = 0, max_recv = 0;
  std::uint32_t outstanding = 0, unsignaled = 0;
  std::uint64_t next_request = 0;
  std::deque<Due> due;
  std::deque<std::pair<std::uint64_t, ibv_sge>> receives;  // posted, in order
  std::deque<Inbound> waiting;
};

struct Device {
  std::mutex mutex;
  std::uint32_t max_message = 64 * 1024;
  std::uint32_t next_key = 0x100;
  std::uint32_t next_qpn = 0x40;
  std::map<std::uint32_t, Region> regions;  // by key (lkey == rkey)
  std::map<std::uint32_t, std::unique_ptr<Queue>> queues;  // by number
  std::map<ibv_cq*, std::deque<ibv_wc>> completions;
  std::map<ibv_cq*, std::deque<std::uint32_t>> frees;  // send slots each completion frees
  Counts counts{};
};

Device& device() {
  static Device d;
  return d;
}

ibv_device g_device{};
char g_name[] = "soft_0";

bool covers(const Device& d, std::uint32_t key, std::uintptr_t addr, std::size_t bytes, int access) {
  auto r = d.regions.find(key);
  if (r == d.regions.end() || (r->second.access & access) != access) return false;
  return addr >= r->second.base && bytes <= r->second.bytes && addr - r->second.base <= r->second.bytes - bytes;
}

void complete(Device& d, ibv_cq* cq, std::uint64_t wr_id, ibv_wc_opcode opcode, ibv_wc_status status,
              std::uint32_t qpn, std::uint32_t byte_len = 0, std::uint32_t imm = 0, bool has_imm = false,
              std::uint32_t frees = 0) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.qp_num = qpn;
  wc.byte_len = byte_len;
  wc.imm_data = imm;
  wc.wc_flags = has_imm ? IBV_WC_WITH_IMM : 0;
  if (status != IBV_WC_SUCCESS) ++d.counts.errors;
  d.completions[cq].push_back(wc);
  d.frees[cq].push_back(frees);
}

// Request id of q is done; those done at the front of its queue complete:
// a signaled one (or one in error) frees its slot and the unsignaled ones'
// before it.
void finish_request(Device& d, Queue& q, std::uint64_t id, ibv_wc_status status) {
  for (Due& due : q.due)
    if (due.id == id) {
      due.done = true;
      due.status = status;
    }
  while (!q.due.empty() && q.due.front().done) {
    const Due due = q.due.front();
    q.due.pop_front();
    if (due.signaled || due.status != IBV_WC_SUCCESS) {
      complete(d, q.qp->send_cq, due.wr_id, due.opcode, due.status, q.qp->qp_num, 0, 0, false, q.unsignaled + 1);
      q.unsignaled = 0;
    } else {
      ++q.unsignaled;
    }
  }
}

void finish_request(Device& d, Queue& q, std::uint64_t id, ibv_wc_status status);

// Hands inbound work to the destination's next receive, if it has one.
void deliver(Device& d, Queue& to) {
  while (!to.waiting.empty() && !to.receives.empty()) {
    Inbound in = std::move(to.waiting.front());
    to.waiting.pop_front();
    auto [wr_id, sge] = to.receives.front();
    to.receives.pop_front();
    if (in.with_data) {
      if (in.payload.size() > sge.length ||
          !covers(d, sge.lkey, sge.addr, in.payload.size(), IBV_ACCESS_LOCAL_WRITE)) {
        complete(d, to.qp->recv_cq, wr_id, IBV_WC_RECV, IBV_WC_LOC_PROT_ERR, to.qp->qp_num);
        continue;
      }
      std::memcpy(reinterpret_cast<void*>(sge.addr), in.payload.data(), in.payload.size());
    }
    complete(d, to.qp->recv_cq, wr_id, in.has_imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV, IBV_WC_SUCCESS,
             to.qp->qp_num, in.byte_len, in.imm_data, in.has_imm);
    auto sender = d.queues.find(in.sender_qpn);
    if (sender != d.queues.end()) finish_request(d, *sender->second, in.sender_request, IBV_WC_SUCCESS);
  }
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  Queue& from = *d.queues.at(qp->qp_num);
  for (; wr; wr = wr->next) {
    if (from.state != IBV_QPS_RTS || wr->num_sge > 1) {
      *bad = wr;
      return EINVAL;
    }
    if (from.outstanding >= from.max_send) {
      *bad = wr;
      return ENOMEM;
    }
    ++from.outstanding;
    const std::uint64_t request = from.next_request++;
    const std::size_t length = wr->num_sge ? wr->sg_list[0].length : 0;
    const bool is_inline = wr->send_flags & IBV_SEND_INLINE;
    const bool signaled = wr->send_flags & IBV_SEND_SIGNALED;
    const ibv_wc_opcode done_as = wr->opcode == IBV_WR_SEND ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
    from.due.push_back({request, wr->wr_id, done_as, IBV_WC_SUCCESS, signaled, false});
    if (length > d.max_message ||
        (length && !is_inline && !covers(d, wr->sg_list[0].lkey, wr->sg_list[0].addr, length, 0))) {
      finish_request(d, from, request, IBV_WC_LOC_PROT_ERR);
      continue;
    }
    auto to = d.queues.find(from.dest);
    if (to == d.queues.end() || to->second->state < IBV_QPS_RTR) {
      finish_request(d, from, request, IBV_WC_RETRY_EXC_ERR);
      continue;
    }
    const char* source = length ? reinterpret_cast<const char*>(wr->sg_list[0].addr) : nullptr;
    if (wr->opcode == IBV_WR_SEND) {
      to->second->waiting.push_back({true, std::vector<char>(source, source + length), 0,
                                     static_cast<std::uint32_t>(length), false, qp->qp_num, request});
      ++d.counts.sends;
      deliver(d, *to->second);
      continue;
    } else if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      if (length && !covers(d, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, length, IBV_ACCESS_REMOTE_WRITE)) {
        finish_request(d, from, request, IBV_WC_REM_ACCESS_ERR);
        continue;
      }
      if (length) std::memcpy(reinterpret_cast<void*>(wr->wr.rdma.remote_addr), source, length);
      ++d.counts.writes;
      if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        to->second->waiting.push_back({false, {}, wr->imm_data, static_cast<std::uint32_t>(length), true, qp->qp_num,
                                       request});
        deliver(d, *to->second);
        continue;
      }
    } else {
      *bad = wr;
      return EINVAL;
    }
    finish_request(d, from, request, IBV_WC_SUCCESS);
  }
  return 0;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  Queue& q = *d.queues.at(qp->qp_num);
  for (; wr; wr = wr->next) {
    if (q.state < IBV_QPS_INIT || wr->num_sge != 1) {
      *bad = wr;
      return EINVAL;
    }
    if (q.receives.size() >= q.max_recv) {
      *bad = wr;
      return ENOMEM;
    }
    q.receives.push_back({wr->wr_id, wr->sg_list[0]});
  }
  deliver(d, q);
  return 0;
}

int poll_cq(ibv_cq* cq, int entries, ibv_wc* wc) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  std::deque<ibv_wc>& queue = d.completions[cq];
  std::deque<std::uint32_t>& frees = d.frees[cq];
  int n = 0;
  for (; n < entries && !queue.empty(); ++n) {
    wc[n] = queue.front();
    queue.pop_front();
    auto q = d.queues.find(wc[n].qp_num);
    if (q != d.queues.end()) q->second->outstanding -= frees.front();
    frees.pop_front();
  }
  return n;
}

ibv_device** get_device_list(int* count) {
  *count = 1;
  auto** list = new ibv_device*[2];
  list[0] = &g_device;
  list[1] = nullptr;
  return list;
}
void free_device_list(ibv_device** list) { delete[] list; }
const char* get_device_name(ibv_device*) { return g_name; }
ibv_context* open_device(ibv_device* dev) {
  auto* context = new ibv_context{};
  context->device = dev;
  context->ops.post_send = post_send;
  context->ops.post_recv = post_recv;
  context->ops.poll_cq = poll_cq;
  return context;
}
int close_device(ibv_context* context) {
  delete context;
  return 0;
}
int query_device(ibv_context*, ibv_device_attr* attr) {
  *attr = ibv_device_attr{};
  attr->phys_port_cnt = 1;
  return 0;
}
int query_port(ibv_context*, uint8_t port, ibv_port_attr* attr) {
  *attr = ibv_port_attr{};
  if (port != 1) return EINVAL;
  attr->state = IBV_PORT_ACTIVE;
  attr->active_mtu = IBV_MTU_4096;
  attr->lid = 1;
  attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  attr->max_msg_sz = d.max_message;
  return 0;
}
int query_gid(ibv_context*, uint8_t, int, ibv_gid* gid) {
  *gid = ibv_gid{};
  return 0;
}
ibv_pd* alloc_pd(ibv_context* context) {
  auto* pd = new ibv_pd{};
  pd->context = context;
  return pd;
}
int dealloc_pd(ibv_pd* pd) {
  delete pd;
  return 0;
}
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t bytes, int access) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  auto* mr = new ibv_mr{};
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = bytes;
  mr->lkey = mr->rkey = d.next_key++;
  d.regions[mr->lkey] = {reinterpret_cast<std::uintptr_t>(addr), bytes, access | IBV_ACCESS_LOCAL_WRITE};
  ++d.counts.registrations;
  return mr;
}
int dereg_mr(ibv_mr* mr) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.regions.erase(mr->lkey);
  delete mr;
  return 0;
}
ibv_cq* create_cq(ibv_context* context, int cqe, void*, ibv_comp_channel*, int) {
  auto* cq = new ibv_cq{};
  cq->context = context;
  cq->cqe = cqe;
  return cq;
}
int destroy_cq(ibv_cq* cq) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.completions.erase(cq);
  d.frees.erase(cq);
  delete cq;
  return 0;
}
ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (init->qp_type != IBV_QPT_RC) return nullptr;
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  auto* qp = new ibv_qp{};
  qp->context = pd->context;
  qp->pd = pd;
  qp->send_cq = init->send_cq;
  qp->recv_cq = init->recv_cq;
  qp->qp_num = d.next_qpn++;
  qp->qp_type = IBV_QPT_RC;
  auto queue = std::make_unique<Queue>();
  queue->qp = qp;
  queue->max_send = init->cap.max_send_wr;
  queue->max_recv = init->cap.max_recv_wr;
  d.queues[qp->qp_num] = std::move(queue);
  return qp;
}
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  Queue& q = *d.queues.at(qp->qp_num);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  const ibv_qp_state next = attr->qp_state;
  // The attributes each step must carry.
  if (next == IBV_QPS_INIT && (q.state != IBV_QPS_RESET || !(mask & IBV_QP_PORT) || !(mask & IBV_QP_ACCESS_FLAGS)))
    return EINVAL;
  if (next == IBV_QPS_RTR) {
    if (q.state != IBV_QPS_INIT || !(mask & IBV_QP_DEST_QPN) || !(mask & IBV_QP_AV) || !(mask & IBV_QP_PATH_MTU) ||
        attr->ah_attr.dlid == 0)
      return EINVAL;
    q.dest = attr->dest_qp_num;
  }
  if (next == IBV_QPS_RTS && (q.state != IBV_QPS_RTR || !(mask & IBV_QP_SQ_PSN))) return EINVAL;
  q.state = next;
  qp->state = next;
  return 0;
}
int destroy_qp(ibv_qp* qp) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mutex);
  // Work waiting for this queue pair's receives fails at its senders, as
  // their retries run out.
  for (const Inbound& in : d.queues.at(qp->qp_num)->waiting) {
    auto sender = d.queues.find(in.sender_qpn);
    if (sender != d.queues.end()) finish_request(d, *sender->second, in.sender_request, IBV_WC_RETRY_EXC_ERR);
  }
  d.queues.erase(qp->qp_num);
  delete qp;
  return 0;
}

IbVerbs make_table() {
  IbVerbs v{};
  v.get_device_list = get_device_list;
  v.free_device_list = free_device_list;
  v.get_device_name = get_device_name;
  v.open_device = open_device;
  v.close_device = close_device;
  v.query_device = query_device;
  v.query_port = query_port;
  v.query_gid = query_gid;
  v.alloc_pd = alloc_pd;
  v.dealloc_pd = dealloc_pd;
  v.reg_mr = reg_mr;
  v.dereg_mr = dereg_mr;
  v.create_cq = create_cq;
  v.destroy_cq = destroy_cq;
  v.create_qp = create_qp;
  v.modify_qp = modify_qp;
  v.destroy_qp = destroy_qp;
  return v;
}

}  // namespace

const IbVerbs& verbs(std::uint32_t max_message_bytes) {
  static const IbVerbs table = make_table();
  std::lock_guard<std::mutex> lock(device().mutex);
  device().max_message = max_message_bytes;
  return table;
}

Counts counts() {
  std::lock_guard<std::mutex> lock(device().mutex);
  Counts c = device().counts;
  c.live_regions = device().regions.size();
  return c;
}

}  // namespace ferry::soft_verbs
