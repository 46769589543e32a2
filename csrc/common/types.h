// Value types shared by every layer of the core: element types, reduce ops and
// collective kinds, with the names used in error messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hvdlite {

// Element type of a tensor. The numeric values are part of the wire format of
// negotiation messages; they are defined in csrc/api/api.h (Note [Codes
// defined once]) and checked against these in csrc/api/request.cc.
enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
  kInt16 = 9,
  kUInt16 = 10,
};
constexpr int kNumDataTypes = 11;

// How values from different ranks are combined. kAverage is resolved by the
// executor into kSum plus a postscale; transports never see it. kBitAnd is
// internal (negotiation bit vectors) and not offered to users.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  kAdasum = 5,
  kBitAnd = 6,
};
constexpr int kNumUserReduceOps = 6;  // kBitAnd and any later op are internal

// The collective a tensor entry asks for. Wire format: api.h's codes.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
};
constexpr int kNumOpTypes = 9;
// Allreduce through reducescatter move tensor data; the rest are control requests.
constexpr bool isTensorCollective(OpType op) { return op <= OpType::kReducescatter; }

// Throws InvalidArgument naming the code: not a DataType's.
[[noreturn]] void throwUnknownDtype(DataType dtype);
// Bytes of one element. Inline: a 4-byte allreduce asks it about twenty
// times on its way (~180 instructions a call out of line, callgrind).
inline size_t dtypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kInt16:
    case DataType::kUInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  throwUnknownDtype(dtype);
}
const char* dtypeName(DataType dtype);
const char* reduceOpName(ReduceOp op);
const char* opTypeName(OpType op);
bool isFloatingPoint(DataType dtype);

}  // namespace hvdlite
