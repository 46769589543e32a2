#include "api/request.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/types.h"
#include "core/entry_pool.h"
#include "core/message.h"
#include "core/status.h"

namespace hvdlite::api {

// Note [Codes defined once] in api.h: the core's enums carry api.h's values.
// A code added to one list and not the other fails the counts below.
static_assert(HVDLITE_NUM_OP_TYPES == kNumOpTypes, "api.h and types.h disagree on the op types");
static_assert(HVDLITE_OP_ALLREDUCE == static_cast<int>(OpType::kAllreduce));
static_assert(HVDLITE_OP_ALLGATHER == static_cast<int>(OpType::kAllgather));
static_assert(HVDLITE_OP_BROADCAST == static_cast<int>(OpType::kBroadcast));
static_assert(HVDLITE_OP_ALLTOALL == static_cast<int>(OpType::kAlltoall));
static_assert(HVDLITE_OP_REDUCESCATTER == static_cast<int>(OpType::kReducescatter));
static_assert(HVDLITE_OP_BARRIER == static_cast<int>(OpType::kBarrier));
static_assert(HVDLITE_OP_JOIN == static_cast<int>(OpType::kJoin));
static_assert(HVDLITE_OP_ADD_PROCESS_SET == static_cast<int>(OpType::kAddProcessSet));
static_assert(HVDLITE_OP_REMOVE_PROCESS_SET == static_cast<int>(OpType::kRemoveProcessSet));

static_assert(HVDLITE_NUM_REDUCE_OPS == kNumUserReduceOps,
              "api.h and types.h disagree on the reduce ops");
static_assert(HVDLITE_REDUCE_SUM == static_cast<int>(ReduceOp::kSum));
static_assert(HVDLITE_REDUCE_AVERAGE == static_cast<int>(ReduceOp::kAverage));
static_assert(HVDLITE_REDUCE_MIN == static_cast<int>(ReduceOp::kMin));
static_assert(HVDLITE_REDUCE_MAX == static_cast<int>(ReduceOp::kMax));
static_assert(HVDLITE_REDUCE_PRODUCT == static_cast<int>(ReduceOp::kProduct));
static_assert(HVDLITE_REDUCE_ADASUM == static_cast<int>(ReduceOp::kAdasum));

static_assert(HVDLITE_NUM_DTYPES == kNumDataTypes, "api.h and types.h disagree on the dtypes");
static_assert(HVDLITE_DTYPE_UINT8 == static_cast<int>(DataType::kUInt8));
static_assert(HVDLITE_DTYPE_INT8 == static_cast<int>(DataType::kInt8));
static_assert(HVDLITE_DTYPE_INT32 == static_cast<int>(DataType::kInt32));
static_assert(HVDLITE_DTYPE_INT64 == static_cast<int>(DataType::kInt64));
static_assert(HVDLITE_DTYPE_FLOAT16 == static_cast<int>(DataType::kFloat16));
static_assert(HVDLITE_DTYPE_BFLOAT16 == static_cast<int>(DataType::kBFloat16));
static_assert(HVDLITE_DTYPE_FLOAT32 == static_cast<int>(DataType::kFloat32));
static_assert(HVDLITE_DTYPE_FLOAT64 == static_cast<int>(DataType::kFloat64));
static_assert(HVDLITE_DTYPE_BOOL == static_cast<int>(DataType::kBool));
static_assert(HVDLITE_DTYPE_INT16 == static_cast<int>(DataType::kInt16));
static_assert(HVDLITE_DTYPE_UINT16 == static_cast<int>(DataType::kUInt16));

static_assert(HVDLITE_OK == static_cast<int>(core::StatusKind::kOk));
static_assert(HVDLITE_INVALID_ARGUMENT == static_cast<int>(core::StatusKind::kInvalidArgument));
static_assert(HVDLITE_COLLECTIVE_ERROR == static_cast<int>(core::StatusKind::kCollective));
static_assert(HVDLITE_TRANSPORT_ERROR == static_cast<int>(core::StatusKind::kTransport));
static_assert(HVDLITE_TIMEOUT == static_cast<int>(core::StatusKind::kTimeout));
static_assert(HVDLITE_SHUTDOWN == static_cast<int>(core::StatusKind::kShutdown));
static_assert(HVDLITE_PRECONDITION_ERROR == static_cast<int>(core::StatusKind::kPrecondition));
static_assert(HVDLITE_DIVERGENCE_ERROR == static_cast<int>(core::StatusKind::kDivergence));
static_assert(HVDLITE_OUTSIDE_RUN_ERROR == static_cast<int>(core::StatusKind::kOutsideRun));

namespace {

constexpr uint32_t kKnownFlags = HVDLITE_REQUEST_NO_WAKE | HVDLITE_REQUEST_CALLER_WAITS | HVDLITE_REQUEST_OUTPUT_ON_STREAM;

// "allreduce of 'grad/w'", or "request 'grad/w'" while the op is unknown.
std::string what(const hvdlite_request& r) {
  std::string name = std::string("'") + r.name + "'";
  if (r.op < 0 || r.op >= HVDLITE_NUM_OP_TYPES) return "request " + name;
  return std::string(opTypeName(static_cast<OpType>(r.op))) + " of " + name;
}

[[noreturn]] void refuse(const hvdlite_request& r, const std::string& why) {
  throw InvalidArgument(what(r) + ": " + why);
}

// "sum, average, ..." for codes 0..count-1.
template <typename Code, typename NameOf>
std::string choices(int count, NameOf name_of) {
  std::string out;
  for (int code = 0; code < count; ++code) {
    out += (code ? ", " : "") + std::to_string(code) + " (" + name_of(static_cast<Code>(code)) + ")";
  }
  return out;
}

// Note [Checks inline, messages out of line]
// Every request passes these checks, and nearly every one passes them all.
// Each check is a comparison inline in buildEntry; the message that a failed
// one builds (strings, a list of choices) is in a function of its own,
// called only then, so the common path makes no call for it. Before, the
// compiler called each check, the message code beside it: buildEntry cost
// 507 instructions of a 4-byte numpy allreduce_, 357 after (callgrind,
// 1 process, bench/call_profile.py).
template <typename Code, typename NameOf>
[[noreturn, gnu::noinline, gnu::cold]] void refuseCode(const hvdlite_request& r, const char* field, int32_t code,
                                                      int count, NameOf name_of) {
  refuse(r, "unknown " + std::string(field) + " code " + std::to_string(code) + "; use one of " +
                choices<Code>(count, name_of));
}

template <typename Code, typename NameOf>
inline void requireCode(const hvdlite_request& r, const char* field, int32_t code, int count, NameOf name_of) {
  if (code >= 0 && code < count) return;
  refuseCode<Code>(r, field, code, count, name_of);
}

[[noreturn, gnu::noinline, gnu::cold]] void refuseArray(const hvdlite_request& r, const char* field, int32_t count) {
  if (count < 0) refuse(r, std::string(field) + ": negative length " + std::to_string(count));
  refuse(r, std::string(field) + " is NULL but its length is " + std::to_string(count));
}

// A (pointer, count) pair of the request into `out`, whose buffer a kept
// entry brings (Note [Entries kept for reuse] in core/entry_pool.cc).
inline void assignArray(const hvdlite_request& r, const char* field, const int64_t* data, int32_t count,
                        std::vector<int64_t>& out) {
  if (count == 0) {
    out.clear();  // most requests' splits and ranks: no assign's call
    return;
  }
  if (count < 0 || !data) refuseArray(r, field, count);
  out.assign(data, data + count);
}

[[noreturn, gnu::noinline, gnu::cold]] void refuseScale(const hvdlite_request& r, const char* field, double value) {
  refuse(r, std::string(field) + " " + std::to_string(value) + " is not a finite number");
}

inline void requireScale(const hvdlite_request& r, const char* field, double value) {
  if (!std::isfinite(value)) refuseScale(r, field, value);
}

// Tensor collectives with data must point at it (an allreduce of 1000 floats
// at address 0 would otherwise crash the background thread on every rank).
void requireBuffers(const hvdlite_request& r, const core::TensorEntry& e) {
  if (!isTensorCollective(e.op)) return;
  for (auto d : e.shape) {
    if (d <= 0) return;  // nothing to read (a negative dimension: entry_validation.cc says so)
  }
  if (!r.input) refuse(r, "input is NULL for a tensor of shape " + core::shapeString(e.shape));
  bool writes_output = e.op == OpType::kAllreduce || e.op == OpType::kBroadcast;
  if (writes_output && !r.output) {
    refuse(r, "output is NULL for a tensor of shape " + core::shapeString(e.shape));
  }
}

}  // namespace

core::TensorEntryPtr buildEntry(const hvdlite_request& r, core::CallSiteTable* sites) {
  if (!r.name) {
    throw InvalidArgument("a request (op code " + std::to_string(r.op) + ") has no tensor name");
  }
  requireCode<OpType>(r, "op", r.op, HVDLITE_NUM_OP_TYPES, opTypeName);
  if (r.name[0] == '\0') refuse(r, "the tensor name is empty");
  requireCode<DataType>(r, "dtype", r.dtype, HVDLITE_NUM_DTYPES, dtypeName);
  requireCode<ReduceOp>(r, "reduce op", r.reduce_op, HVDLITE_NUM_REDUCE_OPS, reduceOpName);
  if (r.flags & ~kKnownFlags) refuse(r, "unknown flags " + std::to_string(r.flags & ~kKnownFlags));
  if (r.process_set_id < 0) {
    refuse(r, "process set id " + std::to_string(r.process_set_id) + " is negative");
  }
  if (r.device < -1) {
    refuse(r, "device " + std::to_string(r.device) + " is not a device (-1: host memory)");
  }
  if (r.root_rank < 0) refuse(r, "root_rank " + std::to_string(r.root_rank) + " is negative");
  requireScale(r, "prescale factor", r.prescale);
  requireScale(r, "postscale factor", r.postscale);
  bool grouped = r.group && r.group[0] != '\0';
  if (r.group_size < 0 || grouped != (r.group_size > 0)) {
    refuse(r, "group '" + std::string(r.group ? r.group : "") + "' with group size " +
                  std::to_string(r.group_size) + "; a group needs a name and a size >= 1, or neither");
  }
  if (r.op == HVDLITE_OP_REMOVE_PROCESS_SET && r.removed_process_set_id <= 0) {
    refuse(r, "process set " + std::to_string(r.removed_process_set_id) +
                  " cannot be removed; give the id of an added set (>= 1)");
  }

  auto entry = core::newEntry();
  entry->op = static_cast<OpType>(r.op);
  if (entry->name != r.name) entry->name = r.name;  // Note [A kept entry's name] in core/entry_pool.cc
  entry->process_set_id = r.process_set_id;
  entry->dtype = static_cast<DataType>(r.dtype);
  assignArray(r, "shape", r.shape, r.ndim, entry->shape);
  entry->input = r.input;
  entry->output = r.output;
  if (r.output && (r.op == HVDLITE_OP_ALLGATHER || r.op == HVDLITE_OP_ALLTOALL ||
                   r.op == HVDLITE_OP_REDUCESCATTER)) {
    if (r.output_bytes < 0) {
      refuse(r, "output_bytes " + std::to_string(r.output_bytes) + " is negative");
    }
    entry->output_bytes = r.output_bytes;
  }
  requireBuffers(r, *entry);
  entry->reduce_op = static_cast<ReduceOp>(r.reduce_op);
  entry->prescale = r.prescale;
  entry->postscale = r.postscale;
  entry->root_rank = r.root_rank;
  assignArray(r, "splits", r.splits, r.num_splits, entry->splits);
  entry->device = r.device;
  entry->ready_event = r.ready_event;
  entry->stream = r.stream;
  if (grouped) entry->group = r.group;
  entry->group_size = r.group_size;
  assignArray(r, "process set ranks", r.process_set_ranks, r.num_process_set_ranks, entry->process_set_ranks);
  entry->removed_process_set_id = r.removed_process_set_id;
  entry->caller_waits = (r.flags & HVDLITE_REQUEST_CALLER_WAITS) != 0;
  if (sites && r.call_site_file && r.call_site_file[0] != '\0') {
    entry->call_site = sites->intern(r.call_site_file, r.call_site_line,
                                     r.call_site_function ? r.call_site_function : "");
  }
  return entry;
}

}  // namespace hvdlite::api
