// Tests scaleInto (csrc/common/reduce.cc), fusion's copy-and-scale: for every
// dtype and factor it writes what a copy followed by scaleInPlace writes, on
// the F16C path and the portable one, in place too.
#include <cstring>
#include <random>
#include <vector>

#include "common/errors.h"
#include "common/half.h"
#include "common/reduce.h"
#include "testing.h"

using namespace hvdlite;

namespace {

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,     DataType::kInt16,
                              DataType::kUInt16,  DataType::kInt32,    DataType::kInt64,
                              DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                              DataType::kFloat64, DataType::kBool};

template <typename T>
void put(uint8_t* at, T value) {
  std::memcpy(at, &value, sizeof value);
}

// count elements of dtype with values in [-100, 100] (0/1 for bool).
std::vector<uint8_t> elements(DataType dtype, size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> pick(-100.0, 100.0);
  std::vector<uint8_t> out(count * dtypeSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    double v = pick(rng);
    uint8_t* at = out.data() + i * dtypeSize(dtype);
    switch (dtype) {
      case DataType::kUInt8: put<uint8_t>(at, static_cast<uint8_t>(v + 100)); break;
      case DataType::kInt8: put<int8_t>(at, static_cast<int8_t>(v)); break;
      case DataType::kInt16: put<int16_t>(at, static_cast<int16_t>(v * 100)); break;
      case DataType::kUInt16: put<uint16_t>(at, static_cast<uint16_t>((v + 100) * 100)); break;
      case DataType::kInt32: put<int32_t>(at, static_cast<int32_t>(v * 1e6)); break;
      case DataType::kInt64: put<int64_t>(at, static_cast<int64_t>(v * 1e12)); break;
      case DataType::kFloat16: put<uint16_t>(at, floatToHalf(static_cast<float>(v))); break;
      case DataType::kBFloat16: put<uint16_t>(at, floatToBFloat16(static_cast<float>(v))); break;
      case DataType::kFloat32: put<float>(at, static_cast<float>(v)); break;
      case DataType::kFloat64: put<double>(at, v); break;
      case DataType::kBool: put<uint8_t>(at, v > 0); break;
    }
  }
  return out;
}

void checkEveryType() {
  std::mt19937_64 rng(49);
  for (DataType dtype : kAllTypes) {
    for (double factor : {1.0, 0.5, 1.0 / 3.0, 3.0, -2.0}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{17}, size_t{1000}}) {
        const std::vector<uint8_t> src = elements(dtype, count, rng);
        std::vector<uint8_t> want = src;
        scaleInPlace(want.data(), count, dtype, factor);
        std::vector<uint8_t> got(src.size() + 1, 0xAB);  // one guard byte past the end
        scaleInto(got.data(), src.data(), count, dtype, factor);
        CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
        CHECK_EQ(static_cast<int>(got.back()), 0xAB);
        std::vector<uint8_t> in_place = src;
        scaleInto(in_place.data(), in_place.data(), count, dtype, factor);
        CHECK(in_place == want);
      }
    }
  }
}

}  // namespace

TEST(scale_into_is_a_copy_then_scale_in_place) { checkEveryType(); }

TEST(scale_into_portable_float16_path_matches) {
  detail::allowF16c(false);
  checkEveryType();
  detail::allowF16c(true);
}

TEST(scale_into_rejects_partial_overlap) {
  std::vector<float> data(16, 1.0f);
  CHECK_THROWS(scaleInto(data.data() + 1, data.data(), 8, DataType::kFloat32, 0.5), InvalidArgument,
               "overlap partially");
}

int main() { return RUN_ALL_TESTS(); }
