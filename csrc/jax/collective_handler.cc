// The XLA FFI handler through which jax.jit-compiled steps reach the core
// (hvdlite/jax/ffi.py lowers every hvdlite.jax collective inside jit to one
// custom call of it). Compiled on first use against the installed jaxlib's
// headers and linked to the already-loaded libhvdlite, like the TF ops.
//
// One call carries one or more arrays of one kind of collective (a pytree of
// gradients is one call): it queues one request per array through api.h, then
// blocks the XLA thread until the core has completed all of them. Blocking is
// safe because the core's background thread does the work and the calls of a
// step run in one order on every rank (Note [Ordered custom calls] in
// hvdlite/jax/ffi.py): operand 0 and result 0 are the ordering token, which
// the handler passes through untouched.
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "api/api.h"
#include "xla/ffi/api/ffi.h"

namespace hvdlite::jax_ffi {
namespace ffi = xla::ffi;

namespace {

int32_t hvdliteDtype(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::U8: return HVDLITE_DTYPE_UINT8;
    case ffi::DataType::S8: return HVDLITE_DTYPE_INT8;
    case ffi::DataType::S32: return HVDLITE_DTYPE_INT32;
    case ffi::DataType::S64: return HVDLITE_DTYPE_INT64;
    case ffi::DataType::F16: return HVDLITE_DTYPE_FLOAT16;
    case ffi::DataType::BF16: return HVDLITE_DTYPE_BFLOAT16;
    case ffi::DataType::F32: return HVDLITE_DTYPE_FLOAT32;
    case ffi::DataType::F64: return HVDLITE_DTYPE_FLOAT64;
    case ffi::DataType::PRED: return HVDLITE_DTYPE_BOOL;
    case ffi::DataType::S16: return HVDLITE_DTYPE_INT16;
    case ffi::DataType::U16: return HVDLITE_DTYPE_UINT16;
    default: return -1;
  }
}

const char* kindName(int32_t op) {
  switch (op) {
    case HVDLITE_OP_ALLREDUCE: return "allreduce";
    case HVDLITE_OP_ALLGATHER: return "allgather";
    case HVDLITE_OP_BROADCAST: return "broadcast";
    case HVDLITE_OP_ALLTOALL: return "alltoall";
    case HVDLITE_OP_REDUCESCATTER: return "reducescatter";
    default: return "collective";
  }
}

// The status kinds as XLA error codes; hvdlite.jax re-raises them as
// hvdlite's exceptions by the code's name (hvdlite/jax/ffi.py).
ffi::ErrorCode errorCode(int32_t status) {
  switch (status) {
    case HVDLITE_INVALID_ARGUMENT: return ffi::ErrorCode::kInvalidArgument;
    case HVDLITE_PRECONDITION_ERROR: return ffi::ErrorCode::kFailedPrecondition;
    default: return ffi::ErrorCode::kInternal;
  }
}

// The arrays' names, packed by hvdlite/jax/ffi.py as "<length>:<name>" each,
// so that a name may hold any character.
bool unpackNames(std::string_view packed, std::vector<std::string>* names) {
  while (!packed.empty()) {
    size_t colon = packed.find(':');
    if (colon == std::string_view::npos) return false;
    size_t length = 0;
    for (char c : packed.substr(0, colon)) {
      if (c < '0' || c > '9') return false;
      length = length * 10 + static_cast<size_t>(c - '0');
    }
    if (packed.size() - colon - 1 < length) return false;
    names->emplace_back(packed.substr(colon + 1, length));
    packed.remove_prefix(colon + 1 + length);
  }
  return true;
}

struct Call;

// One array of the call: where its result goes and what went wrong with it.
struct Member {
  Call* call = nullptr;
  std::string name;
  void* output = nullptr;
  std::vector<int64_t> output_shape;  // fixed at trace time
  size_t element_bytes = 0;
  std::vector<char> scratch;          // where the core writes when the shape disagrees
  char empty = 0;                     // a valid address for zero-sized outputs
};

// The members of one custom call and the wait for all of them.
struct Call {
  int32_t op = 0;
  std::mutex mutex;
  std::condition_variable completed;
  int remaining = 0;
  int32_t status = HVDLITE_OK;  // the first failure's
  std::string error;

