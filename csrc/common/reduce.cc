#include "common/reduce.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>

#include "common/errors.h"
#include "common/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  // F16C, see Note [Vector clones]
#endif

namespace hvdlite {
namespace {

// ---- Element types: how a stored element is widened for arithmetic and narrowed back.

template <typename T>
struct Native {
  using Storage = T;
  using Compute = T;
  static T load(T value) { return value; }
  static T store(T value) { return value; }
};

struct Float16 {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t value) { return halfToFloat(value); }
  static uint16_t store(float value) { return floatToHalf(value); }
};

struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  static float load(uint16_t value) { return bfloat16ToFloat(value); }
  static uint16_t store(float value) { return floatToBFloat16(value); }
};

// Frameworks store bool as one byte holding 0 or 1; any non-zero byte counts
// as true so that the results are always canonical 0 or 1.
struct Bool {
  using Storage = uint8_t;
  using Compute = uint8_t;
  static uint8_t load(uint8_t value) { return value != 0; }
  static uint8_t store(uint8_t value) { return value; }
};

// ---- Operations. Each is commutative bit for bit (see reduce.h) and knows its identity.

template <typename F>
using BitsOf = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

template <typename F>
F orBits(F a, F b) {
  BitsOf<F> x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  x |= y;
  std::memcpy(&a, &x, sizeof a);
  return a;
}

template <typename F>
F andBits(F a, F b) {
  BitsOf<F> x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  x &= y;
  std::memcpy(&a, &x, sizeof a);
  return a;
}

// Integer sums and products are done in an unsigned type: they wrap like
// two's complement instead of being undefined on overflow. It is the unsigned
// form of T's promoted type (decltype(+T{})), because types narrower than int
// are promoted to (signed) int before arithmetic, where a product of two
// uint16 values (65535 * 65535) would overflow.
template <typename T, bool = std::is_integral_v<T>>
struct WrappingOf {
  using type = T;
};
template <typename T>
struct WrappingOf<T, true> {
  using type = std::make_unsigned_t<decltype(+T{})>;
};
template <typename T>
using Wrapping = typename WrappingOf<T>::type;

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) + static_cast<Wrapping<T>>(b));
  }
  // -0.0, not +0.0, is the exact float identity: -0 + x == x for every x,
  // so a joined rank's contribution leaves the others' sum bit-identical.
  template <typename T>
  static T identity() {
    return std::is_floating_point_v<T> ? static_cast<T>(-0.0) : T{0};
  }
};

struct Product {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) * static_cast<Wrapping<T>>(b));
  }
  template <typename T>
  static T identity() {
    return T{1};
  }
};

// Note [Ordering ties in min and max]
// std::min(a, b) returns a when the operands compare equal or unordered, so
// min(+0, -0) and min(-0, +0) differ, and so do min(NaN, 1) and min(1, NaN):
// the result would depend on which rank's value came first. When neither
// operand is smaller, min ORs the bit patterns (-0 wins over +0; a NaN stays
// a NaN whatever it is ORed with, since its exponent bits are all ones and
// its mantissa is non-zero), and max ANDs them for equal values (+0 wins) and
// ORs them for unordered ones (NaN again). All three are selects, which
// vectorise.
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return a < b ? a : b < a ? b : orBits(a, b);
    } else {
      return a < b ? a : b;
    }
  }
  template <typename T>
  static T identity() {
    return std::is_floating_point_v<T> ? std::numeric_limits<T>::infinity()
                                       : std::numeric_limits<T>::max();
  }
};

struct Max {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return a > b ? a : b > a ? b : a == b ? andBits(a, b) : orBits(a, b);
    } else {
      return a > b ? a : b;
    }
  }
  template <typename T>
  static T identity() {
    return std::is_floating_point_v<T> ? -std::numeric_limits<T>::infinity()
                                       : std::numeric_limits<T>::lowest();
  }
};

