// The XLA FFI handlers through which jax.jit-compiled steps reach the core
// (hvdlite/jax/ffi.py lowers every hvdlite.jax collective inside jit to one
// custom call of them): HvdliteCollective for XLA's CPU platform, on host
// buffers, and HvdliteCollectiveCuda for its CUDA platform, on device buffers
// and XLA's stream. Compiled on first use against the installed jaxlib's
// headers and linked to the already-loaded libhvdlite, like the TF ops; no
// CUDA header is needed (XLA hands the stream over as a void*).
//
// One call carries one or more arrays of one kind of collective (a pytree of
// gradients is one call; on the CPU, so are a step's separate collectives,
// merged by the lowering: Note [One custom call for a step's collectives] in
// hvdlite/jax/merged_calls.py): it queues one request per array through
// api.h, each under its own name and call site (Note [A call site per array]
// in collective_call.h).
// The CUDA handler then blocks the XLA thread until the core has completed
// all of them; blocking is safe because the core's background thread does
// the work and the calls of a step run in one order on every rank (Note
// [Ordered custom calls] in hvdlite/jax/ffi.py): operand 0 and result 0 are
// the ordering token, which the handler passes through untouched. The CPU
// handler does not block (Note [Asynchronous calls on the CPU]), but for a
// call alone in its burst, which runs its own cycles for at most
// kDriveHereFor (Note [A lone call drives itself] in call_driver.cc).
//
// Note [Asynchronous calls on the CPU]
// A blocking call waits for its own negotiation, so the separate collectives
// of one step (one per gradient, as training code writes them) never fuse:
// 100 small allreduces cost 100 negotiation rounds. XLA:CPU lets a handler
// return an ffi::Future instead: its thunk executor then starts the step's
// other ready instructions, the next collectives among them, while the call is
// pending, and runs what depends on the call once the future completes. So
// the CPU handler queues its requests and returns such a future, completed
// with the core's error when one failed by a driver that runs the cycles on a
// completion thread (Note [Driving a step's calls] in call_driver.cc); a
// step's collectives are thereby all queued before the first negotiation
// ends and fuse like torch's asynchronous ones.
// Two things would still serialize them, and the lowering removes both (Note
// [Unordered on the CPU] in hvdlite/jax/ffi.py): the ordering token (each call
// would wait for the previous one's result), and buffer reuse (XLA gives a
// finished call's input buffer to a later instruction, which then waits for
// it): allreduce and broadcast write in place, into their input's buffer
// (but for the step's kept arguments, which XLA never reuses: Note
// [Arguments read where they are] in hvdlite/jax/ffi.py).
// Queuing without blocking needs no common order across ranks: no rank's
// thread ever waits on a collective that a peer has yet to queue.
// XLA runs a small step (8 instructions or fewer, or buffers of 512 bytes or
// less only) strictly one instruction after another; there each call still
// completes before the next is queued.
//
// Note [XLA's stream]
// On the GPU, XLA runs a step by queueing its kernels on its stream from the
// host; the custom call runs when XLA reaches it in that order. The requests
// carry that stream and GPU: the core records each input's ready point on it
// at enqueue (Note [Ready at enqueue] in transport/device_communicator.h), so
// NCCL reads what the step's earlier kernels wrote, and before each request
// completes the C API makes the stream wait for the batch (Note [Ordered
// before done] in api/session.cc). So when the handler returns, the batch is
// queued on the GPU, not finished, and every kernel XLA queues after the call
// waits for it on the GPU: the host never waits for NCCL. The handler does not
// declare itself command-buffer compatible, so XLA never captures it into a
// CUDA graph (collectives are negotiated on the host each time they run).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <memory>
#include <utility>
#include <vector>

#include "api/api.h"
#include "jax/collective_call.h"
#include "jax/call_driver.h"
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

// The status kinds as XLA error codes; hvdlite.jax re-raises them as
// hvdlite's exceptions by the code's name (hvdlite/jax/ffi.py).
ffi::ErrorCode errorCode(int32_t status) {
  switch (status) {
    case HVDLITE_INVALID_ARGUMENT: return ffi::ErrorCode::kInvalidArgument;
    case HVDLITE_PRECONDITION_ERROR: return ffi::ErrorCode::kFailedPrecondition;
    default: return ffi::ErrorCode::kInternal;
  }
}

// Note [A call allocates little]
// A step of 100 separate allreduces makes 100 calls, and each call decoded
// its names and call site into fresh strings and vectors: about 2,500
// instructions of its ~8,500 (callgrind, 1 rank), mostly malloc and free.
// So each handler decodes into a CallAttributes and CallArrays of its thread
// that it fills again on every call (their strings and vectors keep their
// memory), the names are views into XLA's attribute until startCall has
// queued them, the call site is read again only when it differs from the
// thread's previous call's (a step's collectives mostly come from one line),
// and a member keeps its name and traced shape only where allocateOutput
// reads them (collectives whose output size the core finds). Safe because a
// handler's thread runs one call at a time and startCall copies what it
// keeps before it returns. With the core's site interning (Note [Interning
// without allocating] in core/call_site.cc): ~8,500 -> ~4,100 instructions
// a call, the core's enqueue included.

