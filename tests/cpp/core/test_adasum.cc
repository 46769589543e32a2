// Tests csrc/core/adasum.cc: ranks are threads over tcp and shared memory;
// results are checked against a direct implementation of the pairwise tree
// ((0,1),(2,3)) -> (0..3), tensor by tensor, and across ranks bit for bit.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/adasum.h"
#include "testing.h"
#include "transport/ranks.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

template <typename T>
using Vectors = std::vector<std::vector<T>>;  // one per rank

// a = Adasum(a, b), tensor by tensor, in double and rounded to T like the core.
template <typename T>
void combineReference(std::vector<T>& a, const std::vector<T>& b, const std::vector<size_t>& bounds) {
  for (size_t t = 0; t + 1 < bounds.size(); ++t) {
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = bounds[t]; i < bounds[t + 1]; ++i) {
      dot += double(a[i]) * double(b[i]);
      aa += double(a[i]) * double(a[i]);
      bb += double(b[i]) * double(b[i]);
    }
    const double ca = aa >= 1e-8 ? 1 - dot / (2 * aa) : 1, cb = bb >= 1e-8 ? 1 - dot / (2 * bb) : 1;
    for (size_t i = bounds[t]; i < bounds[t + 1]; ++i) a[i] = T(ca * double(a[i]) + cb * double(b[i]));
  }
}

template <typename T>
std::vector<T> referenceTree(Vectors<T> inputs, const std::vector<size_t>& bounds) {
  for (size_t distance = 1; distance < inputs.size(); distance *= 2) {
    for (size_t r = 0; r < inputs.size(); r += 2 * distance) combineReference(inputs[r], inputs[r + distance], bounds);
  }
  return inputs[0];
}

template <typename T>
DataType dtypeOf() {
  return sizeof(T) == 8 ? DataType::kFloat64 : DataType::kFloat32;
}

// Runs Adasum on `inputs` (one vector per rank) and returns every rank's result.
template <typename T>
Vectors<T> runAdasum(const Vectors<T>& inputs, const std::vector<size_t>& bounds, const std::string& transport) {
  const int size = static_cast<int>(inputs.size());
  Vectors<T> outputs = inputs;
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  testing::runRanks(size, [&](int rank, transport::Transport& t) {
    auto comm = t.communicator(everyone);
    Adasum adasum;
    adasum.allreduce(outputs[rank].data(), dtypeOf<T>(), bounds, *comm);
    // Twice through one instance: its buffers are reused, not stale.
    std::vector<T> again = inputs[rank];
    adasum.allreduce(again.data(), dtypeOf<T>(), bounds, *comm);
    CHECK(std::memcmp(again.data(), outputs[rank].data(), again.size() * sizeof(T)) == 0);
  }, transport);
  return outputs;
}

template <typename T>
Vectors<T> randomInputs(int size, size_t count, unsigned seed) {
  Vectors<T> inputs(size, std::vector<T>(count));
  unsigned state = seed;
  for (auto& v : inputs) {
    for (auto& x : v) {
      state = state * 1103515245u + 12345u;
      x = T(double((state >> 8) % 20001) / 10000.0 - 1.0);
    }
  }
  return inputs;
}

template <typename T>
void checkAgainstReference(int size, const std::vector<size_t>& bounds, const std::string& transport, double tolerance) {
  auto inputs = randomInputs<T>(size, bounds.back(), 17u + size + bounds.size());
  auto expected = referenceTree(inputs, bounds);
  auto outputs = runAdasum(inputs, bounds, transport);
  for (int r = 0; r < size; ++r) {
    CHECK(std::memcmp(outputs[r].data(), outputs[0].data(), outputs[0].size() * sizeof(T)) == 0);
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::fabs(double(outputs[0][i]) - double(expected[i])) > tolerance * (1 + std::fabs(double(expected[i])))) {
      throw testing::Failure("element " + std::to_string(i) + " of " + std::to_string(size) + " ranks over " +
                             transport + ": " + std::to_string(double(outputs[0][i])) + " vs reference " +
                             std::to_string(double(expected[i])));
    }
  }
}

// Tensors of odd sizes, an empty one, and a batch shorter than the ranks.
const std::vector<std::vector<size_t>> kBatches = {
    {0, 5},                // one tensor, odd, not divisible by 2 or 4
    {0, 7, 8, 8, 21, 24},  // 7, 1, 0 (empty), 13, 3 elements
    {0, 3},                // fewer elements than 4 ranks
    {0, 1000, 1001, 1777},
};

}  // namespace

TEST(matches_the_pairwise_tree_float64) {
  for (const char* transport : {"tcp", "shm"}) {
    for (int size : {2, 4}) {
      for (const auto& bounds : kBatches) checkAgainstReference<double>(size, bounds, transport, 1e-12);
    }
  }
}

TEST(matches_the_pairwise_tree_float32) {
  for (int size : {2, 4}) {
    for (const auto& bounds : kBatches) checkAgainstReference<float>(size, bounds, "tcp", 1e-5);
  }
}

// The defining cases: orthogonal vectors add, equal vectors average, and a
// zero vector (a joined rank) leaves the other unchanged.
TEST(orthogonal_add_parallel_average_zero_is_neutral) {
  const std::vector<size_t> bounds{0, 2, 4, 6};
  Vectors<double> inputs = {{1, 0, 3, 4, 5, -2}, {0, 2, 3, 4, 0, 0}};
  auto out = runAdasum(inputs, bounds, "tcp")[0];
  CHECK(out == (std::vector<double>{1, 2, 3, 4, 5, -2}));
}

TEST(coefficients_follow_the_formula) {
  auto c = adasumCoefficients(2.0, 4.0, 1.0);
  CHECK_EQ(c.left, 0.75);
  CHECK_EQ(c.right, 0.0);
  auto tiny = adasumCoefficients(1e-9, 1e-9, 2.0);
  CHECK_EQ(tiny.left, 1.0);
}

int main() { return RUN_ALL_TESTS(); }
