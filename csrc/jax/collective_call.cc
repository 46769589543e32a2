#include "jax/collective_call.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace hvdlite::jax_ffi {
namespace {

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

struct Call;

// One array of the call: where its result goes and what went wrong with it.
struct Member {
  Call* call = nullptr;
  std::string name;                   // allgather, alltoall, reducescatter only
  void* output = nullptr;
  std::vector<int64_t> output_shape;  // fixed at trace time; the same ops only
  size_t element_bytes = 0;
  bool on_device = false;             // a GPU buffer (the CUDA handler's)
  std::vector<char> scratch;          // where the core writes when the shape disagrees (host only)
  char empty = 0;                     // a valid address for zero-sized outputs
};

// The members of one custom call and who is told once all have completed.
// It owns itself: the last member to complete (or the submitter, when the
// core refused a request) reports the outcome and deletes it.
struct Call {
  int32_t op = 0;
  std::mutex mutex;  // guards outcome
  // Members not yet completed, plus one held by the submitter until it has
  // queued every member, so that early completions cannot finish the call.
  // Atomic, so that a member that succeeded takes no lock (a fused batch
  // completes a call's members one after another on one thread); a failure
  // is recorded under `mutex` before its member's release, whose decrement
  // the last release's reads (acquire-release).
  std::atomic<int> remaining{0};
  CallOutcome outcome;  // the first failure's
  std::vector<Member> members;
  std::function<void(CallOutcome)> done;

  void fail(int32_t kind, std::string message) {
    if (outcome.status != HVDLITE_OK) return;
    outcome.status = kind;
    outcome.error = std::move(message);
  }
};

// Drops `count` from what the call waits for; the one that drops the last
// reports the outcome and frees the call.
void release(Call* call, int count) {
  if (call->remaining.fetch_sub(count, std::memory_order_acq_rel) > count) return;
  call->done(std::move(call->outcome));
  delete call;
}

// Inside jit the output's shape was fixed when the step was traced, from this
// rank's input alone; a rank whose peers passed other first dimensions gets
// an error instead of a result of the wrong size. On the CPU the core still
// completes the collective on every rank, into scratch memory; on a GPU the
// handler has no device memory of its own to offer, so it gives none, and
// every rank fails that collective (Note [Allocation failures] in
// core/device_executor.cc) while this rank reports the shape.
void* allocateOutput(void* user, const int64_t* dims, int32_t ndim) {
  auto* member = static_cast<Member*>(user);
  std::vector<int64_t> shape(dims, dims + ndim);
  if (shape == member->output_shape) return member->output ? member->output : &member->empty;
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  if (!member->on_device) member->scratch.resize(static_cast<size_t>(elements) * member->element_bytes + 1);
  std::lock_guard<std::mutex> lock(member->call->mutex);
  member->call->fail(
      HVDLITE_INVALID_ARGUMENT,
      std::string(kindName(member->call->op)) + " of '" + member->name + "' inside jax.jit: expected " +
          std::to_string(member->output_shape.empty() ? 1 : member->output_shape[0]) +
          " rows, got " + std::to_string(ndim > 0 ? shape[0] : 1) +
          ": every rank must pass the same first dimension inside jit (shapes are fixed when the "
          "step is traced); call it outside jit for ragged sizes");
  return member->on_device ? nullptr : member->scratch.data();
}

void finish(void* user, const hvdlite_result* result) {
  auto* member = static_cast<Member*>(user);
  Call* call = member->call;
  if (result->status != HVDLITE_OK) {
    std::lock_guard<std::mutex> lock(call->mutex);
    call->fail(result->status, result->message);
  }
  release(call, 1);
}

}  // namespace

bool unpackNames(std::string_view packed, std::vector<std::string_view>* names) {
  while (!packed.empty()) {
    size_t colon = packed.find(':');
    if (colon == std::string_view::npos) return false;
    size_t length = 0;
    for (char c : packed.substr(0, colon)) {
      if (c < '0' || c > '9') return false;
      length = length * 10 + static_cast<size_t>(c - '0');
    }
    if (packed.size() - colon - 1 < length) return false;
    names->push_back(packed.substr(colon + 1, length));
    packed.remove_prefix(colon + 1 + length);
  }
  return true;
}