// Note [Names read once]
// A jitted step makes the same calls every time it runs, so a handler's
// thread mostly sees the same names attribute and shapes as in its previous
// call. decode then keeps the names it read into `arrays` last time (keyed
// by the attribute's contents, compared in full: one memcmp, where reading
// them again cost ~110 instructions an array) and leaves a shape that did
// not change as it is (~100 instructions an array each for the input's and
// the output's). Any other name or number of arrays reads them all again;
// dtype, buffers and the call's attributes are read on every call.

// `to` = `dims`, leaving `to` alone when equal (Note [Names read once]).
template <typename Dims>
void assignShape(const Dims& dims, std::vector<int64_t>* to) {
  if (to->size() == static_cast<size_t>(dims.size()) && std::equal(to->begin(), to->end(), dims.begin())) return;
  to->assign(dims.begin(), dims.end());
}

// Reads one call's attributes and buffers; `tokens`: the leading ordering
// tokens among its operands and results (1 for the CUDA handler, 0 for the
// CPU one). `packed_site`: where the step's code called the collective when it
// was traced, packed like the names as [file, line, function], or "" (Note
// [Call sites] in core/call_site.h).
ffi::Error decode(size_t tokens, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t op,
                  int32_t reduce_op, double prescale, double postscale, int32_t root_rank,
                  int32_t process_set_id, std::string_view packed_names, std::string_view packed_site,
                  CallAttributes* attributes, std::vector<CallArray>* arrays) {
  if (!hvdlite_is_initialized()) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "hvdlite has not been initialized; call hvdlite.jax.init() before running a "
                      "jitted step with hvdlite collectives");
  }
  const size_t count = args.size() >= tokens ? args.size() - tokens : 0;
  // Note [Names read once]: the names of a call like the thread's previous
  // one are in `arrays` already.
  const bool same_names =
      args.size() >= tokens && packed_names == attributes->names_packed && arrays->size() == count;
  if (!same_names) {
    thread_local std::vector<std::string_view> names;  // Note [A call allocates little]
    names.clear();
    attributes->names_packed.clear();
    if (args.size() < tokens || !unpackNames(packed_names, &names) || names.size() != count ||
        rets.size() != count + tokens) {
      return ffi::Error::Internal("hvdlite's jax custom call got " + std::to_string(count) +
                                  " arrays for names '" + std::string(packed_names) +
                                  "': hvdlite/jax/ffi.py and the handler disagree; reinstall hvdlite");
    }
    arrays->resize(count);
    for (size_t i = 0; i < count; ++i) (*arrays)[i].name.assign(names[i]);
    attributes->names_packed.assign(packed_names);
  } else if (rets.size() != count + tokens) {
    return ffi::Error::Internal("hvdlite's jax custom call got " + std::to_string(count) + " arrays and " +
                                std::to_string(rets.size()) +
                                " results: hvdlite/jax/ffi.py and the handler disagree; reinstall hvdlite");
  }
  attributes->op = op;
  attributes->reduce_op = reduce_op;
  attributes->prescale = prescale;
  attributes->postscale = postscale;
  attributes->root_rank = root_rank;
  attributes->process_set_id = process_set_id;
  unpackSite(packed_site, attributes);
  for (size_t i = 0; i < count; ++i) {
    auto input = args.get<ffi::AnyBuffer>(i + tokens);
    auto output = rets.get<ffi::AnyBuffer>(i + tokens);
    if (input.has_error()) return input.error();
    if (output.has_error()) return output.error();
    CallArray& array = (*arrays)[i];
    array.dtype = hvdliteDtype(input->element_type());
    assignShape(input->dimensions(), &array.shape);
    array.input = input->untyped_data();
    array.output = (*output)->untyped_data();
    array.element_bytes = ffi::ByteWidth((*output)->element_type());
    assignShape((*output)->dimensions(), &array.output_shape);
  }
  return ffi::Error::Success();
}

// Where a call that drives its own cycles (Note [A lone call drives itself]
// in call_driver.cc) learns its outcome: the completion claims it (kClaimed,
// then kDone with the outcome) unless the handler handed the call over to
// the driver first (kHandedOver), and the other way round.
struct CompletedHere {
  enum : int { kWaiting, kClaimed, kDone, kHandedOver };
  std::atomic<int> state{kWaiting};
  CallOutcome outcome;
};

// How long the handler's thread drives before a driver takes over.
constexpr auto kDriveHereFor = std::chrono::milliseconds(2);

struct DriveHereWait {
  const CompletedHere* here;
  std::chrono::steady_clock::time_point until;
};

int32_t completedHereOrLate(void* user) {
  auto* wait = static_cast<DriveHereWait*>(user);
  return wait->here->state.load() != CompletedHere::kWaiting || std::chrono::steady_clock::now() >= wait->until;
}

