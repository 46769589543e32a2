// Runs the ranks of a test job as threads of this process, rendezvousing
// through one InMemoryStore, and re-raises the first rank's failure.
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/store.h"
#include "transport/transport.h"

namespace hvdlite::testing {

// When > 0, ranks call themselves "fakehost<rank / n>": n ranks per host, so
// that the shm transport builds two-level communicators across the "hosts"
// (test_tcp two-level).
inline int& ranksPerFakeHost() {
  static int n = 0;
  return n;
}

// When not empty, rank r calls itself "fakehost<fakeHosts()[r]>" instead, so
// that a test can interleave hosts (ranks of a host not consecutive).
inline std::vector<int>& fakeHosts() {
  static std::vector<int> hosts;
  return hosts;
}

// HVDLITE_HIERARCHICAL_ALLGATHER of the ranks runRanks starts.
inline transport::Hierarchy& allgatherHierarchy() {
  static transport::Hierarchy hierarchy = transport::Hierarchy::kAuto;
  return hierarchy;
}

struct ScopedAllgatherHierarchy {
  explicit ScopedAllgatherHierarchy(transport::Hierarchy hierarchy) : saved(allgatherHierarchy()) {
    allgatherHierarchy() = hierarchy;
  }
  ~ScopedAllgatherHierarchy() { allgatherHierarchy() = saved; }
  transport::Hierarchy saved;
};

inline transport::TransportOptions rankOptions(int rank, int size, const std::string& prefix) {
  transport::TransportOptions options;
  options.allgather_hierarchy = allgatherHierarchy();
  if (ranksPerFakeHost() > 0) options.hostname = "fakehost" + std::to_string(rank / ranksPerFakeHost());
  if (!fakeHosts().empty()) options.hostname = "fakehost" + std::to_string(fakeHosts().at(rank));
  options.rank = rank;
  options.size = size;
  options.secret = "test-secret";
  options.key_prefix = prefix;
  options.timeout = std::chrono::seconds(10);
  return options;
}

// The transport runRanks builds unless told otherwise; test_tcp's main sets
// it from its first argument, so the same contract tests run over "shm".
inline std::string& defaultTransport() {
  static std::string name = "tcp";
  return name;
}

// For a test binary's main: the default transport named by its first
// argument ("tcp" when none); "two-level" is shm inside fake hosts of 2 ranks,
// tcp across them.
inline void useTransportArgument(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "tcp";
  if (mode == "two-level") {
    ranksPerFakeHost() = 2;
    mode = "shm";
  }
  defaultTransport() = mode;
}

// Each rank builds a transport (default: defaultTransport()) and runs body(rank, transport).
// A unique key prefix per call keeps calls on a shared store apart.
inline void runRanks(int size, const std::function<void(int, transport::Transport&)>& body,
                     std::string transport_name = "") {
  if (transport_name.empty()) transport_name = defaultTransport();
  static int round = 0;
  std::string prefix = "t" + std::to_string(round++) + "/";
  transport::InMemoryStore store;
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto transport = transport::createTransport(transport_name, rankOptions(rank, size, prefix), store);
        body(rank, *transport);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace hvdlite::testing