// Bitwise operations on integers, and their bool forms (on 0/1 values OR and
// AND are bitwise); the identity as an int: -1 is all ones in any integer type.
template <typename Combine, int kIdentity>
struct Bitwise {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(Combine{}(a, b));
  }
  template <typename T>
  static T identity() {
    return static_cast<T>(kIdentity);
  }
};
using BitAnd = Bitwise<std::bit_and<>, -1>;
using LogicalOr = Bitwise<std::bit_or<>, 0>;
using LogicalAnd = Bitwise<std::bit_and<>, 1>;

// ---- Kernels: plain loops over restrict pointers, which -O3 vectorises.

// Note [Vector clones]
// The library is built for baseline x86-64 (SSE2) so that one wheel runs
// anywhere, yet nearly every machine it runs on has AVX2, which doubles the
// lanes and adds the 64-bit compares int64 min/max need. target_clones builds
// each kernel for both and the dynamic loader picks one by CPUID. float16
// needs more than wider vectors: GCC does not turn half.h's bit manipulation
// into the F16C conversion instructions, and those are 7x faster, so the
// float16 kernels below call them explicitly when the CPU has them. Results
// are the same on every path (IEEE operations per element, round to nearest
// even), except for which bits a NaN carries.
#if defined(__x86_64__) && defined(__GNUC__)
#define HVD_KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#define HVD_F16C_KERNELS 1
#else
#define HVD_KERNEL_CLONES
#define HVD_F16C_KERNELS 0
#endif

template <typename Type, typename Op, typename S = typename Type::Storage>
HVD_KERNEL_CLONES void combineInto(S* __restrict dst, const S* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    dst[i] = Type::store(Op::apply(Type::load(dst[i]), Type::load(src[i])));
  }
}

template <typename Type, typename Op, typename S = typename Type::Storage>
HVD_KERNEL_CLONES void combine3(S* __restrict dst, const S* __restrict a, const S* __restrict b,
                                size_t count) {
  for (size_t i = 0; i < count; ++i) {
    dst[i] = Type::store(Op::apply(Type::load(a[i]), Type::load(b[i])));
  }
}

// dst combined with itself (both operands the same buffer): no restrict.
template <typename Type, typename Op, typename S = typename Type::Storage>
HVD_KERNEL_CLONES void combineSelf(S* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    typename Type::Compute value = Type::load(dst[i]);
    dst[i] = Type::store(Op::apply(value, value));
  }
}

template <typename Type, typename C = typename Type::Compute>
HVD_KERNEL_CLONES void scaleFloats(typename Type::Storage* data, size_t count, C factor) {
  for (size_t i = 0; i < count; ++i) data[i] = Type::store(Type::load(data[i]) * factor);
}

template <typename Type, typename C = typename Type::Compute, typename S = typename Type::Storage>
HVD_KERNEL_CLONES void scaleFloatsInto(S* __restrict dst, const S* __restrict src, size_t count, C factor) {
  for (size_t i = 0; i < count; ++i) dst[i] = Type::store(Type::load(src[i]) * factor);
}

std::atomic<bool> f16c_allowed{true};  // see detail::allowF16c

#if HVD_F16C_KERNELS
bool hasF16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has && f16c_allowed.load(std::memory_order_relaxed);
}

// Eight halves at a time: widened by F16C, combined as floats by Op (which
// GCC vectorises to one AVX instruction or a few), narrowed by F16C. All of
// a block is read before any of it is written, so dst may be a or b.
template <typename Op>
__attribute__((target("avx2,f16c"))) void combineFloat16F16c(uint16_t* dst, const uint16_t* a,
                                                             const uint16_t* b, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    alignas(32) float x[8], y[8];
    _mm256_store_ps(x, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))));
    _mm256_store_ps(y, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i))));
    for (int j = 0; j < 8; ++j) x[j] = Op::apply(x[j], y[j]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_load_ps(x), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < count; ++i) dst[i] = floatToHalf(Op::apply(halfToFloat(a[i]), halfToFloat(b[i])));
}

