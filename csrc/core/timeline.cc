#include "core/timeline.h"

#include <cctype>
#include <cerrno>
#include <system_error>

#include "common/errors.h"
#include "common/logging.h"
#include "core/message.h"

namespace hvdlite::core {
namespace {

// Large enough that writes are rare, small enough to bound memory; and at
// least once a second, so a viewer opened mid-run, or a crash, still shows
// the recent past.
constexpr size_t kFlushBytes = size_t{1} << 20;
constexpr auto kFlushInterval = std::chrono::seconds(1);

void appendJsonString(std::string& out, const std::string& text) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string upperName(OpType op) {
  std::string name = opTypeName(op);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

Timeline::Timeline(int rank) : rank_(rank) {}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_) finishFile();
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "w"));
  if (!file) {
    throw InvalidArgument(detail::concat("cannot open timeline file '", path,
                                         "': ", std::error_code(errno, std::generic_category()).message()));
  }
  // Our own buffer replaces stdio's, so each flush is one write.
  std::setvbuf(file.get(), nullptr, _IONBF, 0);
  file_ = std::move(file);
  path_ = path;
  mark_cycles_ = mark_cycles;
  buffer_ = "[";
  first_event_ = true;
  rows_.clear();
  next_pid_ = 1;
  start_time_ = last_flush_ = std::chrono::steady_clock::now();
  if (mark_cycles_) writeProcessName(0, detail::concat("cycles (rank ", rank_, ")"));
  active_ = true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_) finishFile();
}

void Timeline::negotiateStart(const std::string& tensor, OpType op) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_) return;
  Row& row = rowFor(tensor);
  closeSpans(row);  // a tensor enqueued again before its op ended; keep the file balanced
  row.op = op;
  row.phase = Phase::kNegotiating;
  writeBegin(row, "NEGOTIATE_" + upperName(op));
}

void Timeline::negotiateRankReady(const std::string& tensor, int rank) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_) return;
  writeInstant(rowFor(tensor).pid, std::to_string(rank), 't');
}

void Timeline::negotiateEnd(const std::string& tensor) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Row* row = existingRow(tensor);
  if (!file_ || !row || row->phase != Phase::kNegotiating) return;
  writeEnd(*row);
  row->phase = Phase::kRunning;
  writeBegin(*row, upperName(row->op));
}

void Timeline::activityStart(const std::string& tensor, const std::string& activity) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_) return;
  Row& row = rowFor(tensor);
  if (row.in_activity) writeEnd(row);
  row.in_activity = true;
  writeBegin(row, activity);
}

void Timeline::activityEnd(const std::string& tensor) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Row* row = existingRow(tensor);
  if (!file_ || !row || !row->in_activity) return;
  row->in_activity = false;
  writeEnd(*row);
}

// The shape is formatted here, not by the caller: only when recording.
void Timeline::opEnd(const std::string& tensor, DataType dtype, const std::vector<int64_t>& shape) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Row* row = existingRow(tensor);
  if (!file_ || !row) return;
  if (row->in_activity) writeEnd(*row);
  row->in_activity = false;
  if (row->phase == Phase::kRunning) {
    std::string args = ",\"args\":{\"dtype\":";
    appendJsonString(args, dtypeName(dtype));
    args += ",\"shape\":";
    appendJsonString(args, shapeString(shape));
    args += '}';
    writeEnd(*row, args);
  } else if (row->phase == Phase::kNegotiating) {
    writeEnd(*row);  // the op failed before negotiation finished
  }
  row->phase = Phase::kIdle;
}

void Timeline::markCycleStart() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_ || !mark_cycles_) return;
  writeInstant(0, "CYCLE_START", 'g');
}

// ---- Rows and spans (all called with mutex_ held and file_ open).

Timeline::Row& Timeline::rowFor(const std::string& tensor) {
  auto [it, inserted] = rows_.try_emplace(tensor);
  if (inserted) {
    it->second.pid = next_pid_++;
    writeProcessName(it->second.pid, tensor);
  }
  return it->second;
}

