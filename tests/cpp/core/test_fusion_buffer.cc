// Note [Fusion buffer gives back] in core/fusion.cc: the buffer keeps its
// capacity for a steady loop and shrinks after a one-off large batch.
#include "core/fusion.h"
#include "testing.h"

using namespace hvdlite::core;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
}

TEST(ASteadyLoopAllocatesOnce) {
  FusionBuffer buffer;
  uint8_t* first = buffer.reserve(8 * kMiB);
  for (int i = 0; i < 10 * FusionBuffer::kTrimWindow; ++i) {
    CHECK(buffer.reserve(i % 2 ? 8 * kMiB : 5 * kMiB) == first);
  }
  CHECK_EQ(buffer.capacity(), 8 * kMiB);
}

TEST(AOneOffLargeBatchIsGivenBackAfterAWindow) {
  FusionBuffer buffer;
  buffer.reserve(128 * kMiB);  // broadcast_parameters' fused batch
  CHECK_EQ(buffer.capacity(), 128 * kMiB);
  for (int i = 1; i < FusionBuffer::kTrimWindow; ++i) buffer.reserve(4 * kMiB);
  CHECK_EQ(buffer.capacity(), 128 * kMiB);  // the window still holds the large request
  for (int i = 0; i < FusionBuffer::kTrimWindow; ++i) buffer.reserve(i == 3 ? 6 * kMiB : 4 * kMiB);
  CHECK_EQ(buffer.capacity(), 6 * kMiB);  // the window's largest request, not its last
  uint8_t* data = buffer.reserve(6 * kMiB);
  data[6 * kMiB - 1] = 1;  // the whole request is writable
}

TEST(SmallBuffersAreNeverShrunk) {
  FusionBuffer buffer;
  buffer.reserve(FusionBuffer::kTrimFloor);
  for (int i = 0; i < 3 * FusionBuffer::kTrimWindow; ++i) buffer.reserve(16);
  CHECK_EQ(buffer.capacity(), FusionBuffer::kTrimFloor);
}

TEST(GrowingReturnsEnoughAndAnEmptyRequestIsValid) {
  FusionBuffer buffer;
  CHECK(buffer.reserve(0) != nullptr);
  uint8_t* data = buffer.reserve(3 * kMiB);
  data[3 * kMiB - 1] = 7;
  CHECK(buffer.capacity() >= 3 * kMiB);
}

int main() { return RUN_ALL_TESTS(); }
