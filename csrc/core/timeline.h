// The timeline: a Chrome trace (chrome://tracing, ui.perfetto.dev) of what
// each tensor went through, laid out like Horovod's. Every tensor gets its own
// row (a trace "process" named after the tensor); on it a NEGOTIATE_<OP> span
// runs from enqueue until all ranks are ready, then an <OP> span (ALLREDUCE,
// ...) until the tensor's op ends, with its activities (FUSION_PACK,
// ALLREDUCE, FUSION_UNPACK, ...) nested inside. The op span's end carries the
// dtype and shape. Times are microseconds since start().
//
// Threading: every method may be called from any thread (start/stop from user
// threads, the rest from the background thread); one mutex orders them.
// Events go to an in-memory buffer that is written out in large chunks, so
// recording costs no system call. When the timeline is not active every method
// returns after one atomic load; callers that must build strings first can
// check active() themselves.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/types.h"

namespace hvdlite::core {

class Timeline {
 public:
  explicit Timeline(int rank);
  ~Timeline();  // stop()
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` (truncated). A timeline already running is
  // stopped first, leaving its file complete. Throws InvalidArgument naming
  // the path if it cannot be opened (the timeline is then inactive).
  // mark_cycles adds a CYCLE_START marker for every background-loop cycle.
  void start(const std::string& path, bool mark_cycles);
  // Ends the spans still open, writes the closing bracket and closes the file,
  // which is then valid JSON. Does nothing when not active.
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // The tensor was enqueued here and waits for the other ranks.
  void negotiateStart(const std::string& tensor, OpType op);
  // On the coordinator: `rank` has reported the tensor ready (an instant event).
  void negotiateRankReady(const std::string& tensor, int rank);
  // All ranks are ready: the negotiation span ends and the op span begins.
  // Ignored for a tensor this rank is not negotiating (a joined rank, or a
  // timeline started mid-negotiation).
  void negotiateEnd(const std::string& tensor);
  // A phase of the op; starting one ends the previous one still open.
  void activityStart(const std::string& tensor, const std::string& activity);
  void activityEnd(const std::string& tensor);
  // Ends whatever is open for the tensor; the op span's end records the dtype
  // and the shape (as the caller formats it, e.g. "[2, 3]").
  void opEnd(const std::string& tensor, DataType dtype, const std::vector<int64_t>& shape);
  // A global instant marker; only when started with mark_cycles.
  void markCycleStart();

 private:
  enum class Phase : uint8_t { kIdle, kNegotiating, kRunning };
  // A tensor's row and the spans open on it (at most: op span, one activity).
  struct Row {
    int pid = 0;
    OpType op = OpType::kAllreduce;
    Phase phase = Phase::kIdle;
    bool in_activity = false;
  };
  struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };

  Row& rowFor(const std::string& tensor);
  Row* existingRow(const std::string& tensor);
  void closeSpans(Row& row);
  void writeBegin(const Row& row, const std::string& name);
  void writeEnd(const Row& row, const std::string& args = {});
  void writeInstant(int pid, const std::string& name, char scope);
  void writeProcessName(int pid, const std::string& name);
  void startEvent();
  void finishEvent();
  int64_t microsSinceStart() const;
  void flush();
  void finishFile();

  const int rank_;
  std::atomic<bool> active_{false};
  std::mutex mutex_;  // guards everything below
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::string path_;
  std::string buffer_;  // events not yet written to file_
  bool first_event_ = true;
  bool mark_cycles_ = false;
  std::chrono::steady_clock::time_point start_time_;
  std::chrono::steady_clock::time_point last_flush_;
  std::unordered_map<std::string, Row> rows_;
  int next_pid_ = 1;  // pid 0 is the cycle-marker row
};

}  // namespace hvdlite::core
