#include "engine/bootstrap/pmix_bootstrap.h"

#include <pmix.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

#include "engine/common/params.h"

namespace ferry {
namespace {

// A job-level number, whatever integer type the server stored it as.
bool value_to_u64(const pmix_value_t* value, std::uint64_t* out) {
  switch (value->type) {
    case PMIX_UINT32: *out = value->data.uint32; return true;
    case PMIX_UINT64: *out = value->data.uint64; return true;
    case PMIX_SIZE: *out = value->data.size; return true;
    case PMIX_UINT: *out = value->data.uint; return true;
    case PMIX_UINT16: *out = value->data.uint16; return true;
    case PMIX_INT: if (value->data.integer < 0) return false; *out = static_cast<std::uint64_t>(value->data.integer); return true;
    case PMIX_INT32: if (value->data.int32 < 0) return false; *out = static_cast<std::uint64_t>(value->data.int32); return true;
    case PMIX_INT64: if (value->data.int64 < 0) return false; *out = static_cast<std::uint64_t>(value->data.int64); return true;
    default: return false;
  }
}

class PmixBootstrap final : public Bootstrap {
 public:
  PmixBootstrap(const pmix_proc_t& me, int size) : me_(me), size_(size) {
    PMIX_LOAD_PROCID(&all_, me_.nspace, PMIX_RANK_WILDCARD);
  }
  ~PmixBootstrap() override {
    // Drops the reference taken by make_pmix_bootstrap's PMIx_Init; the
    // client stays up while another owner (MPI) still holds one.
    pmix_status_t rc = PMIx_Finalize(nullptr, 0);
    if (rc != PMIX_SUCCESS) FERRY_WARN(Bootstrap, "PMIx_Finalize: %s", PMIx_Error_string(rc));
  }

  int rank() const override { return static_cast<int>(me_.rank); }
  int size() const override { return size_; }

  Status allgather(const void* mine, void* all, std::size_t bytes) override {
    if (bytes == 0) return fence(false, "allgather");
    if (mine == nullptr || all == nullptr) return Status::kInvalidArgument;
    char key[64];
    std::snprintf(key, sizeof key, "ferry.ag.%llu", static_cast<unsigned long long>(sequence_++));

    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_BYTE_OBJECT;
    // PMIx_Put copies the value; it does not keep or modify bytes.
    value.data.bo.bytes = static_cast<char*>(const_cast<void*>(mine));
    value.data.bo.size = bytes;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &value);
    if (rc != PMIX_SUCCESS) {
      FERRY_WARN(Bootstrap, "PMIx_Put(%s, %zu bytes): %s", key, bytes, PMIx_Error_string(rc));
      return Status::kSystemError;
    }
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) {
      FERRY_WARN(Bootstrap, "PMIx_Commit(%s): %s", key, PMIx_Error_string(rc));
      return Status::kSystemError;
    }
    FERRY_CHECK(fence(true, "allgather"));

    char* out = static_cast<char*>(all);
    for (int peer = 0; peer < size_; ++peer) {
      char* slot = out + static_cast<std::size_t>(peer) * bytes;
      if (peer == rank()) {
        std::memmove(slot, mine, bytes);
        continue;
      }
      pmix_proc_t proc;
      PMIX_LOAD_PROCID(&proc, me_.nspace, static_cast<pmix_rank_t>(peer));
      pmix_value_t* got = nullptr;
      rc = PMIx_Get(&proc, key, nullptr, 0, &got);
      if (rc != PMIX_SUCCESS || got == nullptr) {
        FERRY_WARN(Bootstrap, "PMIx_Get(%s) from rank %d: %s", key, peer, PMIx_Error_string(rc));
        if (got != nullptr) PMIX_VALUE_RELEASE(got);
        return Status::kSystemError;
      }
      Status status = Status::kOk;
      if (got->type != PMIX_BYTE_OBJECT) {
        FERRY_WARN(Bootstrap, "allgather %s: rank %d's value has PMIx type %d, not a byte object", key, peer,
                   static_cast<int>(got->type));
        status = Status::kInternal;
      } else if (got->data.bo.size != bytes) {
        FERRY_WARN(Bootstrap, "allgather %s: rank %d contributed %zu bytes, expected %zu (ranks disagree on the "
                   "size, or are not in the same call)", key, peer, got->data.bo.size, bytes);
        status = Status::kInvalidArgument;
      } else {
        std::memcpy(slot, got->data.bo.bytes, bytes);
      }
      PMIX_VALUE_RELEASE(got);
      if (!ok(status)) return status;
    }
    return Status::kOk;
  }