// dst may be src: each block is read before it is written.
__attribute__((target("avx2,f16c"))) void scaleFloat16F16c(uint16_t* dst, const uint16_t* src, size_t count,
                                                           float factor) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 x = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))),
                             _mm256_set1_ps(factor));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < count; ++i) dst[i] = floatToHalf(halfToFloat(src[i]) * factor);
}
#else
bool hasF16c() { return false; }
template <typename Op>
void combineFloat16F16c(uint16_t*, const uint16_t*, const uint16_t*, size_t) {}
void scaleFloat16F16c(uint16_t*, const uint16_t*, size_t, float) {}
#endif

// dst[i] = op(a[i], b[i]) where dst may be a and/or b. An output that is one
// of the inputs becomes combineInto with the other input, which gives the
// same result because every op is commutative.
template <typename Type, typename Op, typename S = typename Type::Storage>
void combine(S* dst, const S* a, const S* b, size_t count) {
  if constexpr (std::is_same_v<Type, Float16>) {
    if (hasF16c()) return combineFloat16F16c<Op>(dst, a, b, count);
  }
  if (dst == a && dst == b) {
    combineSelf<Type, Op>(dst, count);
  } else if (dst == a) {
    combineInto<Type, Op>(dst, b, count);
  } else if (dst == b) {
    combineInto<Type, Op>(dst, a, count);
  } else {
    combine3<Type, Op>(dst, a, b, count);
  }
}

// ---- Dispatch from the runtime (dtype, op) to one instantiation.

[[noreturn]] void unsupported(ReduceOp op, DataType dtype) {
  const char* why = op == ReduceOp::kAverage  ? " (the executor turns average into sum plus a postscale)"
                    : op == ReduceOp::kAdasum ? " (adasum is not an element-wise operation)"
                                              : "";
  throw InvalidArgument(detail::concat("reduction kernel: op ", reduceOpName(op), " (code ",
                                       static_cast<int>(op), ") is not supported for dtype ",
                                       dtypeName(dtype), why));
}

// Calls fn(Type{}) with the element type of dtype.
template <typename Fn>
void visitType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kUInt8: return fn(Native<uint8_t>{});
    case DataType::kInt8: return fn(Native<int8_t>{});
    case DataType::kInt32: return fn(Native<int32_t>{});
    case DataType::kInt64: return fn(Native<int64_t>{});
    case DataType::kFloat16: return fn(Float16{});
    case DataType::kBFloat16: return fn(BFloat16{});
    case DataType::kFloat32: return fn(Native<float>{});
    case DataType::kFloat64: return fn(Native<double>{});
    case DataType::kBool: return fn(Bool{});
    case DataType::kInt16: return fn(Native<int16_t>{});
    case DataType::kUInt16: return fn(Native<uint16_t>{});
  }
  throw InvalidArgument(detail::concat("reduction kernel: unknown dtype code ", static_cast<int>(dtype)));
}

// Calls fn(Type{}, Op{}) for the kernel that implements op on dtype, or throws
// InvalidArgument naming both when there is none.
template <typename Fn>
void visitKernel(DataType dtype, ReduceOp op, Fn&& fn) {
  visitType(dtype, [&](auto type) {
    using Type = decltype(type);
    if constexpr (std::is_same_v<Type, Bool>) {
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kMax: return fn(type, LogicalOr{});
        case ReduceOp::kMin:
        case ReduceOp::kProduct:
        case ReduceOp::kBitAnd: return fn(type, LogicalAnd{});
        default: unsupported(op, dtype);
      }
    } else {
      switch (op) {
        case ReduceOp::kSum: return fn(type, Sum{});
        case ReduceOp::kMin: return fn(type, Min{});
        case ReduceOp::kMax: return fn(type, Max{});
        case ReduceOp::kProduct: return fn(type, Product{});
        case ReduceOp::kBitAnd:
          // Bitwise AND of float encodings means nothing numerically.
          if constexpr (std::is_integral_v<typename Type::Compute>) return fn(type, BitAnd{});
          unsupported(op, dtype);
        default: unsupported(op, dtype);
      }
    }
  });
}

bool overlaps(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return bytes > 0 && x < y + bytes && y < x + bytes;
}

