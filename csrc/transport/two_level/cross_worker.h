// The thread that runs a pipelined two-level collective's network steps
// while the calling thread runs the shared-memory steps of the neighbouring
// chunks (Note [Pipelined two levels] in two_level_communicator.cc).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace hvdlite::transport::two_level {

class CrossWorker {
 public:
  CrossWorker();
  ~CrossWorker();
  CrossWorker(const CrossWorker&) = delete;
  CrossWorker& operator=(const CrossWorker&) = delete;

  // Queues a network step (a collective on the cross communicator); jobs
  // run in order.
  void post(std::function<void()> job);
  // Waits for the oldest job not yet waited for; rethrows its failure.
  void waitOldest();
  // Waits for every queued job, ignoring failures (after an abort).
  void drain();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  std::deque<std::exception_ptr> finished_;  // results not yet waited for, in order
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hvdlite::transport::two_level
