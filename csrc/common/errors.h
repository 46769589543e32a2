// The typed errors of the core. The Python binding maps InvalidArgument to
// ValueError and every other one to HvdliteInternalError (csrc/python/exceptions.cc).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hvdlite {

// Base of every error the core raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed something wrong (bad dtype, wrong root, duplicate name,
// use before init). Raised in the caller's thread, before anything is sent.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// The ranks disagreed about a collective (mismatched shape, dtype, op...).
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// A connection failed or a peer vanished.
class TransportError : public Error {
 public:
  using Error::Error;
};

// A peer is gone: its process exited, or its host stopped answering
// (`host_silent`: the link timed out, HVDLITE_PEER_TIMEOUT_SECONDS). The
// runtime turns it into the failure's details, so that a program reads the
// lost rank and host from fields (the elastic driver: the lost hosts).
class PeerLost : public TransportError {
 public:
  PeerLost(const std::string& message, int peer_rank, bool host_silent)
      : TransportError(message), peer_rank_(peer_rank), host_silent_(host_silent) {}
  int peerRank() const { return peer_rank_; }  // global rank
  bool hostSilent() const { return host_silent_; }

 private:
  int peer_rank_;
  bool host_silent_;
};

// A peer sent a message that fails its checks (a length, count, rank or size
// out of range: Note [Checked peer messages] in core/message.cc): a bug, a
// different build, or a hostile process. Nothing more from it can be
// trusted, so the runtime cuts it off as it does a lost peer, naming it.
class BadPeerMessage : public PeerLost {
 public:
  BadPeerMessage(const std::string& message, int peer_rank) : PeerLost(message, peer_rank, false) {}
};

// Something did not happen in time (rendezvous, store key, stall shutdown).
class Timeout : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
// "0, 2, 5", for messages that name ranks.
inline std::string joinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}
[[noreturn]] void checkFailed(const char* file, int line, const char* expr, const std::string& msg);
}  // namespace detail

}  // namespace hvdlite

// Invariant check: a failure is a bug in hvdlite, reported with where it happened.
#define HVD_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      ::hvdlite::detail::checkFailed(__FILE__, __LINE__, #cond,                               \
                                     ::hvdlite::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                         \
  } while (0)
