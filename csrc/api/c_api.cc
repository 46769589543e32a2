// api.h on top of the Session: translates C requests into TensorEntries and
// core results back into C structs.
#include "api/api.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "api/session.h"
#include "common/errors.h"

namespace hvdlite::api {
namespace {

core::TensorEntryPtr toEntry(const hvdlite_request& request) {
  if (request.dtype < 0 || request.dtype >= kNumDataTypes) {
    throw InvalidArgument("unknown dtype code " + std::to_string(request.dtype));
  }
  auto entry = std::make_unique<core::TensorEntry>();
  entry->op = static_cast<OpType>(request.op);
  entry->name = request.name ? request.name : "";
  entry->reduce_op = static_cast<ReduceOp>(request.reduce_op);
  entry->dtype = static_cast<DataType>(request.dtype);
  entry->shape.assign(request.shape, request.shape + std::max(request.ndim, 0));
  entry->input = request.input;
  entry->output = request.output;
  entry->root_rank = request.root_rank;
  entry->prescale = request.prescale;
  entry->postscale = request.postscale;
  if (request.splits && request.num_splits > 0) {
    entry->splits.assign(request.splits, request.splits + request.num_splits);
  }
  entry->process_set_id = request.process_set_id;
  entry->group = request.group ? request.group : "";
  entry->group_size = request.group_size;
  return entry;
}

void copyMessage(const char* what, char* error, size_t error_size) {
  if (!error || error_size == 0) return;
  std::strncpy(error, what, error_size - 1);
  error[error_size - 1] = '\0';
}

int32_t topologyField(int core::Topology::*field) {
  auto& s = session();
  if (!s.initialized()) return -1;
  try {
    return s.runtime()->topology().*field;
  } catch (const InvalidArgument&) {  // shut down between the two calls
    return -1;
  }
}

}  // namespace
}  // namespace hvdlite::api

using hvdlite::api::session;

extern "C" int32_t hvdlite_enqueue(const hvdlite_request* request, hvdlite_allocate_fn allocate,
                                   hvdlite_done_fn done, void* user, char* error,
                                   size_t error_size) {
  try {
    auto entry = hvdlite::api::toEntry(*request);
    if (allocate) {
      entry->allocate = [allocate, user](const std::vector<int64_t>& shape) {
        return allocate(user, shape.data(), static_cast<int32_t>(shape.size()));
      };
    }
    entry->callback = [done, user](hvdlite::core::TensorEntry& e,
                                   const hvdlite::core::Status& status) {
      hvdlite_result result{};
      result.status = static_cast<int32_t>(status.kind);
      result.message = status.message.c_str();
      result.output_shape = e.output_shape.data();
      result.output_ndim = static_cast<int32_t>(e.output_shape.size());
      result.received_splits = e.received_splits.data();
      result.num_received_splits = static_cast<int32_t>(e.received_splits.size());
      result.value = e.result_value;
      done(user, &result);
    };
    session().enqueueDirect(std::move(entry));
    return HVDLITE_OK;
  } catch (const hvdlite::InvalidArgument& e) {
    hvdlite::api::copyMessage(e.what(), error, error_size);
    return HVDLITE_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    hvdlite::api::copyMessage(e.what(), error, error_size);
    return HVDLITE_TRANSPORT_ERROR;
  }
}

extern "C" int32_t hvdlite_is_initialized(void) { return session().initialized() ? 1 : 0; }
extern "C" int32_t hvdlite_rank(void) { return hvdlite::api::topologyField(&hvdlite::core::Topology::rank); }
extern "C" int32_t hvdlite_size(void) { return hvdlite::api::topologyField(&hvdlite::core::Topology::size); }
extern "C" int32_t hvdlite_local_rank(void) {
  return hvdlite::api::topologyField(&hvdlite::core::Topology::local_rank);
}
extern "C" int32_t hvdlite_local_size(void) {
  return hvdlite::api::topologyField(&hvdlite::core::Topology::local_size);
}
extern "C" int32_t hvdlite_api_version(void) { return HVDLITE_API_VERSION; }
