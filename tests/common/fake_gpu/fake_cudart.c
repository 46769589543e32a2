/* A stand-in for libcudart.so.12 on machines without a GPU: "device" memory
 * is host memory, streams and events are tokens, copies happen at once. It
 * exports exactly what hvdlite resolves, plus fake_* counters the tests read,
 * so the core's whole CUDA path runs (at world size 1) without a GPU. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WAITS 4096
static void* waiting_streams[MAX_WAITS];
static void* waited_events[MAX_WAITS];
static long waits = 0;
static long records = 0;
static long live_allocations = 0;
static long copies_by_kind[5];

#ifndef FAKE_CUDA_DEVICES
#define FAKE_CUDA_DEVICES 1
#endif

int cudaGetDeviceCount(int* count) { *count = FAKE_CUDA_DEVICES; return 0; }
int cudaGetDevice(int* device) { *device = 0; return 0; }
int cudaSetDevice(int device) { return device == 0 ? 0 : 101; /* cudaErrorInvalidDevice */ }
int cudaStreamCreateWithFlags(void** stream, unsigned flags) { *stream = malloc(1); return 0; }
int cudaStreamDestroy(void* stream) { free(stream); return 0; }
int cudaStreamSynchronize(void* stream) { return 0; }
int cudaStreamWaitEvent(void* stream, void* event, unsigned flags) {
  if (waits < MAX_WAITS) {
    waiting_streams[waits] = stream;
    waited_events[waits] = event;
  }
  ++waits;
  return 0;
}
int cudaEventCreateWithFlags(void** event, unsigned flags) { *event = malloc(1); return 0; }
int cudaEventDestroy(void* event) { free(event); return 0; }
int cudaEventRecord(void* event, void* stream) { ++records; return 0; }
int cudaMalloc(void** ptr, size_t bytes) {
  *ptr = malloc(bytes);
  if (!*ptr) return 2; /* cudaErrorMemoryAllocation */
  ++live_allocations;
  return 0;
}
int cudaFree(void* ptr) {
  if (ptr) --live_allocations;
  free(ptr);
  return 0;
}
int cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  if (kind >= 0 && kind < 5) ++copies_by_kind[kind];
  memmove(dst, src, bytes);
  return 0;
}
const char* cudaGetErrorString(int error) { return "fake CUDA error"; }

/* For the tests. */
long fake_cuda_waits_by(void* stream) {
  long n = 0;
  for (long i = 0; i < waits && i < MAX_WAITS; ++i) n += waiting_streams[i] == stream;
  return n;
}
long fake_cuda_waits_for(void* event) {
  long n = 0;
  for (long i = 0; i < waits && i < MAX_WAITS; ++i) n += waited_events[i] == event;
  return n;
}
long fake_cuda_live_allocations(void) { return live_allocations; }
long fake_cuda_copies(int kind) { return copies_by_kind[kind]; }