  void fail(int32_t kind, std::string message) {
    if (status != HVDLITE_OK) return;
    status = kind;
    error = std::move(message);
  }
};

// Inside jit the output's shape was fixed when the step was traced, from this
// rank's input alone; a rank whose peers passed other first dimensions gets
// an error instead of a result of the wrong size (the core still completes
// the collective on every rank, into scratch memory).
void* allocateOutput(void* user, const int64_t* dims, int32_t ndim) {
  auto* member = static_cast<Member*>(user);
  std::vector<int64_t> shape(dims, dims + ndim);
  if (shape == member->output_shape) return member->output ? member->output : &member->empty;
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  member->scratch.resize(static_cast<size_t>(elements) * member->element_bytes + 1);
  std::lock_guard<std::mutex> lock(member->call->mutex);
  member->call->fail(
      HVDLITE_INVALID_ARGUMENT,
      std::string(kindName(member->call->op)) + " of '" + member->name + "' inside jax.jit: expected " +
          std::to_string(member->output_shape.empty() ? 1 : member->output_shape[0]) +
          " rows, got " + std::to_string(ndim > 0 ? shape[0] : 1) +
          ": every rank must pass the same first dimension inside jit (shapes are fixed when the "
          "step is traced); call it outside jit for ragged sizes");
  return member->scratch.data();
}

void finish(void* user, const hvdlite_result* result) {
  auto* member = static_cast<Member*>(user);
  Call* call = member->call;
  std::lock_guard<std::mutex> lock(call->mutex);
  if (result->status != HVDLITE_OK) call->fail(result->status, result->message);
  if (--call->remaining == 0) call->completed.notify_all();
}

// `packed_site`: where the step's code called the collective when it was
// traced, packed like the names as [file, line, function], or "" (Note
// [Call sites] in core/call_site.h).
ffi::Error collective(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t op, int32_t reduce_op,
                      double prescale, double postscale, int32_t root_rank, int32_t process_set_id,
                      std::string_view packed_names, std::string_view packed_site) {
  if (!hvdlite_is_initialized()) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "hvdlite has not been initialized; call hvdlite.jax.init() before running a "
                      "jitted step with hvdlite collectives");
  }
  std::vector<std::string> names;
  // Operand and result 0 are the ordering token.
  const size_t count = args.size() > 0 ? args.size() - 1 : 0;
  if (args.size() == 0 || !unpackNames(packed_names, &names) || names.size() != count ||
      rets.size() != count + 1) {
    return ffi::Error::Internal("hvdlite's jax custom call got " + std::to_string(count) +
                                " arrays for names '" + std::string(packed_names) +
                                "': hvdlite/jax/ffi.py and the handler disagree; reinstall hvdlite");
  }
  std::vector<std::string> site;
  if (!unpackNames(packed_site, &site) || (!site.empty() && site.size() != 3)) site.clear();
  const int32_t site_line = site.empty() ? 0 : static_cast<int32_t>(std::strtol(site[1].c_str(), nullptr, 10));
  Call call;
  call.op = op;
  std::vector<Member> members(count);
  for (size_t i = 0; i < count; ++i) {
    auto input = args.get<ffi::AnyBuffer>(i + 1);
    auto output = rets.get<ffi::AnyBuffer>(i + 1);
    if (input.has_error()) return input.error();
    if (output.has_error()) return output.error();
    Member& member = members[i];
    member.call = &call;
    member.name = std::move(names[i]);
    member.output = (*output)->untyped_data();
    member.element_bytes = ffi::ByteWidth((*output)->element_type());
    auto out_dims = (*output)->dimensions();
    member.output_shape.assign(out_dims.begin(), out_dims.end());
  }
  // Every member is queued before any is waited for, so the core fuses them.
  std::unique_lock<std::mutex> lock(call.mutex);
  call.remaining = static_cast<int>(count);
  lock.unlock();
  for (size_t i = 0; i < count; ++i) {
    ffi::AnyBuffer input = *args.get<ffi::AnyBuffer>(i + 1);
    auto dims = input.dimensions();
    std::vector<int64_t> shape(dims.begin(), dims.end());
    hvdlite_request request = hvdlite_request_defaults();
    request.op = op;
    request.name = members[i].name.c_str();
    request.process_set_id = process_set_id;
    request.dtype = hvdliteDtype(input.element_type());
    request.shape = shape.data();
    request.ndim = static_cast<int32_t>(shape.size());
    request.input = input.untyped_data();
    request.output = members[i].output;
    request.reduce_op = reduce_op;
    request.prescale = prescale;
    request.postscale = postscale;
    request.root_rank = root_rank;
    // This thread blocks below until every member completes (Note
    // [Divergence] in core/coordinator.cc).
    request.flags |= HVDLITE_REQUEST_CALLER_WAITS;
    if (!site.empty()) {
      request.call_site_file = site[0].c_str();
      request.call_site_line = site_line;
      request.call_site_function = site[2].c_str();
    }
    bool sized_by_core = op == HVDLITE_OP_ALLGATHER || op == HVDLITE_OP_ALLTOALL ||
                         op == HVDLITE_OP_REDUCESCATTER;
    char error[1024];
    int32_t code = hvdlite_enqueue(&request, sized_by_core ? allocateOutput : nullptr, finish,
                                   &members[i], error, sizeof(error));
    if (code != HVDLITE_OK) {
      // The members queued so far still write into XLA's buffers: wait for
      // them, and report this one's refusal.
      lock.lock();
      call.fail(code, error);
      call.remaining -= static_cast<int>(count - i);
      lock.unlock();
      break;
    }
  }
  lock.lock();
  call.completed.wait(lock, [&call] { return call.remaining == 0; });
  if (call.status != HVDLITE_OK) return ffi::Error(errorCode(call.status), call.error);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace hvdlite::jax_ffi

XLA_FFI_DEFINE_HANDLER_SYMBOL(HvdliteCollective, hvdlite::jax_ffi::collective,
                              xla::ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int32_t>("op")
                                  .Attr<int32_t>("reduce_op")
                                  .Attr<double>("prescale")
                                  .Attr<double>("postscale")
                                  .Attr<int32_t>("root_rank")
                                  .Attr<int32_t>("process_set_id")
                                  .Attr<std::string_view>("names")
                                  .Attr<std::string_view>("call_site"));
