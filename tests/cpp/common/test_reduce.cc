// Tests csrc/common/reduce.cc and csrc/common/half.h against straightforward
// scalar references: float16/bfloat16 rounding is checked against a nearest-
// value search over all encodings, and every dtype x op kernel against an
// element-at-a-time reference in double or 64-bit integers. Ends by printing
// the throughput of float32 and float16 sum on 64 MiB.
#include "common/reduce.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/errors.h"
#include "common/half.h"
#include "testing.h"

using namespace hvdlite;

namespace {

using Bytes = std::vector<uint8_t>;

// ---- Reference 16-bit float formats.

struct Format16 {
  const char* name;
  int mantissa_bits;
  int bias;
  uint16_t inf;  // also the largest "finite-looking" positive encoding, see refRound
};
constexpr Format16 kHalf{"float16", 10, 15, 0x7C00};
constexpr Format16 kBFloat{"bfloat16", 7, 127, 0x7F80};

// Magnitude of an encoding, reading every exponent as a normal one: the Inf
// encoding then reads as the power of two just above the largest finite value,
// and its even mantissa makes ties there round to Inf, as IEEE requires.
double refMagnitude(uint16_t bits, Format16 f) {
  const int exponent = (bits & 0x7FFF) >> f.mantissa_bits;
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  if (exponent == 0) return std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits);
  return std::ldexp((1 << f.mantissa_bits) + mantissa, exponent - f.bias - f.mantissa_bits);
}

bool refIsNan(uint16_t bits, Format16 f) { return (bits & 0x7FFF) > f.inf; }

double refDecode(uint16_t bits, Format16 f) {
  if (refIsNan(bits, f)) return std::numeric_limits<double>::quiet_NaN();
  double magnitude = (bits & 0x7FFF) == f.inf ? HUGE_VAL : refMagnitude(bits, f);
  return bits & 0x8000 ? -magnitude : magnitude;
}

// Nearest encoding to x, ties to the even encoding: x divided by the spacing
// of the format at x's binade, rounded by nearbyint (ties to even). Because
// an encoding is (binade above the smallest normal) << mantissa_bits plus the
// rounded quotient, a quotient that carries into the next binade, or into
// Inf, still encodes correctly.
uint16_t refRound(double x, Format16 f) {
  if (std::isnan(x)) return static_cast<uint16_t>(f.inf | 1);
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double m = std::fabs(x);
  if (m == 0) return sign;
  if (std::isinf(m)) return sign | f.inf;
  const int min_exponent = 1 - f.bias;  // of the smallest normal
  const int exponent = std::max(std::ilogb(m), min_exponent);
  const double quotient = std::nearbyint(m / std::ldexp(1.0, exponent - f.mantissa_bits));
  const double bits = std::ldexp(exponent - min_exponent, f.mantissa_bits) + quotient;
  return sign | static_cast<uint16_t>(std::min(bits, static_cast<double>(f.inf)));
}

float toFloat(uint16_t bits, Format16 f) {
  return f.inf == kHalf.inf ? halfToFloat(bits) : bfloat16ToFloat(bits);
}
uint16_t fromFloat(float value, Format16 f) {
  return f.inf == kHalf.inf ? floatToHalf(value) : floatToBFloat16(value);
}

void checkNarrowing(float value, Format16 f) {
  uint16_t got = fromFloat(value, f), want = refRound(value, f);
  bool ok = std::isnan(value) ? refIsNan(got, f) : got == want;
  if (!ok) {
    char message[160];
    std::snprintf(message, sizeof message, "%s of %a: got 0x%04x, want 0x%04x", f.name,
                  static_cast<double>(value), got, want);
    throw testing::Failure(message);
  }
}

// ---- Reference reductions, one element at a time.

template <typename T>
T loadAs(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}
template <typename T>
void storeAs(uint8_t* p, T value) {
  std::memcpy(p, &value, sizeof value);
}

// In uint64_t, which wraps; truncating to T keeps the two's-complement bits.
template <typename T>
T refInteger(ReduceOp op, T a, T b) {
  const uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(a));
  const uint64_t y = static_cast<uint64_t>(static_cast<int64_t>(b));
  switch (op) {
    case ReduceOp::kSum: return static_cast<T>(x + y);
    case ReduceOp::kProduct: return static_cast<T>(x * y);
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a < b ? b : a;
    default: return static_cast<T>(a & b);
  }
}

