// common/logging.h: level names (Horovod's), the layout of a line with and
// without the time, and that a message below the level is never formatted
// (Note [Free when filtered]).
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>

#include "common/errors.h"
#include "common/logging.h"
#include "testing.h"

using namespace hvdlite;

namespace {

// What `body` writes to stderr.
template <typename Body>
std::string stderrOf(Body body) {
  std::fflush(stderr);
  char path[] = "/tmp/hvdlite-test-logging-XXXXXX";
  int fd = mkstemp(path);
  int saved = dup(2);
  dup2(fd, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  char buffer[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<size_t>(n));
  close(fd);
  unlink(path);
  return text;
}

int g_formatted = 0;
struct Counted {};
std::ostream& operator<<(std::ostream& out, const Counted&) {
  ++g_formatted;
  return out << "counted";
}

}  // namespace

TEST(LevelNamesAreHorovodsInAnyCase) {
  CHECK(parseLogLevel("trace") == LogLevel::kTrace);
  CHECK(parseLogLevel("DEBUG") == LogLevel::kDebug);
  CHECK(parseLogLevel("Info") == LogLevel::kInfo);
  CHECK(parseLogLevel("warning") == LogLevel::kWarning);
  CHECK(parseLogLevel("warn") == LogLevel::kWarning);
  CHECK(parseLogLevel("error") == LogLevel::kError);
  CHECK(parseLogLevel("fatal") == LogLevel::kFatal);
  CHECK_THROWS(parseLogLevel("loud"), InvalidArgument, "use trace, debug, info, warning, error or fatal");
}

TEST(MessagesBelowTheLevelAreNeverFormatted) {
  setLogLevel(LogLevel::kWarning);
  g_formatted = 0;
  auto text = stderrOf([] {
    HVD_LOG(kDebug, 0, "not shown ", Counted{});
    HVD_LOG(kInfo, 0, "not shown ", Counted{});
  });
  CHECK_EQ(g_formatted, 0);
  CHECK_EQ(text, std::string());
  text = stderrOf([] { HVD_LOG(kError, 3, "shown ", Counted{}); });
  CHECK_EQ(g_formatted, 1);
  CHECK(text.find("E hvdlite rank 3] shown counted\n") != std::string::npos);
}

TEST(LinesFollowHorovodsLayoutWithAndWithoutTheTime) {
  setLogLevel(LogLevel::kTrace);
  setLogTime(true);
  auto text = stderrOf([] { HVD_LOG(kInfo, 1, "topology: ", 2, " ranks"); });
  CHECK(std::regex_match(text, std::regex(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}: I hvdlite rank 1\] )"
                                          R"(topology: 2 ranks\n)")));
  setLogTime(false);
  text = stderrOf([] { HVD_LOG(kTrace, 0, "cycle"); });
  CHECK_EQ(text, std::string("[T hvdlite rank 0] cycle\n"));
  setLogTime(true);
  setLogLevel(LogLevel::kWarning);
}

int main() { return RUN_ALL_TESTS(); }
