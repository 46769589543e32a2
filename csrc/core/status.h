// The outcome of one tensor's operation, handed to its completion callback.
#pragma once

#include <memory>
#include <string>

#include "common/errors.h"
#include "core/error_details.h"

namespace hvdlite::core {

// Which Python exception a failure becomes (csrc/python/exceptions.cc):
// kInvalidArgument -> ValueError; the rest -> subclasses of
// HvdliteInternalError: kPrecondition -> CollectiveMismatchError (the ranks
// disagree on a collective, or it cannot run while a rank has joined; the
// job itself is healthy; TensorFlow: FailedPreconditionError), kTransport ->
// PeerLostError where the details name the lost ranks, kTimeout ->
// StallTimeoutError, kShutdown -> ShutdownError, kDivergence ->
// DivergenceError (Note [Divergence] in coordinator.cc); kOutsideRun ->
// CollectiveOutsideRunError (not an HvdliteInternalError: nothing retries it).
// Append only: api.h mirrors this order.
enum class StatusKind {
  kOk,
  kInvalidArgument,
  kCollective,
  kTransport,
  kTimeout,
  kShutdown,
  kPrecondition,
  kDivergence,
  // A late joiner's collective refused while it runs alone (Note [Solo
  // collectives] in api/solo.h): never sent to a peer, never retried.
  kOutsideRun,
};
// How many kinds there are (a kind read from a peer is checked against it):
// one more than the last one above.
inline constexpr int kNumStatusKinds = static_cast<int>(StatusKind::kOutsideRun) + 1;

struct Status {
  StatusKind kind = StatusKind::kOk;
  std::string message;
  // What a program can read besides the message (ranks, hosts, tensor
  // names, call sites); null when there is nothing more.
  std::shared_ptr<const ErrorDetails> details;

  bool ok() const { return kind == StatusKind::kOk; }
  static Status Ok() { return {}; }
  static Status Error(StatusKind kind, std::string message,
                      std::shared_ptr<const ErrorDetails> details = nullptr) {
    return {kind, std::move(message), std::move(details)};
  }
};

// A failure raised in the caller's thread that keeps its kind and details
// (a collective refused because the runtime already stopped): the Python
// binding raises it as the same exception type as the failure itself.
class StatusError : public Error {
 public:
  explicit StatusError(Status status) : Error(status.message), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

}  // namespace hvdlite::core