// Partial overlap would let the vectorised loop read elements it already wrote.
void checkNoPartialOverlap(const void* dst, const void* src, size_t count, DataType dtype) {
  if (dst != src && overlaps(dst, src, count * dtypeSize(dtype))) {
    throw InvalidArgument(detail::concat("reduction kernel: output and input buffers of ", count, " ",
                                         dtypeName(dtype),
                                         " elements overlap partially; they must be the same or disjoint"));
  }
}

// Integers are scaled in double and truncated toward zero; results outside
// the type's range saturate instead of being undefined behaviour.
template <typename T>
HVD_KERNEL_CLONES void scaleIntegers(T* data, size_t count, double factor) {
  const double upper = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;  // a power of two, exact
  const double lower = static_cast<double>(std::numeric_limits<T>::lowest());
  for (size_t i = 0; i < count; ++i) {
    double scaled = static_cast<double>(data[i]) * factor;
    data[i] = scaled >= upper   ? std::numeric_limits<T>::max()
              : scaled <= lower ? std::numeric_limits<T>::lowest()
                                : static_cast<T>(scaled);
  }
}

// In int64_t so a divisor wider than T (300 ranks averaging uint8) stays right.
template <typename T>
void divideIntegers(T* data, size_t count, int64_t divisor) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<T>(static_cast<int64_t>(data[i]) / divisor);
}

}  // namespace

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  reduce3(dst, dst, src, count, dtype, op);
}

// Note [One element without the kernels' dispatch]
// A cached allreduce of one element is reduced from the lanes of the cycle's
// exchange (Note [One exchange for a cached small allreduce] in
// core/cached_exchange.cc) on every call of a loop of small synchronous
// collectives. Through the vector kernels that is the clone's indirect call
// and its loop set-up for one element, so one element is combined here with
// the kernel's own Type::load, Op::apply and Type::store: the same
// operations, so the same bits (only a NaN's payload may differ between
// clones, as Note [Vector clones] says of every path).
namespace {

template <typename Type, typename Op>
void combineOne(void* dst, const void* a, const void* b) {
  using S = typename Type::Storage;
  S x, y;
  std::memcpy(&x, a, sizeof x);
  std::memcpy(&y, b, sizeof y);
  const S result = Type::store(Op::apply(Type::load(x), Type::load(y)));
  std::memcpy(dst, &result, sizeof result);
}

// Note [A short AND in words]
// Every cycle ANDs its cache bits (Note [Cache bits] in core/response_cache.h)
// as a few dozen bytes of kUInt8: through the vector kernel, ~150
// instructions for 72 bytes (callgrind, 4-byte allreduce_ at 2 ranks: its
// clone's set-up and a byte-at-a-time tail). An AND acts on each bit alone,
// whatever the integer's width, so a short one runs here on 64-bit words
// with a byte tail: the same bits. Not vectorised: for these sizes the
// vector loop's checks cost more than the words.
constexpr size_t kShortAndBytes = 256;

bool isInteger(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kUInt16:
    case DataType::kInt32:
    case DataType::kInt64: return true;
    default: return false;
  }
}

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
void andInWords(uint8_t* dst, const uint8_t* a, const uint8_t* b, size_t bytes) {
  size_t i = 0;
  for (; i + sizeof(uint64_t) <= bytes; i += sizeof(uint64_t)) {
    uint64_t x, y;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    x &= y;
    std::memcpy(dst + i, &x, sizeof x);
  }
  for (; i < bytes; ++i) dst[i] = static_cast<uint8_t>(a[i] & b[i]);
}

}  // namespace

