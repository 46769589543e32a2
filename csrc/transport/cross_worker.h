// The thread that runs a pipelined two-level allreduce's network steps while
// the calling thread runs the shared-memory steps of the neighbouring chunks
// (Note [Pipelined two levels] in two_level_communicator.cc).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "transport/communicator.h"

namespace hvdlite::transport {

class CrossWorker {
 public:
  explicit CrossWorker(Communicator& cross);
  ~CrossWorker();
  CrossWorker(const CrossWorker&) = delete;
  CrossWorker& operator=(const CrossWorker&) = delete;

  // Queues cross.allreduce(data, count, dtype, op); jobs run in order.
  void post(void* data, size_t count, DataType dtype, ReduceOp op);
  // Waits for the oldest job not yet waited for; rethrows its failure.
  void waitOldest();
  // Waits for every queued job, ignoring failures (after an abort).
  void drain();

 private:
  struct Job {
    void* data;
    size_t count;
    DataType dtype;
    ReduceOp op;
  };
  void loop();

  Communicator& cross_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  std::deque<std::exception_ptr> finished_;  // results not yet waited for, in order
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hvdlite::transport
