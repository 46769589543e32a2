// The outcome of one tensor's operation, handed to its completion callback.
#pragma once

#include <string>

namespace hvdlite::core {

// Which Python exception a failure becomes: kInvalidArgument -> ValueError,
// everything else -> HvdliteInternalError (TensorFlow: kPrecondition ->
// FailedPreconditionError). kPrecondition: the ranks disagree on a collective
// (shape, dtype, root rank, op...) or it cannot run while a rank has joined;
// the job itself is healthy. Append only: api.h mirrors this order.
enum class StatusKind { kOk, kInvalidArgument, kCollective, kTransport, kTimeout, kShutdown, kPrecondition };

struct Status {
  StatusKind kind = StatusKind::kOk;
  std::string message;

  bool ok() const { return kind == StatusKind::kOk; }
  static Status Ok() { return {}; }
  static Status Error(StatusKind kind, std::string message) { return {kind, std::move(message)}; }
};

}  // namespace hvdlite::core