// min/max propagate NaN, and order -0 below +0.
template <typename F>
F refFloat(ReduceOp op, F a, F b) {
  if (op == ReduceOp::kSum) return a + b;
  if (op == ReduceOp::kProduct) return a * b;
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<F>::quiet_NaN();
  const bool is_min = op == ReduceOp::kMin;
  if (a == 0 && b == 0) {
    bool negative = is_min ? (std::signbit(a) || std::signbit(b)) : (std::signbit(a) && std::signbit(b));
    return negative ? F(-0.0) : F(0.0);
  }
  return is_min ? std::min(a, b) : std::max(a, b);
}

void refCombine(DataType dtype, ReduceOp op, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  switch (dtype) {
    case DataType::kUInt8: return storeAs(out, refInteger(op, loadAs<uint8_t>(a), loadAs<uint8_t>(b)));
    case DataType::kInt8: return storeAs(out, refInteger(op, loadAs<int8_t>(a), loadAs<int8_t>(b)));
    case DataType::kInt16: return storeAs(out, refInteger(op, loadAs<int16_t>(a), loadAs<int16_t>(b)));
    case DataType::kUInt16: return storeAs(out, refInteger(op, loadAs<uint16_t>(a), loadAs<uint16_t>(b)));
    case DataType::kInt32: return storeAs(out, refInteger(op, loadAs<int32_t>(a), loadAs<int32_t>(b)));
    case DataType::kInt64: return storeAs(out, refInteger(op, loadAs<int64_t>(a), loadAs<int64_t>(b)));
    case DataType::kFloat32: return storeAs(out, refFloat(op, loadAs<float>(a), loadAs<float>(b)));
    case DataType::kFloat64: return storeAs(out, refFloat(op, loadAs<double>(a), loadAs<double>(b)));
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      Format16 f = dtype == DataType::kFloat16 ? kHalf : kBFloat;
      double exact = refFloat(op, refDecode(loadAs<uint16_t>(a), f), refDecode(loadAs<uint16_t>(b), f));
      return storeAs(out, refRound(exact, f));
    }
    case DataType::kBool: {
      bool x = *a != 0, y = *b != 0;
      bool any = op == ReduceOp::kSum || op == ReduceOp::kMax;
      *out = any ? (x || y) : (x && y);
      return;
    }
  }
}

bool isNanElement(DataType dtype, const uint8_t* p) {
  switch (dtype) {
    case DataType::kFloat16: return refIsNan(loadAs<uint16_t>(p), kHalf);
    case DataType::kBFloat16: return refIsNan(loadAs<uint16_t>(p), kBFloat);
    case DataType::kFloat32: return std::isnan(loadAs<float>(p));
    case DataType::kFloat64: return std::isnan(loadAs<double>(p));
    default: return false;
  }
}

// Bit-identical, except that any NaN matches any NaN (payloads are not specified).
void expectSame(DataType dtype, ReduceOp op, const char* what, const Bytes& got, const Bytes& want) {
  const size_t es = dtypeSize(dtype);
  CHECK_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(&got[i], &want[i], es) == 0) continue;
    if (isNanElement(dtype, &got[i]) && isNanElement(dtype, &want[i])) continue;
    uint64_t g = 0, w = 0;
    std::memcpy(&g, &got[i], es);
    std::memcpy(&w, &want[i], es);
    char message[200];
    std::snprintf(message, sizeof message, "%s %s %s: element %zu is 0x%llx, want 0x%llx", what,
                  dtypeName(dtype), reduceOpName(op), i / es, static_cast<unsigned long long>(g),
                  static_cast<unsigned long long>(w));
    throw testing::Failure(message);
  }
}

// ---- Random operands that reach the interesting cases of each type.

template <typename F>
F randomFloat(std::mt19937_64& rng) {
  static const F kSpecials[] = {F(0.0), F(-0.0), std::numeric_limits<F>::infinity(),
                                -std::numeric_limits<F>::infinity(), std::numeric_limits<F>::quiet_NaN(),
                                -std::numeric_limits<F>::quiet_NaN(), std::numeric_limits<F>::denorm_min(),
                                -std::numeric_limits<F>::denorm_min(), std::numeric_limits<F>::max(),
                                std::numeric_limits<F>::lowest(), F(1.0), F(-1.0)};
  if (rng() % 8 == 0) return kSpecials[rng() % std::size(kSpecials)];
  std::uniform_real_distribution<F> mantissa(-4, 4);
  return std::ldexp(mantissa(rng), static_cast<int>(rng() % 41) - 20);
}

