#include "api/caller_output.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/message.h"

namespace hvdlite::api {

// Note [Outputs into the caller's buffer]
// An allgather's or a reducescatter's output size is known only after
// negotiation in general, so the core allocates it (the handle's memory, or
// the binding's allocate). A caller that knows the size already (a sharded
// optimizer gathers each parameter's rows back into the parameter itself,
// and reduce-scatters each step's gradients into the same rows) passes the
// buffer and its size instead: no allocation and no copy per step, and so
// nothing for the C library's heap to keep after every step (the resident
// memory of the sharded-optimizer benchmark, bench/RESULTS.md).
// A buffer of no bytes (output_bytes 0, which every binding written before
// this field leaves) is no buffer: the core allocates as before, and an
// empty result needs no memory anyway.
// The result must fill the buffer exactly. When it does not (ranks that
// disagree with the caller's layout), the collective still runs, into memory
// the usual allocate gives, so that every rank stays in step; the entry then
// fails with both sizes named, and the caller's buffer is left as it was.
// The input may lie inside the output (an allgather of the rows a parameter
// holds, into that parameter): the core reads each input before it writes
// the part of the output that holds it.

bool writesIntoCallerBuffer(const core::TensorEntry& entry) {
  return entry.output && entry.output_bytes > 0 &&
         (entry.op == OpType::kAllgather || entry.op == OpType::kAlltoall || entry.op == OpType::kReducescatter);
}

namespace {

// Memory for a result that does not fit the caller's buffer, when the
// binding gave no allocate: kept until the entry is done.
struct Spill {
  std::unique_ptr<uint8_t[]> host;
  core::DeviceMemory device;
};

}  // namespace

void intoCallerBuffer(core::TensorEntry& entry, core::Runtime& runtime) {
  auto mismatch = std::make_shared<std::string>();
  auto spill = std::make_shared<Spill>();
  const std::string what = std::string(opTypeName(entry.op)) + " of '" + entry.name + "'";
  entry.allocate = [fallback = std::move(entry.allocate), given = entry.output,
                    capacity = static_cast<size_t>(entry.output_bytes), mismatch, spill, what,
                    device = entry.device, esize = dtypeSize(entry.dtype), rt = &runtime](const std::vector<int64_t>& shape) -> void* {
    size_t n = esize;
    for (auto d : shape) n *= static_cast<size_t>(d);
    if (n == capacity) return given;
    *mismatch = what + ": the output buffer given holds " + std::to_string(capacity) +
                " bytes, but the result has shape " + core::shapeString(shape) + " (" + std::to_string(n) +
                " bytes); the ranks' inputs do not add up to the size this rank expected. Check that every "
                "rank passes the shapes the caller's layout assumes, or let hvdlite allocate the output";
    if (fallback) return fallback(shape);
    if (device >= 0) {
      spill->device = rt->allocateDevice(device, n);
      return spill->device.get();
    }
    spill->host.reset(new uint8_t[std::max<size_t>(n, 1)]);
    return spill->host.get();
  };
  entry.callback = [inner = std::move(entry.callback), mismatch, spill](core::TensorEntry& e,
                                                                          const core::Status& status) {
    if (status.ok() && !mismatch->empty()) {
      inner(e, core::Status::Error(core::StatusKind::kInvalidArgument, *mismatch));
    } else {
      inner(e, status);
    }
  };
}

}  // namespace hvdlite::api
