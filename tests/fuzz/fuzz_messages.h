// The fuzz target of the core's message parsing (fuzz_messages.cc), shared
// by libFuzzer's entry point and the mutation driver (mutation_driver.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvdlite::fuzz {

// An input's first byte (modulo 3): which parser gets the rest.
enum class Kind : uint8_t { kRequests = 0, kResponses = 1, kFailure = 2 };

// Real messages from the serializers, each behind its Kind byte.
std::vector<std::string> seedMessages();

// Runs one input; 1 if it parsed, 0 if it was refused (an hvdlite::Error).
// Anything else (a crash, a sanitizer report, another exception) is a bug.
int parseOne(const uint8_t* data, size_t size);

}  // namespace hvdlite::fuzz