Bytes randomElements(DataType dtype, size_t count, std::mt19937_64& rng) {
  const size_t es = dtypeSize(dtype);
  Bytes out(count * es);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = &out[i * es];
    if (dtype == DataType::kFloat32) {
      storeAs(p, randomFloat<float>(rng));
    } else if (dtype == DataType::kFloat64) {
      storeAs(p, randomFloat<double>(rng));
    } else if (dtype == DataType::kBool) {
      static const uint8_t kBools[] = {0, 0, 0, 1, 1, 1, 2, 255};  // frameworks may hand us non-0/1 bytes
      *p = kBools[rng() % std::size(kBools)];
    } else {
      uint64_t bits = rng();  // every encoding: wraps, NaNs, Infs, subnormals
      std::memcpy(p, &bits, es);
    }
  }
  return out;
}

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,     DataType::kInt16,
                              DataType::kUInt16,  DataType::kInt32,    DataType::kInt64,
                              DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                              DataType::kFloat64, DataType::kBool};
const ReduceOp kKernelOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                               ReduceOp::kBitAnd};

bool supported(DataType dtype, ReduceOp op) { return op != ReduceOp::kBitAnd || !isFloatingPoint(dtype); }

Bytes reference(DataType dtype, ReduceOp op, const Bytes& a, const Bytes& b) {
  const size_t es = dtypeSize(dtype);
  Bytes out(a.size());
  for (size_t i = 0; i < a.size(); i += es) refCombine(dtype, op, &a[i], &b[i], &out[i]);
  return out;
}

void checkKernels(DataType dtype, ReduceOp op, size_t count, std::mt19937_64& rng) {
  const Bytes a = randomElements(dtype, count, rng), b = randomElements(dtype, count, rng);
  const Bytes want = reference(dtype, op, a, b);

  Bytes into = a;
  reduceInto(into.data(), b.data(), count, dtype, op);
  expectSame(dtype, op, "reduceInto", into, want);

  Bytes out(a.size());
  reduce3(out.data(), a.data(), b.data(), count, dtype, op);
  expectSame(dtype, op, "reduce3", out, want);

  Bytes dst_is_a = a;
  reduce3(dst_is_a.data(), dst_is_a.data(), b.data(), count, dtype, op);
  expectSame(dtype, op, "reduce3 with dst == a", dst_is_a, want);

  Bytes dst_is_b = b;
  reduce3(dst_is_b.data(), a.data(), dst_is_b.data(), count, dtype, op);
  expectSame(dtype, op, "reduce3 with dst == b", dst_is_b, want);
}

template <typename T>
std::vector<T> filledNeutral(DataType dtype, ReduceOp op, size_t count) {
  std::vector<T> out(count);
  fillNeutral(out.data(), count, dtype, op);
  return out;
}

}  // namespace

// ---- half.h

TEST(float16_widening_is_exact_for_every_encoding) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    for (Format16 f : {kHalf, kBFloat}) {
      const float got = toFloat(h, f);
      const double want = refDecode(h, f);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
        CHECK(refIsNan(fromFloat(got, f), f));  // NaN survives the round trip
      } else {
        CHECK_EQ(static_cast<double>(got), want);
        CHECK_EQ(std::signbit(got), std::signbit(want));
        CHECK_EQ(fromFloat(got, f), h);  // and so does every other encoding
      }
    }
  }
}

TEST(float16_narrowing_rounds_to_nearest_even) {
  // Every midpoint between adjacent encodings, and the floats just around it.
  for (Format16 f : {kHalf, kBFloat}) {
    for (uint16_t bits = 0; bits < f.inf; ++bits) {
      const float mid = static_cast<float>((refMagnitude(bits, f) + refMagnitude(bits + 1, f)) / 2);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, HUGE_VALF)}) {
        checkNarrowing(x, f);
        checkNarrowing(-x, f);
      }
    }
  }
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = any_bits(rng);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    checkNarrowing(x, kHalf);
    checkNarrowing(x, kBFloat);
    checkNarrowing(randomFloat<float>(rng), kHalf);
    checkNarrowing(randomFloat<float>(rng), kBFloat);
  }
}

