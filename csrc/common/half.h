// Conversions between float and the two 16-bit float formats the core reduces:
// IEEE float16 (1-5-10) and bfloat16 (1-8-7), both kept as raw uint16_t bits.
// Narrowing rounds to nearest, ties to even; NaN stays NaN (quieted), Inf and
// subnormals convert exactly. The functions are inline, branch-free bit
// manipulation plus float arithmetic, so a loop that calls them per element
// vectorises with plain SSE2 (no F16C needed, so one build runs everywhere).
#pragma once

#include <cstdint>
#include <cstring>

namespace hvdlite {
namespace half_detail {

inline uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace half_detail

// Note [Float16 by float arithmetic]
// Both directions follow Maratyszcza's FP16 library (also used by PyTorch's
// c10::Half): instead of branching on the exponent, they let the FPU do the
// renormalisation and the rounding. Widening: a normal half's exponent and
// mantissa are moved into float position and rebased by one multiply by
// 2^-112 (which also maps exponent 31 onto Inf/NaN); a subnormal half is
// built as 0.5 + m*2^-24 and has 0.5 subtracted, which is exact. Narrowing:
// |f| * 2^112 * 2^-110 overflows to Inf exactly for values that must become
// Inf, and adding a power of two chosen from f's exponent makes the FPU's
// round-to-nearest-even drop exactly the bits float16 cannot hold, also in
// the subnormal range. Needs the default rounding mode, which the core never
// changes. Selections are written as masks, not ?:, because GCC will not
// if-convert a ?: between float results (they might trap), and a branch in
// the loop stops vectorisation.

inline float halfToFloat(uint16_t half) {
  using half_detail::bitsOf;
  using half_detail::floatOf;
  const uint32_t w = static_cast<uint32_t>(half) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;  // the sign shifted out
  const float normal = floatOf((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float subnormal = floatOf((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t subnormal_mask = 0u - static_cast<uint32_t>(two_w < (1u << 27));
  return floatOf(sign | (bitsOf(subnormal) & subnormal_mask) | (bitsOf(normal) & ~subnormal_mask));
}

inline uint16_t floatToHalf(float value) {
  using half_detail::bitsOf;
  using half_detail::floatOf;
  const uint32_t w = bitsOf(value);
  const uint32_t two_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  float base = (floatOf(bitsOf(value) & 0x7FFFFFFFu) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t bias = two_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;  // below 2^-14 every value rounds on the subnormal grid
  base = floatOf((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = bitsOf(base);
  const uint32_t exponent_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nan_mask = 0u - static_cast<uint32_t>(two_w > 0xFF000000u);
  const uint32_t magnitude = (0x7E00u & nan_mask) | ((exponent_bits + mantissa_bits) & ~nan_mask);
  return static_cast<uint16_t>((sign >> 16) | magnitude);
}

// bfloat16 is the top half of a float, so widening is a shift.
inline float bfloat16ToFloat(uint16_t bf16) {
  return half_detail::floatOf(static_cast<uint32_t>(bf16) << 16);
}

// Adding 0x7FFF plus the lowest kept bit, then truncating, rounds to nearest
// even, and a carry out of the mantissa correctly bumps the exponent (up to
// Inf). NaN is handled apart so that a payload living only in the dropped bits
// does not round to Inf; setting the quiet bit keeps it a NaN.
inline uint16_t floatToBFloat16(float value) {
  const uint32_t bits = half_detail::bitsOf(value);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(is_nan ? ((bits >> 16) | 0x0040u) : rounded);
}

namespace detail {
// For tests of the reduction kernels (defined in reduce.cc): false makes the
// float16 kernels skip the F16C instructions even on a CPU that has them, so
// the portable path above gets checked on machines that would never take it.
// Process-wide; not to be called while reductions run.
void allowF16c(bool allowed);
}  // namespace detail

}  // namespace hvdlite