  Status barrier() override { return fence(false, "barrier"); }

 private:
  Status fence(bool collect, const char* what) {
    bool collect_data = collect;
    int timeout = static_cast<int>(params().bootstrap_timeout);
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    std::size_t ninfo = 0;
    if (collect_data) PMIX_INFO_LOAD(&info[ninfo++], PMIX_COLLECT_DATA, &collect_data, PMIX_BOOL);
    if (timeout > 0) PMIX_INFO_LOAD(&info[ninfo++], PMIX_TIMEOUT, &timeout, PMIX_INT);
    pmix_status_t rc = PMIx_Fence(&all_, 1, ninfo > 0 ? info : nullptr, ninfo);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc == PMIX_SUCCESS) return Status::kOk;
    FERRY_WARN(Bootstrap, "PMIx_Fence for %s among %d ranks: %s", what, size_, PMIx_Error_string(rc));
    return rc == PMIX_ERR_TIMEOUT ? Status::kTimeout : Status::kSystemError;
  }

  pmix_proc_t me_;
  pmix_proc_t all_;
  int size_;
  std::uint64_t sequence_ = 0;
};

Status fail(std::string* failure, Status status, const char* text, pmix_status_t rc) {
  FERRY_WARN(Bootstrap, "PMIx bootstrap: %s: %s", text, PMIx_Error_string(rc));
  if (failure != nullptr) {
    try {
      *failure = std::string(text) + ": " + PMIx_Error_string(rc);
    } catch (...) {
    }
  }
  return status;
}

}  // namespace

Status make_pmix_bootstrap(std::unique_ptr<Bootstrap>* out, std::string* failure) {
  if (out == nullptr) return Status::kInvalidArgument;
  out->reset();
  const bool already = PMIx_Initialized() != 0;
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  // Reference counted: when MPI (or anyone) already initialized the client,
  // this only returns our identity and takes one more reference.
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS)
    return fail(failure, Status::kUnavailable, "PMIx_Init (not started by a PMIx launcher?)", rc);

  pmix_proc_t wildcard;
  PMIX_LOAD_PROCID(&wildcard, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* value = nullptr;
  rc = PMIx_Get(&wildcard, PMIX_JOB_SIZE, nullptr, 0, &value);
  std::uint64_t size = 0;
  const bool have_size = rc == PMIX_SUCCESS && value != nullptr && value_to_u64(value, &size);
  if (value != nullptr) PMIX_VALUE_RELEASE(value);
  if (!have_size || size == 0 || size > 0x7fffffffu || me.rank >= size) {
    Status status = fail(failure, Status::kSystemError, "PMIx_Get(PMIX_JOB_SIZE) gave no usable job size",
                         rc == PMIX_SUCCESS ? PMIX_ERR_BAD_PARAM : rc);
    PMIx_Finalize(nullptr, 0);
    return status;
  }

  try {
    *out = std::make_unique<PmixBootstrap>(me, static_cast<int>(size));
  } catch (const std::bad_alloc&) {
    PMIx_Finalize(nullptr, 0);
    return Status::kOutOfMemory;
  }
  FERRY_INFO(Bootstrap, "PMIx bootstrap: namespace %s, rank %u of %llu (%s)", me.nspace,
             static_cast<unsigned>(me.rank), static_cast<unsigned long long>(size),
             already ? "joined an existing PMIx client" : "initialized PMIx");
  return Status::kOk;
}

}  // namespace ferry