TEST(float16_named_rounding_cases) {
  CHECK_EQ(floatToHalf(1.0f + 0x1.0p-11f), 0x3C00);          // tie between 1 and 1+2^-10: even is 1
  CHECK_EQ(floatToHalf(1.0f + 3 * 0x1.0p-11f), 0x3C02);      // tie: even is 1+2^-9
  CHECK_EQ(floatToHalf(1.0f + 0x1.0p-11f + 0x1.0p-20f), 0x3C01);
  CHECK_EQ(floatToHalf(65504.0f), 0x7BFF);                   // largest finite
  CHECK_EQ(floatToHalf(65519.0f), 0x7BFF);                   // below the overflow midpoint
  CHECK_EQ(floatToHalf(65520.0f), 0x7C00);                   // the midpoint ties to Inf
  CHECK_EQ(floatToHalf(-1e10f), 0xFC00);
  CHECK_EQ(floatToHalf(0x1.0p-14f), 0x0400);                 // smallest normal
  CHECK_EQ(floatToHalf(0x1.0p-24f), 0x0001);                 // smallest subnormal
  CHECK_EQ(floatToHalf(0x1.0p-25f), 0x0000);                 // tie with 0: even is 0
  CHECK_EQ(floatToHalf(3 * 0x1.0p-26f), 0x0001);
  CHECK_EQ(floatToHalf(3 * 0x1.0p-25f), 0x0002);             // tie between 1 and 2 ulps: 2
  CHECK_EQ(floatToHalf(-0.0f), 0x8000);
  CHECK(refIsNan(floatToHalf(std::nanf("")), kHalf));
  CHECK_EQ(halfToFloat(0x0001), 0x1.0p-24f);
  CHECK_EQ(halfToFloat(0x03FF), 1023 * 0x1.0p-24f);
  CHECK_EQ(halfToFloat(0xFC00), -HUGE_VALF);

  CHECK_EQ(floatToBFloat16(1.0f + 0x1.0p-8f), 0x3F80);        // tie: even is 1
  CHECK_EQ(floatToBFloat16(1.0f + 3 * 0x1.0p-8f), 0x3F82);
  CHECK_EQ(floatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to Inf
  CHECK_EQ(floatToBFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  CHECK_EQ(floatToBFloat16(0x1.0p-133f), 0x0001);
  uint32_t nan_low_payload = 0x7F800001u;  // a NaN whose payload lies only in the dropped bits
  float nan;
  std::memcpy(&nan, &nan_low_payload, sizeof nan);
  CHECK(refIsNan(floatToBFloat16(nan), kBFloat));
}

// ---- reduce.h kernels

TEST(every_dtype_and_op_matches_the_reference) {
  std::mt19937_64 rng(7);
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kKernelOps) {
      if (!supported(dtype, op)) continue;
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000003}}) {
        checkKernels(dtype, op, count, rng);
      }
    }
  }
}

// Note [One element without the kernels' dispatch]: one element takes its own
// path; many random single elements of every kind against the reference,
// each in place and out of place.
TEST(single_elements_match_the_reference) {
  std::mt19937_64 rng(11);
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kKernelOps) {
      if (!supported(dtype, op)) continue;
      for (int k = 0; k < 500; ++k) checkKernels(dtype, op, 1, rng);
    }
  }
  alignas(8) uint8_t bytes[16] = {};
  CHECK_THROWS(reduce3(bytes + 2, bytes, bytes + 8, 1, DataType::kFloat32, ReduceOp::kSum), InvalidArgument,
               "overlap");
}

// Note [A short AND in words]: up to 256 bytes an integer AND runs on words
// with a byte tail; every length around the word and the limit, every width.
TEST(short_bitwise_and_matches_the_reference) {
  std::mt19937_64 rng(13);
  for (DataType dtype : kAllTypes) {
    if (dtype == DataType::kBool || isFloatingPoint(dtype)) continue;
    for (size_t bytes = 0; bytes <= 264; bytes += (bytes < 40 ? 1 : 8)) {
      const size_t count = bytes / dtypeSize(dtype);
      checkKernels(dtype, ReduceOp::kBitAnd, count, rng);
    }
  }
}