// Note [Sites interned once]
// The core interns each request's call site (Note [Interning without
// allocating] in core/call_site.cc): a key built from the strings, a hash,
// a lookup under a lock, ~430 instructions a request, 100 a step for a step
// of 100 separate allreduces, whose sites are the same every step. So the
// handler interns a call's sites once, when it reads them (unpackSite reads
// them again only when the call_site attribute differs from its thread's
// previous call's), and queues each request with its interned site
// (hvdlite_enqueue_at). Interned sites live as long as the process, so one
// stays valid across shutdown() and init().
bool unpackSite(std::string_view packed, CallAttributes* attributes) {
  if (packed == attributes->site_packed) return !attributes->sites.empty();
  attributes->site_packed.assign(packed);
  attributes->sites.clear();
  attributes->interned_sites.clear();
  thread_local std::vector<std::string_view> parts;  // Note [A call allocates little]
  parts.clear();
  if (!unpackNames(packed, &parts) || parts.empty() || parts.size() % 3 != 0) return false;
  for (size_t first = 0; first < parts.size(); first += 3) {
    int32_t line = 0;
    for (char c : parts[first + 1]) {
      if (c < '0' || c > '9') {
        attributes->sites.clear();
        return false;
      }
      line = line * 10 + (c - '0');
    }
    attributes->sites.push_back(CallSite{std::string(parts[first]), line, std::string(parts[first + 2])});
  }
  for (const CallSite& site : attributes->sites) {
    attributes->interned_sites.push_back(
        hvdlite_intern_call_site(site.file.c_str(), site.line, site.function.c_str()));
  }
  return true;
}

const void* CallAttributes::internedSiteOf(size_t index, size_t count) const {
  if (interned_sites.size() == 1) return interned_sites[0];
  if (interned_sites.size() == count && index < count) return interned_sites[index];
  return nullptr;
}

void startCall(const CallAttributes& attributes, std::vector<CallArray>& arrays, Placement placement,
               std::function<void(CallOutcome)> done, uint32_t flags) {
  const size_t count = arrays.size();
  const bool sized_by_core = attributes.op == HVDLITE_OP_ALLGATHER || attributes.op == HVDLITE_OP_ALLTOALL ||
                             attributes.op == HVDLITE_OP_REDUCESCATTER;
  auto* call = new Call;
  call->op = attributes.op;
  call->done = std::move(done);
  call->remaining.store(static_cast<int>(count) + 1, std::memory_order_relaxed);
  call->members.resize(count);
  for (size_t i = 0; i < count; ++i) {
    Member& member = call->members[i];
    member.call = call;
    member.output = arrays[i].output;
    member.element_bytes = arrays[i].element_bytes;
    member.on_device = placement.device >= 0;
    if (sized_by_core) {  // only allocateOutput reads them
      member.name = arrays[i].name;
      member.output_shape = arrays[i].output_shape;
    }
  }
  // What every member's request shares, set once; the loop sets the rest.
  hvdlite_request request = hvdlite_request_defaults();
  request.op = attributes.op;
  request.process_set_id = attributes.process_set_id;
  request.reduce_op = attributes.reduce_op;
  request.prescale = attributes.prescale;
  request.postscale = attributes.postscale;
  request.root_rank = attributes.root_rank;
  request.device = placement.device;
  request.stream = placement.stream;
  // The step waits for every member: the caller's thread (runCall) or the
  // step's completion (startCall) (Note [Divergence] in core/coordinator.cc).
  request.flags |= HVDLITE_REQUEST_CALLER_WAITS | flags;
  // Every member is queued before any is waited for, so the core fuses them.
  for (size_t i = 0; i < count; ++i) {
    const CallArray& array = arrays[i];
    Member& member = call->members[i];
    request.name = array.name.c_str();
    request.dtype = array.dtype;
    request.shape = array.shape.data();
    request.ndim = static_cast<int32_t>(array.shape.size());
    request.input = array.input;
    // Outputs sized by negotiation come through allocateOutput, which checks
    // the shape traced into the step and says so inside jit; output stays
    // NULL for them (a buffer there would be taken as the caller's, Note
    // [Outputs into the caller's buffer] in api/caller_output.cc).
    request.output = sized_by_core ? nullptr : array.output;
    // Note [Sites interned once]: the request's strings stay unset.
    const void* site = attributes.internedSiteOf(i, count);
    char error[1024];
    int32_t code = hvdlite_enqueue_at(&request, site, sized_by_core ? allocateOutput : nullptr, finish,
                                      &member, error, sizeof(error));
    if (code != HVDLITE_OK) {
      // The members queued so far still write into XLA's buffers: the call
      // ends once they have completed, with this one's refusal.
      {
        std::lock_guard<std::mutex> lock(call->mutex);
        call->fail(code, error);
      }
      release(call, static_cast<int>(count - i));
      break;
    }
  }
  release(call, 1);  // the submitter's share
}

CallOutcome runCall(const CallAttributes& attributes, std::vector<CallArray>& arrays, Placement placement) {
  std::mutex mutex;
  std::condition_variable completed;
  bool finished = false;
  CallOutcome result;
  startCall(attributes, arrays, placement, [&](CallOutcome outcome) {
    std::lock_guard<std::mutex> lock(mutex);
    result = std::move(outcome);
    finished = true;
    completed.notify_all();
  });
  std::unique_lock<std::mutex> lock(mutex);
  completed.wait(lock, [&finished] { return finished; });
  return result;
}

}  // namespace hvdlite::jax_ffi
