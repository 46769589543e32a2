// The few NCCL and CUDA runtime types and entry points hvdlite uses, declared
// here so that building hvdlite needs no CUDA headers: both libraries are
// loaded at run time (libraries.h). Values and signatures are those of the
// public nccl.h (NCCL >= 2.11) and cuda_runtime_api.h (CUDA 12), whose ABI
// is stable.
#pragma once

#include <cstddef>

namespace hvdlite::transport::nccl {

// ---- CUDA runtime ----
using cudaError_t = int;  // 0 = cudaSuccess
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorMemoryAllocation = 2;
constexpr cudaError_t cudaErrorNotReady = 600;
constexpr unsigned kCudaStreamNonBlocking = 0x01;
constexpr unsigned kCudaEventDisableTiming = 0x02;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };

struct CudaApi {
  cudaError_t (*GetDeviceCount)(int*);
  cudaError_t (*GetDevice)(int*);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*StreamCreateWithFlags)(cudaStream_t*, unsigned);
  cudaError_t (*StreamDestroy)(cudaStream_t);
  cudaError_t (*StreamSynchronize)(cudaStream_t);
  cudaError_t (*StreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
  cudaError_t (*EventCreateWithFlags)(cudaEvent_t*, unsigned);
  cudaError_t (*EventDestroy)(cudaEvent_t);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventQuery)(cudaEvent_t);
  cudaError_t (*Malloc)(void**, size_t);
  cudaError_t (*Free)(void*);
  cudaError_t (*MallocAsync)(void**, size_t, cudaStream_t);
  cudaError_t (*FreeAsync)(void*, cudaStream_t);
  cudaError_t (*MallocHost)(void**, size_t);
  cudaError_t (*FreeHost)(void*);
  cudaError_t (*MemcpyAsync)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
  const char* (*GetErrorString)(cudaError_t);
};

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
