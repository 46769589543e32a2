// Element-wise kernels used by every CPU transport and by the executor.
// Written as plain loops over typed pointers so the compiler vectorises them;
// float16 and bfloat16 are widened to float, combined, and rounded back
// (round-to-nearest-even), so a long reduction does not lose more than one
// rounding per step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace hvdlite {

// dst[i] = op(dst[i], src[i]) for i in [0, count). op is kSum, kMin, kMax,
// kProduct or kBitAnd (kAverage must be resolved to kSum by the caller).
// For kBool: kSum and kMax are logical OR, kMin and kProduct logical AND.
// Deterministic and commutative per element, so ranks combining the same
// operands in any pairing order of two get bitwise-identical results.
void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// dst[i] = op(a[i], b[i]); dst may alias a or b.
void reduce3(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// data[i] = data[i] * factor, computed in double for float64, float otherwise,
// and in double with truncation toward zero for integer types. factor == 1 is
// a no-op. bool is left unchanged.
void scaleInPlace(void* data, size_t count, DataType dtype, double factor);

// dst[i] = src[i] * factor as scaleInPlace computes it, in one pass over the
// bytes (a copy when factor == 1): fusion's pack and unpack copy and scale
// together. dst and src are the same buffer or disjoint.
void scaleInto(void* dst, const void* src, size_t count, DataType dtype, double factor);

// data[i] = data[i] / divisor for integer types, truncating toward zero like
// C++ and Horovod; exact where scaleInPlace(1.0 / divisor) is not (49 * (1/49.)
// is below 1 in double). divisor must be positive. Other types: scaleInPlace.
void divideInPlace(void* data, size_t count, DataType dtype, int64_t divisor);

// Fill with the identity of op (0 for sum, 1 for product, the type's maximum
// for min, its lowest value for max, all ones for bitand), which is what a
// joined rank contributes.
void fillNeutral(void* data, size_t count, DataType dtype, ReduceOp op);

}  // namespace hvdlite
