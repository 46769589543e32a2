// Tests csrc/core/timeline.cc: the file is valid JSON after stop() (checked by
// Python's json module when python3 is on PATH, and structurally here), rows
// are named after tensors, every "B" has its "E" on the same row, and events
// from two threads interleave safely.
#include "core/timeline.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/errors.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("hvdlite_timeline_" + std::to_string(::getpid()) + "_" + name + ".json"))
      .string();
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Brackets and braces outside strings balance and never go negative.
void checkBrackets(const std::string& text) {
  int square = 0, curly = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[') ++square;
    else if (c == ']') --square;
    else if (c == '{') ++curly;
    else if (c == '}') --curly;
    CHECK(square >= 0 && curly >= 0);
  }
  CHECK(!in_string);
  CHECK_EQ(square, 0);
  CHECK_EQ(curly, 0);
  CHECK_EQ(text.front(), '[');
}

// Per row (pid): the open span count never drops below zero and ends at zero.
// Relies on the writer's one event per line. Returns the number of B events.
int checkSpansBalanced(const std::string& text) {
  std::map<long, int> depth;
  std::istringstream lines(text);
  std::string line;
  int begins = 0;
  while (std::getline(lines, line)) {
    size_t ph = line.find("\"ph\":\"");
    size_t pid = line.find("\"pid\":");
    if (ph == std::string::npos || pid == std::string::npos) continue;
    char phase = line[ph + 6];
    long row = std::stol(line.substr(pid + 6));
    if (phase == 'B') {
      ++depth[row];
      ++begins;
    } else if (phase == 'E') {
      CHECK(--depth[row] >= 0);
    }
  }
  for (auto& [row, open] : depth) CHECK_EQ(open, 0);
  return begins;
}

// Python's json module parses the file, and B/E balance per pid and
// non-decreasing timestamps hold on the parsed events. Skipped without python3.
void checkWithPython(const std::string& path) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) {
    std::printf("  (python3 not found: JSON checked structurally only)\n");
    return;
  }
  const std::string script = tempPath("check") + ".py";
  std::ofstream(script) << R"(import json, sys
events = json.load(open(sys.argv[1]))
assert isinstance(events, list) and events, "not a non-empty array"
depth, last_ts = {}, {}
for e in events:
    pid, ph = e["pid"], e["ph"]
    if ph == "B":
        depth[pid] = depth.get(pid, 0) + 1
    elif ph == "E":
        depth[pid] = depth.get(pid, 0) - 1
        assert depth[pid] >= 0, ("E without B", e)
    if "ts" in e:
        assert e["ts"] >= last_ts.get(pid, 0), ("time went back", e)
        last_ts[pid] = e["ts"]
assert all(d == 0 for d in depth.values()), depth
)";
  int status = std::system(("python3 " + script + " " + path).c_str());
  std::filesystem::remove(script);
  CHECK_EQ(status, 0);
}

void checkValidTrace(const std::string& path) {
  std::string text = readFile(path);
  CHECK(!text.empty());
  checkBrackets(text);
  checkSpansBalanced(text);
  checkWithPython(path);
}

void runOp(Timeline& timeline, const std::string& tensor) {
  timeline.negotiateStart(tensor, OpType::kAllreduce);
  timeline.negotiateRankReady(tensor, 0);
  timeline.negotiateRankReady(tensor, 1);
  timeline.negotiateEnd(tensor);
  timeline.activityStart(tensor, "FUSION_PACK");
  timeline.activityEnd(tensor);
  timeline.activityStart(tensor, "TCP_ALLREDUCE");
  timeline.activityEnd(tensor);
  timeline.activityStart(tensor, "FUSION_UNPACK");
  timeline.activityEnd(tensor);
  timeline.opEnd(tensor, DataType::kFloat32, {2, 3});
}

}  // namespace

TEST(inactive_timeline_writes_nothing) {
  Timeline timeline(0);
  CHECK(!timeline.active());
  runOp(timeline, "grad/w");
  timeline.markCycleStart();
  timeline.stop();
  CHECK(!timeline.active());
}

TEST(one_op_has_negotiation_then_op_with_nested_activities) {
  const std::string path = tempPath("one_op");
  Timeline timeline(0);
  timeline.start(path, false);
  CHECK(timeline.active());
  runOp(timeline, "grad/fc1.weight");
  timeline.markCycleStart();  // not marking cycles: ignored
  timeline.stop();
  CHECK(!timeline.active());

  std::string text = readFile(path);
  checkValidTrace(path);
  CHECK(contains(text, "\"name\":\"process_name\",\"pid\":1,\"args\":{\"name\":\"grad/fc1.weight\"}"));
  CHECK(!contains(text, "CYCLE_START"));
  CHECK(contains(text, "\"dtype\":\"float32\",\"shape\":\"[2, 3]\""));
  // The spans in order: negotiation, then the op around its activities.
  size_t at = 0;
  for (const char* name : {"\"NEGOTIATE_ALLREDUCE\"", "\"name\":\"0\"", "\"name\":\"1\"", "\"ALLREDUCE\"",
                           "\"FUSION_PACK\"", "\"TCP_ALLREDUCE\"", "\"FUSION_UNPACK\"", "\"dtype\""}) {
    at = text.find(name, at);
    CHECK(at != std::string::npos);
  }
  CHECK_EQ(checkSpansBalanced(text), 5);
  std::filesystem::remove(path);
}

