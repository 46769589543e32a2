// The few NCCL types and entry points hvdlite uses, declared here so that
// building hvdlite needs no NCCL or CUDA headers: NCCL is loaded at run time
// (nccl_library.h). Values and signatures are those of the public nccl.h
// (NCCL >= 2.11), whose ABI is stable; the same for NCCL built for CUDA 12
// and 13.
#pragma once

#include <cstddef>

#include "transport/cuda/cuda_api.h"

namespace hvdlite::transport::nccl {

using cuda::cudaStream_t;

// ---- NCCL ----
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
  char internal[128];
};
using ncclResult_t = int;  // 0 = ncclSuccess
constexpr ncclResult_t ncclSuccess = 0;
constexpr ncclResult_t ncclInProgress = 7;  // non-blocking communicators (NCCL >= 2.14)
enum ncclDataType_t {
  ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
  ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9,
};
// An int, not an enum: ncclRedOpCreatePreMulSum returns values past ncclAvg.
using ncclRedOp_t = int;
constexpr ncclRedOp_t ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4;
enum ncclScalarResidence_t { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 };

// ncclConfig_t as NCCL 2.14 laid it out, a prefix of every later layout:
// NCCL reads `size` bytes of it, takes its own defaults for the fields past
// them, and ignores those an older `version` lacks. NCCL_CONFIG_UNDEF_INT =
// INT_MIN. tests/common/test_nccl_abi.py checks this against a real nccl.h.
struct ncclConfig_t {
  size_t size = sizeof(ncclConfig_t);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21400;
  int blocking = kUndefined;
  int cgaClusterSize = kUndefined;
  int minCTAs = kUndefined;
  int maxCTAs = kUndefined;
  const char* netName = nullptr;
  static constexpr int kUndefined = -2147483647 - 1;
};

struct NcclApi {
  ncclResult_t (*GetVersion)(int*);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  // Null before NCCL 2.14: a clean shutdown then destroys after the GPU drained.
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  // Null before NCCL 2.14: communicators are then created blocking.
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  const char* (*GetErrorString)(ncclResult_t);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  ncclResult_t (*RedOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,
                                       ncclComm_t);
  ncclResult_t (*RedOpDestroy)(ncclRedOp_t, ncclComm_t);
};

// NCCL encodes 2.19.3 as 21903 (and versions before 2.9 as 2903-style 1000s).
constexpr int kMinimumNcclVersion = 21100;  // ncclAvg, ncclRedOpCreatePreMulSum, bfloat16

}  // namespace hvdlite::transport::nccl