// Runs the cycles on this thread until the call completed (true, its
// outcome in `here`) or kDriveHereFor passed (false: the driver reports it).
bool driveUntilCompleted(CompletedHere& here) {
  DriveHereWait wait{&here, std::chrono::steady_clock::now() + kDriveHereFor};
  while (hvdlite_drive_cycles(completedHereOrLate, &wait) == 1 && !completedHereOrLate(&wait)) {
  }
  int waiting = CompletedHere::kWaiting;
  if (!here.state.compare_exchange_strong(waiting, CompletedHere::kHandedOver)) {
    while (here.state.load(std::memory_order_acquire) != CompletedHere::kDone) {
    }  // the completion is storing its outcome
  }
  doneDrivingHere();
  return waiting != CompletedHere::kWaiting;
}

// Note [Asynchronous calls on the CPU].
ffi::Future onHost(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t op, int32_t reduce_op,
                   double prescale, double postscale, int32_t root_rank, int32_t process_set_id,
                   std::string_view packed_names, std::string_view packed_site) {
  ffi::Promise promise;
  ffi::Future future(promise);
  // Note [A call allocates little]: startCall reads them before it returns.
  thread_local CallAttributes attributes;
  thread_local std::vector<CallArray> arrays;
  ffi::Error error = decode(0, args, rets, op, reduce_op, prescale, postscale, root_rank, process_set_id,
                            packed_names, packed_site, &attributes, &arrays);
  if (!error.success()) {
    promise.SetError(std::move(error));
    return future;
  }
  auto report = [promise](const CallOutcome& outcome) mutable {
    if (outcome.status == HVDLITE_OK) {
      promise.SetAvailable();
    } else {
      promise.SetError(ffi::Error(errorCode(outcome.status), outcome.error));
    }
  };
  auto here = std::make_shared<CompletedHere>();
  callStarting();
  startCall(
      attributes, arrays, Placement{},
      [report, here](CallOutcome outcome) mutable {
        int waiting = CompletedHere::kWaiting;
        if (here->state.compare_exchange_strong(waiting, CompletedHere::kClaimed)) {
          here->outcome = std::move(outcome);
          here->state.store(CompletedHere::kDone, std::memory_order_release);
          callCompletedHere();
          return;
        }
        callCompleted([report, outcome = std::move(outcome)]() mutable { report(outcome); });
      },
      HVDLITE_REQUEST_NO_WAKE);  // the call's driver runs the cycle (Note [Driving a step's calls])
  if (!driveHere()) {
    int waiting = CompletedHere::kWaiting;
    if (here->state.compare_exchange_strong(waiting, CompletedHere::kHandedOver)) {
      callQueued();
      return future;
    }
    // Completed already (refused before anything was queued): told here.
    while (here->state.load(std::memory_order_acquire) != CompletedHere::kDone) {
    }
    callQueued();
    report(here->outcome);
    return future;
  }
  if (driveUntilCompleted(*here)) report(here->outcome);
  return future;
}

ffi::Error onCuda(void* stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t op,
                  int32_t reduce_op, double prescale, double postscale, int32_t root_rank,
                  int32_t process_set_id, std::string_view packed_names, std::string_view packed_site) {
  thread_local CallAttributes attributes;  // Note [A call allocates little]
  thread_local std::vector<CallArray> arrays;
  ffi::Error error = decode(1, args, rets, op, reduce_op, prescale, postscale, root_rank, process_set_id,
                            packed_names, packed_site, &attributes, &arrays);
  if (!error.success()) return error;
  CallOutcome outcome = runCall(attributes, arrays, Placement{device, stream});
  if (outcome.status != HVDLITE_OK) return ffi::Error(errorCode(outcome.status), outcome.error);
  return ffi::Error::Success();
}

// The attributes hvdlite/jax/ffi.py's lowering passes, in its order.
template <typename Binding>
auto withAttributes(Binding binding) {
  return std::move(binding).RemainingArgs()
      .RemainingRets()
      .template Attr<int32_t>("op")
      .template Attr<int32_t>("reduce_op")
      .template Attr<double>("prescale")
      .template Attr<double>("postscale")
      .template Attr<int32_t>("root_rank")
      .template Attr<int32_t>("process_set_id")
      .template Attr<std::string_view>("names")
      .template Attr<std::string_view>("call_site");
}

}  // namespace
}  // namespace hvdlite::jax_ffi

XLA_FFI_DEFINE_HANDLER_SYMBOL(HvdliteCollective, hvdlite::jax_ffi::onHost,
                              hvdlite::jax_ffi::withAttributes(xla::ffi::Ffi::Bind()));

// XLA's stream and the GPU's ordinal (the CUDA device number XLA's client
// uses, as cudaSetDevice counts them) come from the call's context.
XLA_FFI_DEFINE_HANDLER_SYMBOL(HvdliteCollectiveCuda, hvdlite::jax_ffi::onCuda,
                              hvdlite::jax_ffi::withAttributes(
                                  xla::ffi::Ffi::Bind()
                                      .Ctx<xla::ffi::PlatformStream<void*>>()
                                      .Ctx<xla::ffi::DeviceOrdinal>()));
