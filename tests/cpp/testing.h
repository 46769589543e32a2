// A minimal test harness: TEST(name) { ... } bodies with CHECK/CHECK_EQ/CHECK_THROWS,
// run by RUN_ALL_TESTS() from main. Prints "N passed, M failed" and exits non-zero on
// any failure, so ctest and CI read the result.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace hvdlite::testing {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

struct Registrar {
  Registrar(const char* name, std::function<void()> body) { registry().push_back({name, body}); }
};

struct Failure : std::exception {
  std::string message;
  explicit Failure(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

inline int runAll() {
  int passed = 0, failed = 0;
  for (auto& test : registry()) {
    try {
      test.body();
      ++passed;
      std::printf("[ OK ] %s\n", test.name);
    } catch (const std::exception& e) {
      ++failed;
      std::printf("[FAIL] %s: %s\n", test.name, e.what());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace hvdlite::testing

#define HVD_TEST_CONCAT2(a, b) a##b
#define HVD_TEST_CONCAT(a, b) HVD_TEST_CONCAT2(a, b)
#define TEST(name)                                                                      \
  static void name();                                                                   \
  static ::hvdlite::testing::Registrar HVD_TEST_CONCAT(registrar_, name)(#name, name); \
  static void name()

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::ostringstream out_;                                                               \
      out_ << __FILE__ << ":" << __LINE__ << ": CHECK(" #cond ") failed";                    \
      throw ::hvdlite::testing::Failure(out_.str());                                         \
    }                                                                                        \
  } while (0)

#define CHECK_EQ(a, b)                                                                       \
  do {                                                                                       \
    auto va_ = (a);                                                                          \
    auto vb_ = (b);                                                                          \
    if (!(va_ == vb_)) {                                                                     \
      std::ostringstream out_;                                                               \
      out_ << __FILE__ << ":" << __LINE__ << ": CHECK_EQ(" #a ", " #b ") failed: " << va_    \
           << " vs " << vb_;                                                                 \
      throw ::hvdlite::testing::Failure(out_.str());                                         \
    }                                                                                        \
  } while (0)

// Checks that expr throws exception_type whose what() contains `substring`.
#define CHECK_THROWS(expr, exception_type, substring)                                        \
  do {                                                                                       \
    bool thrown_ = false;                                                                    \
    try {                                                                                    \
      expr;                                                                                  \
    } catch (const exception_type& e_) {                                                     \
      thrown_ = true;                                                                        \
      if (std::string(e_.what()).find(substring) == std::string::npos) {                     \
        std::ostringstream out_;                                                             \
        out_ << __FILE__ << ":" << __LINE__ << ": message '" << e_.what()                    \
             << "' lacks '" << substring << "'";                                             \
        throw ::hvdlite::testing::Failure(out_.str());                                       \
      }                                                                                      \
    }                                                                                        \
    if (!thrown_) {                                                                          \
      throw ::hvdlite::testing::Failure(std::string(__FILE__) + ": " #expr " did not throw"); \
    }                                                                                        \
  } while (0)

#define RUN_ALL_TESTS() ::hvdlite::testing::runAll()
