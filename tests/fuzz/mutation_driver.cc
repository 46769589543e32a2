// A deterministic mutation fuzzer for fuzz_messages.cc, for compilers
// without libFuzzer (GCC): real serialized messages (seedMessages) mutated
// at random from a fixed seed (bit flips, interesting integers written over
// a count or a length, bytes inserted, removed, duplicated, cut, spliced
// with another input), each run through the target under AddressSanitizer
// and UBSan. Inputs that parse join the corpus (up to a cap), so mutations
// reach past the first check. A sanitizer report aborts the process, and
// any exception other than hvdlite's own refusals fails it: ctest, `make
// fuzz` and CI see a non-zero exit, with the input that did it in hex.
//
//   fuzz_messages [--seconds S] [--iterations N] [--seed K]
//   fuzz_messages --write-seeds DIR   (the seed corpus, one file each, for libFuzzer)
//
// Stops at whichever limit comes first (default: 20 s, no iteration limit).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "fuzz_messages.h"

namespace {

using hvdlite::fuzz::parseOne;
using hvdlite::fuzz::seedMessages;

// Values that sit on the edges checks are made of: 0, 1, the largest and
// smallest signed and unsigned integers of each width, and sizes just past
// what a short message holds.
const uint64_t kInteresting[] = {0, 1, 2, 3, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0xffff, 0x10000, 0x7fffffff,
                                 0x80000000, 0xffffffff, 0x100000000ull, 0x7fffffffffffffffull,
                                 0x8000000000000000ull, 0xffffffffffffffffull, 0x4000000000000000ull,
                                 0x2000000000000001ull, 1000, 4096};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(std::string in, const std::vector<std::string>& corpus) {
    const int steps = 1 + static_cast<int>(below(4));
    for (int i = 0; i < steps; ++i) in = once(std::move(in), corpus);
    return in;
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  std::string once(std::string in, const std::vector<std::string>& corpus) {
    if (in.empty()) in.push_back(static_cast<char>(below(3)));
    const size_t at = below(in.size());
    switch (below(8)) {
      case 0:  // flip a bit
        in[at] = static_cast<char>(in[at] ^ (1 << below(8)));
        break;
      case 1:  // a random byte
        in[at] = static_cast<char>(below(256));
        break;
      case 2: {  // an interesting integer of 1, 2, 4 or 8 bytes, little-endian
        const size_t width = size_t{1} << below(4);
        uint64_t value = kInteresting[below(sizeof(kInteresting) / sizeof(kInteresting[0]))];
        if (below(4) == 0) value = ~value + 1;  // its negation
        for (size_t i = 0; i < width && at + i < in.size(); ++i) in[at + i] = static_cast<char>(value >> (8 * i));
        break;
      }
      case 3: {  // insert random bytes
        std::string bytes(1 + below(8), '\0');
        for (auto& c : bytes) c = static_cast<char>(below(256));
        in.insert(at, bytes);
        break;
      }
      case 4:  // remove a range
        in.erase(at, 1 + below(16));
        break;
      case 5:  // cut the end off
        in.resize(at);
        break;
      case 6: {  // duplicate a range
        const std::string part = in.substr(at, 1 + below(32));
        in.insert(below(in.size() + 1), part);
        break;
      }
      case 7: {  // splice: this input's head, another's tail
        const std::string& other = corpus[below(corpus.size())];
        if (!other.empty()) in = in.substr(0, at) + other.substr(below(other.size()));
        break;
      }
    }
    return in;
  }

  std::mt19937_64 rng_;
};

std::string hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

int run(const std::string& input) {
  return parseOne(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

int writeSeeds(const std::string& dir) {
  const auto seeds = seedMessages();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = dir + "/seed-" + std::to_string(i);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) != seeds[i].size()) {
      std::fprintf(stderr, "cannot write %s (does the folder exist?)\n", path.c_str());
      if (f) std::fclose(f);
      return 1;
    }
    std::fclose(f);
  }
  std::printf("%zu seed messages in %s\n", seeds.size(), dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 20;
  uint64_t iterations = 0;  // 0: no limit
  uint64_t seed = 39;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--write-seeds") == 0) return writeSeeds(argv[i + 1]);
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::strtoull(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "unknown option %s; use --seconds S, --iterations N, --seed K\n", argv[i]);
      return 2;
    }
  }
  // Inputs that parsed, kept to mutate further; capped so that the seeds
  // keep their share of the mutations.
  constexpr size_t kCorpusCap = 2000;
  std::vector<std::string> corpus = seedMessages();
  const size_t seeds = corpus.size();
  for (const auto& s : corpus) {
    if (run(s) != 1) {
      std::fprintf(stderr, "a seed message did not parse: %s\n", hex(s).c_str());
      return 1;
    }
  }
  Mutator mutator(seed);
  std::mt19937_64 pick(seed + 1);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  uint64_t done = 0, parsed = 0;
  std::string input;
  try {
    while ((iterations == 0 || done < iterations) && (done % 256 != 0 || std::chrono::steady_clock::now() < deadline)) {
      input = mutator.mutate(corpus[pick() % corpus.size()], corpus);
      if (run(input) == 1) {
        ++parsed;
        if (corpus.size() < kCorpusCap) corpus.push_back(input);
        else corpus[seeds + pick() % (kCorpusCap - seeds)] = input;
      }
      ++done;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL after %llu inputs: %s (not an hvdlite::Error) on input %s\n",
                 static_cast<unsigned long long>(done), e.what(), hex(input).c_str());
    return 1;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz_messages: %llu inputs in %.1f s (seed %llu), %llu parsed, corpus %zu, no crash\n",
              static_cast<unsigned long long>(done), took, static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(parsed), corpus.size());
  return 0;
}