TEST(float16_portable_path_matches_the_reference) {
  // Where the CPU has F16C the test above checked only that path.
  detail::allowF16c(false);
  std::mt19937_64 rng(8);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{100003}}) checkKernels(DataType::kFloat16, op, count, rng);
  }
  uint16_t h[9] = {0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x3C00, 0x4200};
  scaleInPlace(h, 9, DataType::kFloat16, 1.0 / 3.0);
  detail::allowF16c(true);
  CHECK_EQ(h[0], floatToHalf(static_cast<float>(1.0 / 3.0)));
  CHECK_EQ(h[8], floatToHalf(3.0f * static_cast<float>(1.0 / 3.0)));
}

TEST(reduce_with_itself) {
  std::mt19937_64 rng(3);
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kKernelOps) {
      if (!supported(dtype, op)) continue;
      const Bytes a = randomElements(dtype, 1001, rng);
      const Bytes want = reference(dtype, op, a, a);
      Bytes in_place = a;
      reduceInto(in_place.data(), in_place.data(), 1001, dtype, op);
      expectSame(dtype, op, "reduceInto with dst == src", in_place, want);
      Bytes all_same = a;
      reduce3(all_same.data(), all_same.data(), all_same.data(), 1001, dtype, op);
      expectSame(dtype, op, "reduce3 with dst == a == b", all_same, want);
      Bytes out(a.size());
      reduce3(out.data(), a.data(), a.data(), 1001, dtype, op);
      expectSame(dtype, op, "reduce3 with a == b", out, want);
    }
  }
}

TEST(min_and_max_are_commutative_bit_for_bit) {
  // The order in which ranks combine must not show in the result, even for
  // -0 against +0 and NaN against a number.
  std::mt19937_64 rng(5);
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      const Bytes a = randomElements(dtype, 4097, rng), b = randomElements(dtype, 4097, rng);
      Bytes ab(a.size()), ba(a.size());
      reduce3(ab.data(), a.data(), b.data(), 4097, dtype, op);
      reduce3(ba.data(), b.data(), a.data(), 4097, dtype, op);
      CHECK(ab == ba);
    }
  }
  float zeros[2] = {0.0f, -0.0f}, neg_zero[2] = {-0.0f, 0.0f}, out[2];
  reduce3(out, zeros, neg_zero, 2, DataType::kFloat32, ReduceOp::kMin);
  CHECK(std::signbit(out[0]) && std::signbit(out[1]));
  reduce3(out, zeros, neg_zero, 2, DataType::kFloat32, ReduceOp::kMax);
  CHECK(!std::signbit(out[0]) && !std::signbit(out[1]));
}

TEST(float16_sum_rounds_once_per_step) {
  uint16_t acc[4] = {0x3C00, 0x3C01, 0x7BFF, 0x0001};  // 1, 1+2^-10, 65504, 2^-24
  const uint16_t add[4] = {0x1000, 0x1000, 0x7BFF, 0x0001};  // 2^-11, 2^-11, 65504, 2^-24
  reduceInto(acc, add, 4, DataType::kFloat16, ReduceOp::kSum);
  CHECK_EQ(acc[0], 0x3C00);  // 1 + 2^-11 ties to even: 1
  CHECK_EQ(acc[1], 0x3C02);  // 1 + 3*2^-11 ties to even: 1 + 2^-9
  CHECK_EQ(acc[2], 0x7C00);  // overflow to Inf
  CHECK_EQ(acc[3], 0x0002);  // subnormals add exactly
}

TEST(integer_sum_and_product_wrap) {
  int32_t a[1] = {std::numeric_limits<int32_t>::max()}, one[1] = {1};
  reduceInto(a, one, 1, DataType::kInt32, ReduceOp::kSum);
  CHECK_EQ(a[0], std::numeric_limits<int32_t>::min());
  int32_t p[1] = {1 << 20}, q[1] = {1 << 12};
  reduceInto(p, q, 1, DataType::kInt32, ReduceOp::kProduct);
  CHECK_EQ(p[0], 0);  // 2^32 wraps to 0
  int8_t c = -128, d = -1;
  reduceInto(&c, &d, 1, DataType::kInt8, ReduceOp::kProduct);
  CHECK_EQ(static_cast<int>(c), -128);
  // 16-bit operands are promoted to int: 65535 * 65535 must wrap, not overflow it.
  uint16_t u[2] = {65535, 65535}, v[2] = {65535, 1};
  reduceInto(u, v, 2, DataType::kUInt16, ReduceOp::kProduct);
  CHECK(u[0] == 1 && u[1] == 65535);
  reduceInto(u, v, 2, DataType::kUInt16, ReduceOp::kSum);
  CHECK(u[0] == 0 && u[1] == 0);
  int16_t s[3] = {std::numeric_limits<int16_t>::max(), -32768, 181}, t[3] = {1, -1, 182};
  reduceInto(s, t, 3, DataType::kInt16, ReduceOp::kSum);
  CHECK(s[0] == -32768 && s[1] == 32767 && s[2] == 363);
  reduceInto(s, t, 3, DataType::kInt16, ReduceOp::kProduct);
  CHECK(s[0] == -32768 && s[1] == -32767 && s[2] == static_cast<int16_t>(363 * 182));
}

