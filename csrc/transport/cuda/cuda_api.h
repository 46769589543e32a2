// The few CUDA runtime types and entry points hvdlite uses, declared here so
// that building hvdlite needs no CUDA headers: libcudart is loaded at run
// time (cuda_runtime.h). Values and signatures are those of the public
// cuda_runtime_api.h of CUDA 12 and 13, whose ABI is stable except where a
// comment below says how the two differ.
#pragma once

#include <cstddef>

namespace hvdlite::transport::cuda {

using cudaError_t = int;  // 0 = cudaSuccess
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorMemoryAllocation = 2;
constexpr cudaError_t cudaErrorInsufficientDriver = 35;
constexpr cudaError_t cudaErrorNoDevice = 100;
constexpr cudaError_t cudaErrorNotReady = 600;
// 900..908: an operation that stream capture (CUDA graphs) does not allow.
constexpr cudaError_t cudaErrorStreamCaptureFirst = 900;
constexpr cudaError_t cudaErrorStreamCaptureLast = 908;
constexpr unsigned kCudaStreamNonBlocking = 0x01;
constexpr unsigned kCudaEventDisableTiming = 0x02;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
// cudaStreamIsCapturing's answer.
constexpr int kCaptureStatusNone = 0;
// cudaThreadExchangeStreamCaptureMode: a thread in this mode may make calls
// that are "unsafe" during another thread's capture (cudaEventQuery, ...)
// without invalidating it (Note [Threads and stream capture]).
constexpr int kCaptureModeThreadLocal = 1;

// cudaMemcpyBatchAsync's per-copy attributes (CUDA >= 12.8).
struct cudaMemLocation {
  int type;  // 1 = a device, `id` its ordinal
  int id;
};
struct cudaMemcpyAttributes {
  int srcAccessOrder;  // 1 = cudaMemcpySrcAccessOrderStream
  cudaMemLocation srcLocHint;
  cudaMemLocation dstLocHint;
  unsigned int flags;
};
constexpr int kMemcpySrcAccessOrderStream = 1;
constexpr int kMemLocationTypeDevice = 1;

// cudaDeviceProp, as far as hvdlite reads it; the rest of the struct (about
// 1 KiB in CUDA 12 and 13) is room that the runtime fills.
struct DevicePropertiesPrefix {
  char name[256];
  unsigned char uuid[16];
};
constexpr size_t kDevicePropertiesRoom = 8192;

struct CudaApi {
  cudaError_t (*GetDeviceCount)(int*);
  cudaError_t (*GetDevice)(int*);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*RuntimeGetVersion)(int*);
  cudaError_t (*DriverGetVersion)(int*);
  cudaError_t (*StreamCreateWithFlags)(cudaStream_t*, unsigned);
  cudaError_t (*StreamDestroy)(cudaStream_t);
  cudaError_t (*StreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
  cudaError_t (*StreamIsCapturing)(cudaStream_t, int*);
  cudaError_t (*ThreadExchangeStreamCaptureMode)(int*);
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
  // Optional (null where the runtime lacks them): which physical GPU a device
  // is (Note [A GPU shared by two ranks] in gpu_identity.h).
  // cudaGetDeviceProperties(_v2) fills a cudaDeviceProp, whose first fields
  // are the same in CUDA 12 and 13: char name[256], then the 16-byte UUID.
  cudaError_t (*GetDeviceProperties)(void* properties, int device);
  cudaError_t (*DeviceGetPCIBusId)(char* bus_id, int length, int device);
  // cudaMemcpyBatchAsync, whose signature changed between generations; at
  // most one is set (CudaRuntime picks by the runtime's version), neither
  // before CUDA 12.8.
  // CUDA 12.8 and 12.9: with a failIdx out-parameter.
  cudaError_t (*MemcpyBatchAsync12)(void**, void**, size_t*, size_t, cudaMemcpyAttributes*, size_t*, size_t,
                                    size_t*, cudaStream_t);
  // CUDA 13: without it.
  cudaError_t (*MemcpyBatchAsync13)(void* const*, const void* const*, const size_t*, size_t,
                                    cudaMemcpyAttributes*, size_t*, size_t, cudaStream_t);
};

}  // namespace hvdlite::transport::cuda
