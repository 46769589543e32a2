// api.h on top of the Session: a C request goes in by Session::submit, the
// one way in (Note [One way in] in api/session.h), with the binding's done
// and allocate as its completion; core results go back as C structs.
#include "api/api.h"

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "api/session.h"
#include "common/errors.h"

namespace hvdlite::api {
namespace {

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

extern "C" const void* hvdlite_intern_call_site(const char* file, int32_t line, const char* function) {
  if (!file || file[0] == '\0') return nullptr;
  return session().callSites().intern(file, line, function ? function : "");
}

extern "C" int32_t hvdlite_enqueue(const hvdlite_request* request, hvdlite_allocate_fn allocate,
                                   hvdlite_done_fn done, void* user, char* error,
                                   size_t error_size) {
  return hvdlite_enqueue_at(request, nullptr, allocate, done, user, error, error_size);
}

extern "C" int32_t hvdlite_enqueue_at(const hvdlite_request* request, const void* call_site,
                                      hvdlite_allocate_fn allocate, hvdlite_done_fn done, void* user,
                                      char* error, size_t error_size) {
  try {
    if (!request) throw hvdlite::InvalidArgument("hvdlite_enqueue: the request is NULL");
    if (!done) {
      throw hvdlite::InvalidArgument(std::string("hvdlite_enqueue of '") +
                                     (request->name ? request->name : "") + "': done is NULL");
    }
    hvdlite::api::Completion completion;
    if (allocate) {
      completion.allocate = [allocate, user](const std::vector<int64_t>& shape) {
        return allocate(user, shape.data(), static_cast<int32_t>(shape.size()));
      };
    }
    completion.callback = [done, user](hvdlite::core::TensorEntry& e,
                                       const hvdlite::core::Status& status) {
      hvdlite_result result{};
      result.status = static_cast<int32_t>(status.kind);
      result.message = status.message.c_str();
      result.output_shape = e.output_shape.data();
      result.output_ndim = static_cast<int32_t>(e.output_shape.size());
      result.received_splits = e.received_splits.data();
      result.num_received_splits = static_cast<int32_t>(e.received_splits.size());
      result.value = e.result_value;
      // Note [Failures by message] in api/session.h.
      session().rememberFailure(status);
      done(user, &result);
    };
    session().submit(*request, std::move(completion), static_cast<const hvdlite::core::CallSite*>(call_site));
    return HVDLITE_OK;
  } catch (const hvdlite::InvalidArgument& e) {
    hvdlite::api::copyMessage(e.what(), error, error_size);
    return HVDLITE_INVALID_ARGUMENT;
  } catch (const hvdlite::core::StatusError& e) {
    // Refused because the runtime already stopped: that failure's kind.
    hvdlite::api::copyMessage(e.what(), error, error_size);
    session().rememberFailure(e.status());
    return static_cast<int32_t>(e.status().kind);
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