TEST(bool_results_are_canonical) {
  const uint8_t a[4] = {0, 2, 0, 255}, b[4] = {0, 0, 7, 1};
  uint8_t out[4];
  reduce3(out, a, b, 4, DataType::kBool, ReduceOp::kSum);
  CHECK(out[0] == 0 && out[1] == 1 && out[2] == 1 && out[3] == 1);
  reduce3(out, a, b, 4, DataType::kBool, ReduceOp::kProduct);
  CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0 && out[3] == 1);
}

TEST(partial_overlap_is_rejected) {
  float data[8] = {};
  CHECK_THROWS(reduceInto(data + 1, data, 4, DataType::kFloat32, ReduceOp::kSum), InvalidArgument,
               "overlap");
  CHECK_THROWS(reduce3(data, data + 2, data + 4, 4, DataType::kFloat32, ReduceOp::kSum),
               InvalidArgument, "overlap");
  reduce3(data, data + 4, data + 4, 4, DataType::kFloat32, ReduceOp::kSum);  // disjoint: fine
}

TEST(meaningless_combinations_name_op_and_dtype) {
  float x[1] = {1.0f};
  CHECK_THROWS(reduceInto(x, x, 1, DataType::kFloat32, ReduceOp::kAverage), InvalidArgument,
               "op average");
  CHECK_THROWS(reduceInto(x, x, 1, DataType::kFloat32, ReduceOp::kAverage), InvalidArgument, "float32");
  CHECK_THROWS(reduce3(x, x, x, 1, DataType::kInt32, ReduceOp::kAdasum), InvalidArgument, "adasum");
  CHECK_THROWS(reduce3(x, x, x, 1, DataType::kBFloat16, ReduceOp::kBitAnd), InvalidArgument,
               "not supported for dtype bfloat16");
  CHECK_THROWS(fillNeutral(x, 1, DataType::kBool, ReduceOp::kAverage), InvalidArgument, "bool");
  CHECK_THROWS(reduceInto(x, x, 0, static_cast<DataType>(42), ReduceOp::kSum), InvalidArgument, "42");
  CHECK_THROWS(reduceInto(x, x, 0, DataType::kInt8, static_cast<ReduceOp>(42)), InvalidArgument,
               "code 42");
  int32_t i[1] = {3};
  CHECK_THROWS(scaleInPlace(i, 1, DataType::kInt32, HUGE_VAL), InvalidArgument, "int32");
}

// ---- scaleInPlace and fillNeutral