TEST(two_threads_write_interleaved_events) {
  const std::string path = tempPath("threads");
  Timeline timeline(3);
  timeline.start(path, true);
  auto worker = [&timeline](const std::string& prefix) {
    for (int i = 0; i < 300; ++i) runOp(timeline, prefix + std::to_string(i % 40));
  };
  std::thread a(worker, "a/"), b(worker, "b/");
  for (int i = 0; i < 200; ++i) timeline.markCycleStart();
  a.join();
  b.join();
  timeline.stop();

  std::string text = readFile(path);
  checkValidTrace(path);
  for (int i = 0; i < 40; ++i) {
    CHECK(contains(text, "{\"name\":\"a/" + std::to_string(i) + "\"}"));
    CHECK(contains(text, "{\"name\":\"b/" + std::to_string(i) + "\"}"));
  }
  CHECK(contains(text, "\"name\":\"cycles (rank 3)\""));
  CHECK(contains(text, "\"name\":\"CYCLE_START\""));
  CHECK_EQ(checkSpansBalanced(text), 2 * 300 * 5);
  std::filesystem::remove(path);
}

TEST(stop_closes_spans_left_open) {
  const std::string path = tempPath("open_spans");
  Timeline timeline(0);
  timeline.start(path, false);
  timeline.negotiateStart("still/negotiating", OpType::kBroadcast);
  timeline.negotiateStart("mid/op", OpType::kAllgather);
  timeline.negotiateEnd("mid/op");
  timeline.activityStart("mid/op", "ALLGATHER");
  timeline.activityStart("mid/op", "SECOND");  // ends the first activity
  timeline.negotiateEnd("never/started");     // ignored
  timeline.activityEnd("never/started");      // ignored
  timeline.stop();
  std::string text = readFile(path);
  checkValidTrace(path);
  CHECK(contains(text, "NEGOTIATE_BROADCAST"));
  CHECK(contains(text, "\"ALLGATHER\""));
  CHECK(!contains(text, "never/started"));
  std::filesystem::remove(path);
}

TEST(awkward_tensor_names_stay_valid_json) {
  const std::string path = tempPath("names");
  Timeline timeline(0);
  timeline.start(path, false);
  runOp(timeline, "quote\" back\\slash\nnewline\ttab \x01 \xc3\xa9");
  timeline.stop();
  std::string text = readFile(path);
  checkValidTrace(path);
  CHECK(contains(text, "quote\\\" back\\\\slash\\u000anewline\\u0009tab \\u0001 \xc3\xa9"));
  std::filesystem::remove(path);
}

TEST(unopenable_path_names_the_path) {
  Timeline timeline(0);
  CHECK_THROWS(timeline.start("/nonexistent-hvdlite-dir/timeline.json", false), InvalidArgument,
               "/nonexistent-hvdlite-dir/timeline.json");
  CHECK(!timeline.active());
  runOp(timeline, "x");
}

TEST(restart_finishes_the_old_file_first) {
  const std::string first = tempPath("first"), second = tempPath("second");
  Timeline timeline(0);
  timeline.start(first, false);
  runOp(timeline, "old/tensor");
  timeline.negotiateStart("old/open", OpType::kAllreduce);
  timeline.start(second, false);
  checkValidTrace(first);  // complete before the second file has been stopped
  runOp(timeline, "new/tensor");
  timeline.stop();
  timeline.stop();  // twice is fine
  checkValidTrace(second);
  CHECK(contains(readFile(first), "old/tensor"));
  CHECK(!contains(readFile(first), "new/tensor"));
  CHECK(contains(readFile(second), "new/tensor"));
  CHECK(!contains(readFile(second), "old/"));
  // Rows are numbered afresh in each file, each with its own name event.
  CHECK(contains(readFile(second), "\"pid\":1,\"args\":{\"name\":\"new/tensor\"}"));
  std::filesystem::remove(first);
  std::filesystem::remove(second);
}

TEST(large_traces_are_written_in_chunks_before_stop) {
  const std::string path = tempPath("large");
  {
    Timeline timeline(0);
    timeline.start(path, false);
    for (int i = 0; i < 4000; ++i) runOp(timeline, "layer" + std::to_string(i % 500) + "/weight");
    CHECK(std::filesystem::file_size(path) > 0);  // over 1 MiB was buffered: some was written
  }  // the destructor stops
  checkValidTrace(path);
  std::filesystem::remove(path);
}

TEST(a_failed_write_stops_the_timeline_not_the_caller) {
  if (!std::filesystem::exists("/dev/full")) return;  // writes there fail with ENOSPC
  Timeline timeline(0);
  timeline.start("/dev/full", false);
  for (int i = 0; i < 4000 && timeline.active(); ++i) runOp(timeline, "t" + std::to_string(i % 100));
  CHECK(!timeline.active());  // a warning was logged
  runOp(timeline, "after");
  timeline.stop();
}

int main() { return RUN_ALL_TESTS(); }