void reduce3(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kBitAnd && isInteger(dtype) && count * dtypeSize(dtype) <= kShortAndBytes) {
    checkNoPartialOverlap(dst, a, count, dtype);
    checkNoPartialOverlap(dst, b, count, dtype);
    andInWords(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
               count * dtypeSize(dtype));
    return;
  }
  if (count == 1) {
    // Captured by value: the by-reference captures of the general path cost
    // a load each, twice per use.
    visitKernel(dtype, op, [dst, a, b, dtype](auto type, auto reduce) {
      using Type = decltype(type);
      constexpr size_t kBytes = sizeof(typename Type::Storage);
      if ((dst != a && overlaps(dst, a, kBytes)) || (dst != b && overlaps(dst, b, kBytes))) {
        checkNoPartialOverlap(dst, a, 1, dtype);  // throws, naming the dtype
        checkNoPartialOverlap(dst, b, 1, dtype);
      }
      combineOne<Type, decltype(reduce)>(dst, a, b);
    });
    return;
  }
  visitKernel(dtype, op, [&](auto type, auto reduce) {
    using S = typename decltype(type)::Storage;
    checkNoPartialOverlap(dst, a, count, dtype);
    checkNoPartialOverlap(dst, b, count, dtype);
    combine<decltype(type), decltype(reduce)>(static_cast<S*>(dst), static_cast<const S*>(a),
                                               static_cast<const S*>(b), count);
  });
}

void scaleInPlace(void* data, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || dtype == DataType::kBool) return;
  visitType(dtype, [&](auto type) {
    using Type = decltype(type);
    using C = typename Type::Compute;
    auto* elements = static_cast<typename Type::Storage*>(data);
    if constexpr (std::is_same_v<Type, Float16>) {
      if (hasF16c()) return scaleFloat16F16c(elements, elements, count, static_cast<float>(factor));
    }
    if constexpr (std::is_floating_point_v<C>) {
      scaleFloats<Type>(elements, count, static_cast<C>(factor));
    } else {
      if (!std::isfinite(factor)) {
        throw InvalidArgument(detail::concat("cannot scale ", dtypeName(dtype), " tensor by ", factor,
                                             ": integer tensors need a finite scale factor"));
      }
      scaleIntegers(elements, count, factor);
    }
  });
}

void scaleInto(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  if (dst == src) return scaleInPlace(dst, count, dtype, factor);
  if (factor == 1.0) {
    std::memcpy(dst, src, count * dtypeSize(dtype));  // most calls: a plain copy, checked no further
    return;
  }
  checkNoPartialOverlap(dst, src, count, dtype);
  if (!isFloatingPoint(dtype)) {
    // Integers: scaled where they are, after the copy (rare: a scaled integer allreduce).
    std::memcpy(dst, src, count * dtypeSize(dtype));
    return scaleInPlace(dst, count, dtype, factor);
  }
  visitType(dtype, [&](auto type) {
    using Type = decltype(type);
    using C = typename Type::Compute;
    using S = typename Type::Storage;
    if constexpr (std::is_floating_point_v<C>) {
      auto* to = static_cast<S*>(dst);
      const auto* from = static_cast<const S*>(src);
      if constexpr (std::is_same_v<Type, Float16>) {
        if (hasF16c()) return scaleFloat16F16c(to, from, count, static_cast<float>(factor));
      }
      scaleFloatsInto<Type>(to, from, count, static_cast<C>(factor));
    }
  });
}

void divideInPlace(void* data, size_t count, DataType dtype, int64_t divisor) {
  if (divisor <= 0) {
    throw InvalidArgument(detail::concat("cannot divide ", dtypeName(dtype), " tensor by ", divisor,
                                         ": the divisor must be positive"));
  }
  if (divisor == 1 || dtype == DataType::kBool) return;
  if (isFloatingPoint(dtype)) return scaleInPlace(data, count, dtype, 1.0 / static_cast<double>(divisor));
  visitType(dtype, [&](auto type) {
    using Storage = typename decltype(type)::Storage;
    if constexpr (std::is_integral_v<Storage> && !std::is_same_v<Storage, bool>) {
      divideIntegers(static_cast<Storage*>(data), count, divisor);
    }
  });
}

void fillNeutral(void* data, size_t count, DataType dtype, ReduceOp op) {
  visitKernel(dtype, op, [&](auto type, auto reduce) {
    using Type = decltype(type);
    using Op = decltype(reduce);
    auto value = Type::store(Op::template identity<typename Type::Compute>());
    std::fill_n(static_cast<typename Type::Storage*>(data), count, value);
  });
}

namespace detail {
void allowF16c(bool allowed) { f16c_allowed = allowed; }
}  // namespace detail

}  // namespace hvdlite