TEST(scale_in_place) {
  float f[3] = {1.0f, -3.0f, 0.5f};
  scaleInPlace(f, 3, DataType::kFloat32, 0.5);
  CHECK(f[0] == 0.5f && f[1] == -1.5f && f[2] == 0.25f);
  uint16_t h[2] = {floatToHalf(3.0f), 0x7E01};  // a NaN payload that rounding would change
  scaleInPlace(h, 2, DataType::kFloat16, 1.0);
  CHECK(h[0] == floatToHalf(3.0f) && h[1] == 0x7E01);  // factor 1 does nothing
  scaleInPlace(h, 1, DataType::kFloat16, 1.0 / 3.0);
  CHECK_EQ(h[0], floatToHalf(3.0f * static_cast<float>(1.0 / 3.0)));
  uint16_t many[17];
  for (auto& v : many) v = floatToHalf(3.0f);
  scaleInPlace(many, 17, DataType::kFloat16, 1.0 / 3.0);  // the 8-wide blocks and the tail
  for (auto v : many) CHECK_EQ(v, floatToHalf(3.0f * static_cast<float>(1.0 / 3.0)));
  uint16_t bf[1] = {floatToBFloat16(10.0f)};
  scaleInPlace(bf, 1, DataType::kBFloat16, 0.25);
  CHECK_EQ(bf[0], floatToBFloat16(2.5f));
  double d[1] = {1.0};
  scaleInPlace(d, 1, DataType::kFloat64, 0.1);
  CHECK_EQ(d[0], 0.1);
  int32_t i[3] = {7, -7, 1000000000};
  scaleInPlace(i, 3, DataType::kInt32, 0.5);
  CHECK(i[0] == 3 && i[1] == -3 && i[2] == 500000000);  // truncation toward zero
  int8_t small[2] = {100, -100};
  scaleInPlace(small, 2, DataType::kInt8, 2.0);
  CHECK(small[0] == 127 && small[1] == -128);  // saturates
  int64_t big[1] = {std::numeric_limits<int64_t>::max()};
  scaleInPlace(big, 1, DataType::kInt64, 4.0);
  CHECK_EQ(big[0], std::numeric_limits<int64_t>::max());
  uint8_t u[1] = {9};
  scaleInPlace(u, 1, DataType::kUInt8, -1.0);
  CHECK_EQ(static_cast<int>(u[0]), 0);
  int16_t s[3] = {7, -7, 20000};
  scaleInPlace(s, 3, DataType::kInt16, 2.5);
  CHECK(s[0] == 17 && s[1] == -17 && s[2] == 32767);  // truncates, saturates
  uint16_t w[2] = {40000, 3};
  scaleInPlace(w, 2, DataType::kUInt16, 1.5);
  CHECK(w[0] == 60000 && w[1] == 4);
  uint8_t b[2] = {1, 0};
  scaleInPlace(b, 2, DataType::kBool, 0.0);
  CHECK(b[0] == 1 && b[1] == 0);
}

TEST(divide_in_place_is_exact_for_integers) {
  // 49 * (1.0 / 49) is just below 1 in double: scaling would truncate to 0.
  int32_t i[4] = {49, -49, 97, -97};
  divideInPlace(i, 4, DataType::kInt32, 49);
  CHECK(i[0] == 1 && i[1] == -1 && i[2] == 1 && i[3] == -1);  // truncation toward zero
  int64_t big[1] = {std::numeric_limits<int64_t>::max()};
  divideInPlace(big, 1, DataType::kInt64, 7);
  CHECK_EQ(big[0], std::numeric_limits<int64_t>::max() / 7);
  uint8_t u[2] = {255, 44};
  divideInPlace(u, 2, DataType::kUInt8, 300);  // a divisor wider than the type
  CHECK(u[0] == 0 && u[1] == 0);
  int16_t s[3] = {-32768, 32767, -5};
  divideInPlace(s, 3, DataType::kInt16, 3);
  CHECK(s[0] == -10922 && s[1] == 10922 && s[2] == -1);
  uint16_t w[2] = {65535, 70};
  divideInPlace(w, 2, DataType::kUInt16, 70000);
  CHECK(w[0] == 0 && w[1] == 0);
  uint16_t w3[1] = {65535};
  divideInPlace(w3, 1, DataType::kUInt16, 2);
  CHECK_EQ(w3[0], 32767);
  float f[1] = {3.0f};
  divideInPlace(f, 1, DataType::kFloat32, 2);
  CHECK_EQ(f[0], 1.5f);
  bool threw = false;
  try {
    divideInPlace(i, 1, DataType::kInt32, 0);
  } catch (const InvalidArgument& e) {
    threw = std::string(e.what()).find("divisor must be positive") != std::string::npos;
  }
  CHECK(threw);
}