Timeline::Row* Timeline::existingRow(const std::string& tensor) {
  auto it = rows_.find(tensor);
  return it == rows_.end() ? nullptr : &it->second;
}

// Ends the activity, then the negotiation or op span, so that every "B" on
// the row has its "E" (viewers otherwise draw open spans to the trace's end).
void Timeline::closeSpans(Row& row) {
  if (row.in_activity) writeEnd(row);
  if (row.phase != Phase::kIdle) writeEnd(row);
  row.in_activity = false;
  row.phase = Phase::kIdle;
}

// ---- Event encoding: one JSON object per line, each line after the first
// preceded by a comma, so that the closing bracket is all stop() must add.

void Timeline::writeBegin(const Row& row, const std::string& name) {
  startEvent();
  buffer_ += "\"ph\":\"B\",\"name\":";
  appendJsonString(buffer_, name);
  buffer_ += ",\"ts\":" + std::to_string(microsSinceStart()) + ",\"pid\":" + std::to_string(row.pid) +
             ",\"tid\":0";
  finishEvent();
}

void Timeline::writeEnd(const Row& row, const std::string& args) {
  startEvent();
  buffer_ += "\"ph\":\"E\",\"ts\":" + std::to_string(microsSinceStart()) +
             ",\"pid\":" + std::to_string(row.pid) + ",\"tid\":0";
  buffer_ += args;
  finishEvent();
}

// scope 't' marks the row's thread, 'g' draws a line across the whole trace.
void Timeline::writeInstant(int pid, const std::string& name, char scope) {
  startEvent();
  buffer_ += "\"ph\":\"i\",\"name\":";
  appendJsonString(buffer_, name);
  buffer_ += ",\"ts\":" + std::to_string(microsSinceStart()) + ",\"pid\":" + std::to_string(pid) +
             ",\"tid\":0,\"s\":\"";
  buffer_ += scope;
  buffer_ += '"';
  finishEvent();
}

// Names the row, and sorts rows in order of first appearance.
void Timeline::writeProcessName(int pid, const std::string& name) {
  startEvent();
  buffer_ += "\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) + ",\"args\":{\"name\":";
  appendJsonString(buffer_, name);
  buffer_ += "}";
  finishEvent();
  startEvent();
  buffer_ += "\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(pid) +
             ",\"args\":{\"sort_index\":" + std::to_string(pid) + "}";
  finishEvent();
}

void Timeline::startEvent() {
  buffer_ += first_event_ ? "\n{" : ",\n{";
  first_event_ = false;
}

void Timeline::finishEvent() {
  buffer_ += '}';
  if (buffer_.size() >= kFlushBytes || std::chrono::steady_clock::now() - last_flush_ >= kFlushInterval) {
    flush();
  }
}

int64_t Timeline::microsSinceStart() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start_time_)
      .count();
}

// ---- The file.

// A failed write (disk full, ...) stops the timeline rather than the job:
// the timeline is a diagnostic, and the background thread cannot report to
// anyone but the log.
void Timeline::flush() {
  last_flush_ = std::chrono::steady_clock::now();
  if (buffer_.empty()) return;
  const bool failed = !file_ || std::fwrite(buffer_.data(), 1, buffer_.size(), file_.get()) != buffer_.size();
  const int error = errno;
  buffer_.clear();
  if (!failed || !file_) return;
  logWarning(rank_, detail::concat("writing timeline file '", path_, "' failed (",
                                   std::error_code(error, std::generic_category()).message(),
                                   "); the timeline is stopped"));
  file_.reset();
  active_ = false;
}

void Timeline::finishFile() {
  active_ = false;
  for (auto& entry : rows_) closeSpans(entry.second);
  rows_.clear();
  buffer_ += "\n]\n";
  flush();  // after a failed write file_ is gone and this drops the buffer
  if (file_ && std::fclose(file_.release()) != 0) {
    logWarning(rank_, detail::concat("closing timeline file '", path_, "' failed (",
                                     std::error_code(errno, std::generic_category()).message(), ")"));
  }
}

}  // namespace hvdlite::core