TEST(fill_neutral_values) {
  CHECK_EQ(filledNeutral<int32_t>(DataType::kInt32, ReduceOp::kSum, 3)[2], 0);
  CHECK_EQ(filledNeutral<int32_t>(DataType::kInt32, ReduceOp::kMin, 3)[2], std::numeric_limits<int32_t>::max());
  CHECK_EQ(filledNeutral<int64_t>(DataType::kInt64, ReduceOp::kMax, 3)[2], std::numeric_limits<int64_t>::min());
  CHECK_EQ(filledNeutral<uint8_t>(DataType::kUInt8, ReduceOp::kBitAnd, 3)[2], 0xFF);
  CHECK_EQ(filledNeutral<int8_t>(DataType::kInt8, ReduceOp::kProduct, 3)[2], 1);
  CHECK_EQ(filledNeutral<int16_t>(DataType::kInt16, ReduceOp::kMin, 3)[2], 32767);
  CHECK_EQ(filledNeutral<int16_t>(DataType::kInt16, ReduceOp::kMax, 3)[2], -32768);
  CHECK_EQ(filledNeutral<uint16_t>(DataType::kUInt16, ReduceOp::kMin, 3)[2], 65535);
  CHECK_EQ(filledNeutral<uint16_t>(DataType::kUInt16, ReduceOp::kMax, 3)[2], 0);
  CHECK_EQ(filledNeutral<uint16_t>(DataType::kUInt16, ReduceOp::kBitAnd, 3)[2], 0xFFFF);
  CHECK_EQ(filledNeutral<float>(DataType::kFloat32, ReduceOp::kMin, 3)[2], HUGE_VALF);
  CHECK_EQ(filledNeutral<double>(DataType::kFloat64, ReduceOp::kMax, 3)[2], -HUGE_VAL);
  CHECK(std::signbit(filledNeutral<float>(DataType::kFloat32, ReduceOp::kSum, 3)[2]));  // -0
  CHECK_EQ(filledNeutral<uint16_t>(DataType::kFloat16, ReduceOp::kProduct, 3)[2], 0x3C00);
  CHECK_EQ(filledNeutral<uint16_t>(DataType::kBFloat16, ReduceOp::kMin, 3)[2], 0x7F80);
  CHECK_EQ(filledNeutral<uint8_t>(DataType::kBool, ReduceOp::kBitAnd, 3)[2], 1);
  CHECK_EQ(filledNeutral<uint8_t>(DataType::kBool, ReduceOp::kMax, 3)[2], 0);
}

TEST(fill_neutral_is_an_identity_of_the_op) {
  // What a joined rank contributes must leave every other value unchanged.
  std::mt19937_64 rng(11);
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kKernelOps) {
      if (!supported(dtype, op)) continue;
      Bytes x = randomElements(dtype, 1000, rng);
      if (dtype == DataType::kBool) {
        for (auto& v : x) v = v != 0;  // results are canonical 0/1, so compare canonical inputs
      }
      Bytes neutral(x.size());
      fillNeutral(neutral.data(), 1000, dtype, op);
      Bytes out(x.size());
      reduce3(out.data(), x.data(), neutral.data(), 1000, dtype, op);
      expectSame(dtype, op, "x op neutral", out, x);
    }
  }
}

// ---- Throughput, for the report; fails only if absurdly slow.

namespace {

double bestSumSeconds(DataType dtype, Bytes& dst, const Bytes& src) {
  const size_t count = dst.size() / dtypeSize(dtype);
  double best = HUGE_VAL;
  for (int rep = 0; rep < 4; ++rep) {
    auto start = std::chrono::steady_clock::now();
    reduceInto(dst.data(), src.data(), count, dtype, ReduceOp::kSum);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// Tensor bytes reduced per second; memory traffic is three times that (read
// dst, read src, write dst).
void report(const char* what, size_t bytes, double seconds) {
  std::printf("  reduceInto %s sum, 64 MiB: %.2f GB/s of tensor data (%.2f GB/s memory traffic)\n", what,
              bytes / seconds / 1e9, 3 * bytes / seconds / 1e9);
}

}  // namespace

TEST(throughput_of_sum_on_64_mib) {
  constexpr size_t kBytes = size_t{64} << 20;
  Bytes dst(kBytes), src(kBytes);
  std::vector<float> ones(kBytes / 4, 1.0f);
  std::memcpy(src.data(), ones.data(), kBytes);
  double seconds = bestSumSeconds(DataType::kFloat32, dst, src);
  report("float32", kBytes, seconds);
  CHECK(seconds < 2.0);  // fails only if absurdly slow

  std::vector<uint16_t> half_ones(kBytes / 2, 0x3C00);
  std::memcpy(src.data(), half_ones.data(), kBytes);
  std::memset(dst.data(), 0, kBytes);
  report("float16", kBytes, bestSumSeconds(DataType::kFloat16, dst, src));
  detail::allowF16c(false);
  report("float16 (portable, no F16C)", kBytes, bestSumSeconds(DataType::kFloat16, dst, src));
  detail::allowF16c(true);
  report("bfloat16", kBytes, bestSumSeconds(DataType::kBFloat16, dst, src));
}

int main() { return RUN_ALL_TESTS(); }
