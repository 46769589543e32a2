/* A stand-in for libcudart.so.12 (or .13) on machines without a GPU that
 * behaves like the real runtime where hvdlite's correctness depends on it.
 * This file is the API; fake_gpu_build.py builds it with
 *   fake_cuda_streams.c  streams, and ordering by vector clocks (Note [Vector
 *                        clocks]): which operation is ordered after which;
 *   fake_cuda_races.c    the race detector (FAKE_CUDA_RACE_CHECK=1);
 *   fake_cuda_capture.c  stream capture and graphs (Note [Capture modes]).
 *
 *  - "device" memory is host memory, on FAKE_CUDA_DEVICES devices (default
 *    4); the current device is per thread, as in CUDA, and device 0 until
 *    the thread calls cudaSetDevice;
 *  - CUDA_VISIBLE_DEVICES (read at the first call) shows the process the
 *    listed physical devices only, renumbered from 0, as CUDA does (a list of
 *    ordinals; it ends at the first entry that is not a device); each
 *    physical device has a UUID and a PCI bus id of its own, on this host
 *    (HVDLITE_HOSTNAME, else gethostname: fake hosts differ), which
 *    cudaGetDeviceProperties(_v2) and cudaDeviceGetPCIBusId report; with
 *    FAKE_CUDA_MIG=1 the devices are MIG instances of one GPU: UUIDs of their
 *    own, one PCI bus id;
 *  - contexts are counted as CUDA creates them: cudaSetDevice(d) creates d's
 *    primary context (CUDA 12+), and any call that needs one (memory, stream,
 *    event, copy, capture and graph calls, cudaEventQuery included; not
 *    cudaGetDeviceCount/GetDevice/GetErrorString/RuntimeGetVersion/
 *    DriverGetVersion) creates the current device's; fake_cuda_context_report
 *    says which call on which thread made each;
 *  - a stream is a FIFO queue run by its own thread: copies (and the fake
 *    NCCL's collectives, the test kernels) complete later, not at call time,
 *    each after FAKE_CUDA_KERNEL_US microseconds (default 1000), so a result
 *    read before its done event fired is stale and a missing wait is seen;
 *  - an event marks a position in a stream; cudaStreamWaitEvent holds a
 *    stream until the event's last recorded position has run (a later
 *    record, on any stream, does not change what an earlier wait waits for);
 *  - the legacy default stream (null, cudaStreamLegacy) of each device waits
 *    for earlier work of the device's blocking streams, and they for its
 *    (cudaStreamNonBlocking streams do not); cudaStreamPerThread is a
 *    blocking stream per thread and device;
 *  - every access a stream operation makes to cudaMalloc/cudaMallocAsync
 *    memory is checked, when it is queued, against earlier ones: a pair not
 *    ordered by stream order, an event wait or a host synchronize is a race
 *    (fake_cuda_races.c; host code touching that memory is not tracked);
 *  - copies to or from pageable host memory follow CUDA's rules (a
 *    device-to-host copy into pageable memory waits for the stream; a
 *    host-to-device copy takes the source at call time); cudaMallocHost memory
 *    is pinned and copied in stream order;
 *  - cudaMemcpyBatchAsync exists when FAKE_CUDART_VERSION (default 12080,
 *    as cudaRuntimeGetVersion encodes 12.8) is 12080 or more, with the
 *    signature of that generation (a failIdx argument before 13.0); a batch
 *    is one stream item. cudaDriverGetVersion says FAKE_CUDA_DRIVER_VERSION
 *    (default 13000); a runtime newer than that fails cudaGetDeviceCount
 *    with cudaErrorInsufficientDriver, as the real one does;
 *  - cudaMalloc/cudaMallocAsync of FAKE_CUDA_MALLOC_FAIL_BYTES or more (read
 *    at each call) fail with cudaErrorMemoryAllocation; cudaFreeAsync frees in
 *    stream order; cudaFree frees at once, without waiting for the device.
 * fake_* functions are for the tests (counters, reports, test kernels) and
 * the fake NCCL (fake_cuda_enqueue_kernel, which reports its accesses). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

#ifndef FAKE_CUDART_VERSION
#define FAKE_CUDART_VERSION 12080
#endif
#ifdef FAKE_CUDA_DRIVER_VERSION
#define FAKE_DRIVER_VERSION FAKE_CUDA_DRIVER_VERSION
#else
#define FAKE_DRIVER_VERSION 13000
#endif
enum { HostToHost, HostToDevice, DeviceToHost, DeviceToDevice, Default };

static atomic_long calls; /* every cudaXxx call but cudaEventQuery (hvdlite's watchdog polls it) */
static atomic_long events_created; /* fake_cuda_events_created() */
static atomic_long records, live_allocations, batches;
static atomic_long copies_by_kind[5];
/* Calls by name (fake_cuda_call_report), for tests that pin a collective's cost. */
#define MAX_CALL_NAMES 64
static struct { const char* name; atomic_long n; } by_name[MAX_CALL_NAMES];
static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;
void count_named(const char* name) {
  atomic_fetch_add(&calls, 1);
  for (int i = 0; i < MAX_CALL_NAMES; ++i) {
    const char* seen = by_name[i].name;
    if (seen == name || (seen && strcmp(seen, name) == 0)) { atomic_fetch_add(&by_name[i].n, 1); return; }
    if (!seen) {
      pthread_mutex_lock(&names_mu);
      if (!by_name[i].name) by_name[i].name = name;
      pthread_mutex_unlock(&names_mu);
      --i; /* look at this slot again: ours, or another thread's name */
    }
  }
}
void count_call(void) { count_named("capture_and_graph_calls"); }
#define CALL() count_named(__func__)
/* "name=count name=count ..." of every counted call so far. */
const char* fake_cuda_call_report(void) {
  static char text[MAX_CALL_NAMES * 48 + 1];
  text[0] = 0;
  for (int i = 0; i < MAX_CALL_NAMES && by_name[i].name; ++i) {
    char one[64];
    snprintf(one, sizeof one, "%s%s=%ld", i ? " " : "", by_name[i].name, atomic_load(&by_name[i].n));
    strncat(text, one, sizeof text - strlen(text) - 1);
  }
  return text;
}
#define NEED_CONTEXT(call)            \
  do {                                \
    int rc_ = need_context(call);     \
    if (rc_ != Success) return rc_;   \
  } while (0)

/* ---- devices and contexts ---- */
static __thread int current_device = 0;
static __thread int device_was_set = 0;
static struct {
  int made, thread_set_device;
  const char* call;
  char thread[NAME_LEN];
} contexts[MAX_DEVICES];

int current_device_of_thread(void) { return current_device; }
static int visible(void); /* the devices CUDA_VISIBLE_DEVICES shows */

static void make_context(int device, const char* call) { /* lock held */
  if (contexts[device].made) return;
  contexts[device].made = 1;
  contexts[device].call = call;
  contexts[device].thread_set_device = device_was_set;
  thread_name(contexts[device].thread);
}

int need_context(const char* call) {
  if (visible() == 0) return NoDevice;
  pthread_mutex_lock(&fake_mu);
  make_context(current_device, call);
  pthread_mutex_unlock(&fake_mu);
  return Success;
}

/* ---- visible devices (CUDA_VISIBLE_DEVICES) and their identities ---- */
static int visible_count = FAKE_CUDA_DEVICES;
static int physical_of[MAX_DEVICES];
static pthread_once_t visible_once = PTHREAD_ONCE_INIT;
static void read_visible(void) {
  for (int d = 0; d < MAX_DEVICES; ++d) physical_of[d] = d;
  const char* list = getenv("CUDA_VISIBLE_DEVICES");
  if (!list) return;
  visible_count = 0;
  while (*list && visible_count < MAX_DEVICES) {
    char* end;
    long d = strtol(list, &end, 10);
    if (end == list || d < 0 || d >= FAKE_CUDA_DEVICES) break; /* CUDA stops at the first bad entry */
    physical_of[visible_count++] = (int)d;
    list = *end == ',' ? end + 1 : end;
    if (*end != ',') break;
  }
}
static int visible(void) { pthread_once(&visible_once, read_visible); return visible_count; }

static unsigned host_hash(void) {
  char host[256] = {0};
  const char* named = getenv("HVDLITE_HOSTNAME");
  if (named && *named) snprintf(host, sizeof host, "%s", named);
  else gethostname(host, sizeof host - 1);
  unsigned h = 2166136261u; /* FNV-1a */
  for (const char* c = host; *c; ++c) h = (h ^ (unsigned char)*c) * 16777619u;
  return h;
}
static int mig(void) { const char* m = getenv("FAKE_CUDA_MIG"); return m && strcmp(m, "1") == 0; }
/* The physical GPU a visible device is on (MIG: every instance is on GPU 0). */
int fake_cuda_physical_gpu(int device) {
  if (device < 0 || device >= visible()) return -1;
  return mig() ? 0 : physical_of[device];
}

int cudaGetDeviceCount(int* count) {
  CALL();
  if (FAKE_CUDART_VERSION / 10 > FAKE_DRIVER_VERSION / 10) return 35; /* cudaErrorInsufficientDriver */
  *count = visible();
  return Success;
}
/* cudaDeviceProp's first fields (char name[256]; cudaUUID_t uuid), the
 * same in CUDA 12 and 13; the rest of the caller's struct is left alone. */
static int device_properties(void* properties, int device) {
  CALL();
  if (device < 0 || device >= visible()) return InvalidDevice;
  unsigned char* p = properties;
  snprintf((char*)p, 256, "Fake GPU %s%d", mig() ? "MIG " : "", physical_of[device]);
  unsigned h = host_hash();
  unsigned char uuid[16] = {0xfa, 0x4e, (unsigned char)(h >> 24), (unsigned char)(h >> 16),
                            (unsigned char)(h >> 8), (unsigned char)h, (unsigned char)mig(),
                            (unsigned char)physical_of[device]};
  memcpy(p + 256, uuid, sizeof uuid);
  return Success;
}
int cudaGetDeviceProperties_v2(void* properties, int device) { return device_properties(properties, device); }
int cudaGetDeviceProperties(void* properties, int device) { return device_properties(properties, device); }
int cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  CALL();
  if (device < 0 || device >= visible()) return InvalidDevice;
  snprintf(bus_id, length, "%04x:%02x:00.0", host_hash() & 0xffff, fake_cuda_physical_gpu(device));
  return Success;
}

int cudaGetDevice(int* device) { CALL(); *device = current_device; return Success; }
int cudaSetDevice(int device) {
  CALL();
  if (device < 0 || device >= visible()) return InvalidDevice;
  current_device = device;
  device_was_set = 1;
  return need_context("cudaSetDevice"); /* the primary context, as CUDA 12 does */
}
int cudaRuntimeGetVersion(int* version) { CALL(); *version = FAKE_CUDART_VERSION; return Success; }
int cudaDriverGetVersion(int* version) { CALL(); *version = FAKE_DRIVER_VERSION; return Success; }

/* ---- host synchronisation: waits, then learns what it waited for ---- */
static void learn(const vclock* what) {
  pthread_mutex_lock(&fake_mu);
  clock_join(thread_clock(), what);
  pthread_mutex_unlock(&fake_mu);
}

/* A marker queued on the stream and waited for: on the legacy stream it
 * waits for the device's blocking streams too, as CUDA's does. */
static int synchronize(void* handle, const char* call) {
  struct op* marker = new_op(call, NULL, 0);
  int sid = 0;
  long pos = 0;
  vclock* clock = malloc(sizeof *clock);
  int rc = submit(handle, marker, NULL, NULL, 0, &sid, &pos, clock);
  if (rc == Success && pos) {
    wait_position(sid, pos);
    learn(clock);
  }
  free(clock);
  return rc;
}

/* A synchronize or query of a capturing stream is refused and invalidates it. */
static int refuse_if_capturing(void* handle, const char* call) {
  pthread_mutex_lock(&fake_mu);
  struct stream* s = resolve(handle);
  int rc = Success;
  if (s->capture) {
    char why[256];
    snprintf(why, sizeof why, "%s of the capturing stream itself", call);
    capture_invalidate(s->capture, why);
    rc = CaptureUnsupported;
  }
  if (rc == Success) rc = capture_refuses(call);
  pthread_mutex_unlock(&fake_mu);
  return rc;
}

/* ---- streams ---- */
int cudaStreamCreateWithFlags(void** stream, unsigned flags) {
  CALL();
  NEED_CONTEXT("cudaStreamCreateWithFlags");
  pthread_mutex_lock(&fake_mu);
  *stream = new_stream(current_device, !(flags & 1 /* cudaStreamNonBlocking */), NULL);
  pthread_mutex_unlock(&fake_mu);
  return *stream ? Success : MemoryAllocation;
}
int cudaStreamCreate(void** stream) { return cudaStreamCreateWithFlags(stream, 0); }
int cudaStreamDestroy(void* handle) {
  CALL();
  NEED_CONTEXT("cudaStreamDestroy");
  if ((uintptr_t)handle <= 2) return InvalidResourceHandle; /* the default streams */
  destroy_stream(handle);
  return Success;
}
int cudaStreamSynchronize(void* stream) {
  CALL();
  NEED_CONTEXT("cudaStreamSynchronize");
  int rc = refuse_if_capturing(stream, "cudaStreamSynchronize");
  return rc != Success ? rc : synchronize(stream, "cudaStreamSynchronize");
}
int cudaStreamQuery(void* stream) {
  CALL();
  NEED_CONTEXT("cudaStreamQuery");
  int rc = refuse_if_capturing(stream, "cudaStreamQuery");
  if (rc != Success) return rc;
  pthread_mutex_lock(&fake_mu);
  struct stream* s = resolve(stream);
  int sid = s->sid;
  long last = s->clock.c[sid];
  vclock* clock = malloc(sizeof *clock);
  *clock = s->clock;
  pthread_mutex_unlock(&fake_mu);
  rc = done_position(sid) >= last ? Success : NotReady;
  if (rc == Success) learn(clock);
  free(clock);
  return rc;
}
int cudaDeviceSynchronize(void) {
  CALL();
  NEED_CONTEXT("cudaDeviceSynchronize");
  pthread_mutex_lock(&fake_mu);
  int rc = capture_refuses("cudaDeviceSynchronize");
  int n = 0, sids[MAX_STREAMS];
  long last[MAX_STREAMS];
  vclock* clock = calloc(1, sizeof *clock);
  for (int i = 0; rc == Success && i < stream_count(); ++i) {
    struct stream* s = stream_of_slot(i);
    if (!s || s->device != current_device) continue;
    clock_join(clock, &s->clock);
    sids[n] = i;
    last[n++] = s->clock.c[i];
  }
  pthread_mutex_unlock(&fake_mu);
  for (int i = 0; i < n; ++i) wait_position(sids[i], last[i]);
  if (rc == Success) learn(clock);
  free(clock);
  return rc;
}

/* ---- events ---- */
#define MAX_WAITS 65536
static void* waiting_streams[MAX_WAITS];
static void* waited_events[MAX_WAITS];
static atomic_long waits;

int cudaEventCreateWithFlags(void** event, unsigned flags) {
  CALL();
  NEED_CONTEXT("cudaEventCreateWithFlags");
  atomic_fetch_add(&events_created, 1);
  *event = calloc(1, sizeof(struct event));
  return Success;
}
int cudaEventCreate(void** event) { return cudaEventCreateWithFlags(event, 0); }
/* Queued work does not refer to the event (a wait took its position when it
 * was queued), so it can go at once, as in CUDA. */
int cudaEventDestroy(void* event) {
  CALL();
  NEED_CONTEXT("cudaEventDestroy");
  struct event* e = event;
  pthread_mutex_lock(&fake_mu);
  free(e->snapshot);
  free(e);
  pthread_mutex_unlock(&fake_mu);
  return Success;
}
int cudaEventRecord(void* event, void* stream) {
  CALL();
  NEED_CONTEXT("cudaEventRecord");
  atomic_fetch_add(&records, 1);
  return submit(stream, new_op("cudaEventRecord", NULL, 0), event, NULL, 0, NULL, NULL, NULL);
}
int cudaStreamWaitEvent(void* stream, void* event, unsigned flags) {
  CALL();
  NEED_CONTEXT("cudaStreamWaitEvent");
  long i = atomic_fetch_add(&waits, 1);
  if (i < MAX_WAITS) {
    waiting_streams[i] = stream;
    waited_events[i] = event;
  }
  return submit(stream, new_op("cudaStreamWaitEvent", NULL, 0), NULL, event, flags, NULL, NULL, NULL);
}

/* Where the event's last record is, and what it is ordered after; lock taken. */
static int event_position(struct event* e, const char* call, int* sid, long* pos, vclock* clock) {
  pthread_mutex_lock(&fake_mu);
  int rc = capture_refuses(call);
  if (rc == Success && e->captured && capture_by_id(e->captured)) rc = CapturedEvent;
  *sid = e->sid;
  *pos = e->pos;
  if (e->pos) *clock = *e->snapshot;
  pthread_mutex_unlock(&fake_mu);
  return rc;
}
int cudaEventQuery(void* event) { /* not counted: hvdlite's watchdog polls it */
  NEED_CONTEXT("cudaEventQuery");
  int sid;
  long pos;
  vclock* clock = malloc(sizeof *clock);
  int rc = event_position(event, "cudaEventQuery", &sid, &pos, clock);
  if (rc == Success && pos && done_position(sid) < pos) rc = NotReady;
  if (rc == Success && pos) learn(clock);
  free(clock);
  return rc;
}
int cudaEventSynchronize(void* event) {
  CALL();
  NEED_CONTEXT("cudaEventSynchronize");
  int sid;
  long pos;
  vclock* clock = malloc(sizeof *clock);
  int rc = event_position(event, "cudaEventSynchronize", &sid, &pos, clock);
  if (rc == Success && pos) {
    wait_position(sid, pos);
    learn(clock);
  }
  free(clock);
  return rc;
}

/* ---- memory ---- */
#define MAX_PINNED 1024
static struct { char* at; size_t bytes; } pinned[MAX_PINNED];
static pthread_mutex_t pinned_mu = PTHREAD_MUTEX_INITIALIZER;

static int is_pinned(const void* p) {
  int found = 0;
  pthread_mutex_lock(&pinned_mu);
  for (int i = 0; i < MAX_PINNED && !found; ++i) {
    found = pinned[i].at && (const char*)p >= pinned[i].at && (const char*)p < pinned[i].at + pinned[i].bytes;
  }
  pthread_mutex_unlock(&pinned_mu);
  return found;
}

static int too_big(size_t bytes) {
  const char* v = getenv("FAKE_CUDA_MALLOC_FAIL_BYTES");
  return v && *v && bytes >= (size_t)atoll(v);
}

static int refused(const char* call) {
  pthread_mutex_lock(&fake_mu);
  int rc = capture_refuses(call);
  pthread_mutex_unlock(&fake_mu);
  return rc;
}

static int allocate(void** ptr, size_t bytes) {
  if (too_big(bytes) || !(*ptr = malloc(bytes ? bytes : 1))) {
    *ptr = NULL;
    return MemoryAllocation;
  }
  atomic_fetch_add(&live_allocations, 1);
  return Success;
}
static void track(void* ptr, size_t bytes, const char* how, int sid, long pos) {
  pthread_mutex_lock(&fake_mu);
  races_allocated(ptr, bytes, how, sid, pos);
  pthread_mutex_unlock(&fake_mu);
}
int cudaMalloc(void** ptr, size_t bytes) {
  CALL();
  NEED_CONTEXT("cudaMalloc");
  int rc = refused("cudaMalloc");
  if (rc == Success) rc = allocate(ptr, bytes);
  if (rc == Success) track(*ptr, bytes, "cudaMalloc", 0, 0);
  return rc;
}
int cudaFree(void* ptr) {
  CALL();
  NEED_CONTEXT("cudaFree");
  int rc = refused("cudaFree");
  if (rc != Success || !ptr) return rc;
  atomic_fetch_sub(&live_allocations, 1);
  pthread_mutex_lock(&fake_mu);
  races_freed(ptr);
  pthread_mutex_unlock(&fake_mu);
  free(ptr);
  return Success;
}
/* A stream-ordered allocation: usable on streams ordered after it. */
int cudaMallocAsync(void** ptr, size_t bytes, void* stream) {
  CALL();
  NEED_CONTEXT("cudaMallocAsync");
  int rc = allocate(ptr, bytes);
  if (rc != Success) return rc;
  int sid = 0;
  long pos = 0;
  rc = submit(stream, new_op("cudaMallocAsync", NULL, 0), NULL, NULL, 0, &sid, &pos, NULL);
  if (rc != Success) {
    free(*ptr);
    *ptr = NULL;
    atomic_fetch_sub(&live_allocations, 1);
    return rc;
  }
  track(*ptr, bytes, "cudaMallocAsync", sid, pos);
  return Success;
}
static void free_now(struct op* op) {
  atomic_fetch_sub(&live_allocations, 1);
  free(op->p[0]);
}
int cudaFreeAsync(void* ptr, void* stream) {
  CALL();
  NEED_CONTEXT("cudaFreeAsync");
  if (!ptr) return Success;
  struct op* op = new_op("cudaFreeAsync", free_now, 0);
  op->p[0] = ptr;
  pthread_mutex_lock(&fake_mu);
  op_add_access(op, ptr, races_size(ptr), 1, NULL);
  pthread_mutex_unlock(&fake_mu);
  int rc = submit(stream, op, NULL, NULL, 0, NULL, NULL, NULL);
  if (rc == Success) {
    pthread_mutex_lock(&fake_mu);
    races_freed(ptr);
    pthread_mutex_unlock(&fake_mu);
  }
  return rc;
}
int cudaMallocHost(void** ptr, size_t bytes) {
  CALL();
  NEED_CONTEXT("cudaMallocHost");
  int rc = refused("cudaMallocHost");
  if (rc != Success) return rc;
  *ptr = malloc(bytes ? bytes : 1);
  if (!*ptr) return MemoryAllocation;
  pthread_mutex_lock(&pinned_mu);
  for (int i = 0; i < MAX_PINNED; ++i) {
    if (!pinned[i].at) {
      pinned[i].at = *ptr;
      pinned[i].bytes = bytes;
      break;
    }
  }
  pthread_mutex_unlock(&pinned_mu);
  return Success;
}
int cudaFreeHost(void* ptr) {
  CALL();
  NEED_CONTEXT("cudaFreeHost");
  int rc = refused("cudaFreeHost");
  if (rc != Success) return rc;
  pthread_mutex_lock(&pinned_mu);
  for (int i = 0; i < MAX_PINNED; ++i) {
    if (pinned[i].at == ptr) pinned[i].at = NULL;
  }
  pthread_mutex_unlock(&pinned_mu);
  free(ptr);
  return Success;
}

/* ---- copies ---- */
static void copy_now(struct op* op) { memmove(op->p[0], op->p[1], op->bytes); }
static void drop_staged(struct op* op) { free(op->p[2]); } /* a snapshot of pageable memory */

int cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  CALL();
  NEED_CONTEXT("cudaMemcpyAsync");
  if (kind >= 0 && kind < 5) atomic_fetch_add(&copies_by_kind[kind], 1);
  int into_pageable = kind == DeviceToHost && !is_pinned(dst);
  struct op* op = new_op("cudaMemcpyAsync", copy_now, !into_pageable);
  op->p[0] = dst;
  op->p[1] = (void*)src;
  op->bytes = bytes;
  op_add_access(op, src, bytes, 0, NULL);
  op_add_access(op, dst, bytes, 1, NULL);
  if (kind == HostToDevice && !is_pinned(src)) { /* from pageable memory: staged at call time */
    op->p[1] = op->p[2] = malloc(bytes ? bytes : 1);
    memcpy(op->p[1], src, bytes);
    op->drop = drop_staged;
  }
  if (!into_pageable) return submit(stream, op, NULL, NULL, 0, NULL, NULL, NULL);
  /* into pageable memory: synchronous, so the host learns the stream's order */
  int rc = refuse_if_capturing(stream, "cudaMemcpyAsync into pageable memory");
  if (rc != Success) {
    unref_op(op);
    return rc;
  }
  int sid = 0;
  long pos = 0;
  vclock* clock = malloc(sizeof *clock);
  rc = submit(stream, op, NULL, NULL, 0, &sid, &pos, clock);
  if (rc == Success && pos) {
    wait_position(sid, pos);
    learn(clock);
  }
  free(clock);
  return rc;
}

static void set_now(struct op* op) { memset(op->p[0], (int)op->n, op->bytes); }
int cudaMemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  CALL();
  NEED_CONTEXT("cudaMemsetAsync");
  struct op* op = new_op("cudaMemsetAsync", set_now, 1);
  op->p[0] = dst;
  op->n = value;
  op->bytes = bytes;
  op_add_access(op, dst, bytes, 1, NULL);
  return submit(stream, op, NULL, NULL, 0, NULL, NULL, NULL);
}

#if FAKE_CUDART_VERSION >= 12080
/* cudaMemcpyAttributes (CUDA 12.8 and 13.0 alike). */
struct mem_location { int type, id; };
struct memcpy_attributes {
  int srcAccessOrder; /* 1 stream order, 2 during the call, 3 any; 0 is invalid */
  struct mem_location srcLocHint, dstLocHint;
  unsigned flags;
};
struct batch {
  size_t n;
  void** dst;
  const void** src;
  size_t* sizes;
  char* staged; /* which srcs are copies taken at call time */
};
static void copy_batch(struct op* op) {
  struct batch* b = op->p[0];
  for (size_t i = 0; i < b->n; ++i) memmove(b->dst[i], b->src[i], b->sizes[i]);
}
static void drop_batch(struct op* op) {
  struct batch* b = op->p[0];
  for (size_t i = 0; i < b->n; ++i) {
    if (b->staged[i]) free((void*)b->src[i]);
  }
  free(b->dst), free(b->src), free(b->sizes), free(b->staged), free(b);
}

/* CUDA's checks; *fail is the copy at fault, or SIZE_MAX. */
static int check_batch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                       const struct memcpy_attributes* attrs, const size_t* idxs, size_t nattrs, size_t* fail) {
  *fail = SIZE_MAX;
  if (!dsts || !srcs || !sizes || count == 0) return InvalidValue;
  if (!attrs || !idxs || nattrs == 0 || nattrs > count) return InvalidValue;
  if (idxs[0] != 0) return InvalidValue;
  for (size_t i = 0; i < nattrs; ++i) {
    if ((i > 0 && idxs[i] <= idxs[i - 1]) || idxs[i] >= count) return InvalidValue;
    if (attrs[i].srcAccessOrder < 1 || attrs[i].srcAccessOrder > 3) {
      *fail = idxs[i];
      return InvalidValue;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] && (!dsts[i] || !srcs[i])) {
      *fail = i;
      return InvalidValue;
    }
  }
  return Success;
}

/* One stream item (one kernel's time) that makes every copy. */
static int memcpy_batch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                        struct memcpy_attributes* attrs, size_t* idxs, size_t nattrs, size_t* fail_out,
                        void* stream) {
  CALL();
  NEED_CONTEXT("cudaMemcpyBatchAsync");
  size_t fail;
  int rc = check_batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, &fail);
  if (rc == Success && (stream == NULL || stream == (void*)1)) rc = InvalidValue; /* not the legacy stream */
  if (fail_out) *fail_out = fail;
  if (rc != Success) return rc;
  struct batch* b = calloc(1, sizeof *b);
  b->n = count;
  b->dst = malloc(count * sizeof *b->dst);
  b->src = malloc(count * sizeof *b->src);
  b->sizes = malloc(count * sizeof *b->sizes);
  b->staged = calloc(count, 1);
  struct op* op = new_op("cudaMemcpyBatchAsync", copy_batch, 1);
  op->p[0] = b;
  op->drop = drop_batch;
  size_t a = 0;
  for (size_t i = 0; i < count; ++i) {
    while (a + 1 < nattrs && idxs[a + 1] <= i) ++a;
    b->dst[i] = dsts[i];
    b->src[i] = srcs[i];
    b->sizes[i] = sizes[i];
    if (attrs[a].srcAccessOrder == 2 && !races_is_device(srcs[i])) { /* read during the call */
      void* copy = malloc(sizes[i] ? sizes[i] : 1);
      memcpy(copy, srcs[i], sizes[i]);
      b->src[i] = copy;
      b->staged[i] = 1;
    }
    op_add_access(op, srcs[i], sizes[i], 0, NULL);
    op_add_access(op, dsts[i], sizes[i], 1, NULL);
    /* counted by the kind CUDA infers; memory it does not know counts as device memory */
    int from_host = is_pinned(srcs[i]), to_host = is_pinned(dsts[i]);
    atomic_fetch_add(&copies_by_kind[from_host ? (to_host ? HostToHost : HostToDevice)
                                               : (to_host ? DeviceToHost : DeviceToDevice)], 1);
  }
  atomic_fetch_add(&batches, 1);
  rc = submit(stream, op, NULL, NULL, 0, NULL, NULL, NULL);
  if (rc != Success && fail_out) *fail_out = SIZE_MAX;
  return rc;
}

#if FAKE_CUDART_VERSION >= 13000
int cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                         struct memcpy_attributes* attrs, size_t* attrsIdxs, size_t numAttrs, void* stream) {
  return memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, stream);
}
#else
int cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes, size_t count, struct memcpy_attributes* attrs,
                         size_t* attrsIdxs, size_t numAttrs, size_t* failIdx, void* stream) {
  return memcpy_batch(dsts, (const void* const*)srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, stream);
}
#endif
#endif

const char* cudaGetErrorString(int error) {
  switch (error) {
    case InvalidValue: return "invalid argument";
    case MemoryAllocation: return "out of memory";
    case NoDevice: return "no CUDA-capable device is detected";
    case InvalidDevice: return "invalid device ordinal";
    case InvalidResourceHandle: return "invalid resource handle";
    case IllegalState: return "the operation is not permitted in this state (not capturing?)";
    case NotReady: return "device not ready";
    case CaptureUnsupported: return "operation not permitted when stream is capturing";
    case CaptureInvalidated: return "operation failed due to a previous error during capture";
    case CaptureUnmatched: return "capture was not begun on this stream";
    case CaptureIsolation: return "operation would make a capture depend on work outside it";
    case CaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case CapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case CaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    default: return "fake CUDA error";
  }
}

/* ---- for the fake NCCL ---- */
struct fake_access { const void* p; size_t bytes; int write; const char* op; };
struct kernel_call { void (*run)(void*); void (*finished)(void*); void (*drop)(void*); void* arg; };
static void run_kernel(struct op* op) {
  struct kernel_call* k = op->p[0];
  k->run(k->arg);
}
static void kernel_finished(struct op* op) {
  struct kernel_call* k = op->p[0];
  if (k->finished) k->finished(k->arg);
}
static void drop_kernel(struct op* op) {
  struct kernel_call* k = op->p[0];
  if (k->drop) k->drop(k->arg);
  free(k);
}
/* Queues run(arg) on `stream` as a kernel named `name` that makes the `n`
 * accesses (checked for races now); finished(arg), if given, each time the
 * stream has counted a run done (so whoever it wakes finds the stream past
 * the kernel, as after a real one); drop(arg), if given, once it is no
 * longer needed (after it ran, or with the graph that captured it, which may
 * run it several times). *captured: recorded into a capture, not queued. */
int fake_cuda_enqueue_kernel(void* stream, const char* name, void (*run)(void*), void (*finished)(void*),
                             void (*drop)(void*), void* arg, const struct fake_access* accesses, int n,
                             int* captured) {
  struct kernel_call* k = malloc(sizeof *k);
  *k = (struct kernel_call){run, finished, drop, arg};
  struct op* op = new_op(name, run_kernel, 1);
  op->p[0] = k;
  op->finished = kernel_finished;
  op->drop = drop_kernel;
  for (int i = 0; i < n; ++i) {
    op_add_access(op, accesses[i].p, accesses[i].bytes, accesses[i].write, accesses[i].op);
  }
  long pos = 0;
  int rc = submit(stream, op, NULL, NULL, 0, NULL, &pos, NULL);
  if (captured) *captured = rc == Success && pos == 0;
  return rc;
}
/* Queues fn(arg) on `stream` as a kernel (what older fake NCCLs call). */
void fake_cuda_launch(void* stream, void (*fn)(void*), void* arg) {
  fake_cuda_enqueue_kernel(stream, "fake_cuda_launch", fn, NULL, NULL, arg, NULL, 0, NULL);
}
int fake_cuda_current_device(void) { return current_device; }
/* NCCL creates the current device's context when it creates a communicator. */
int fake_cuda_need_context(const char* call) { return need_context(call); }

/* What a thread knows, handed to another that queues work on its behalf
 * (the fake NCCL's enqueue helper): its clock and its current device. */
struct host_state { vclock clock; int device; };
void* fake_cuda_host_save(void) {
  struct host_state* h = malloc(sizeof *h);
  pthread_mutex_lock(&fake_mu);
  h->clock = *thread_clock();
  pthread_mutex_unlock(&fake_mu);
  h->device = current_device;
  return h;
}
void fake_cuda_host_adopt(void* saved) {
  struct host_state* h = saved;
  learn(&h->clock);
  current_device = h->device;
  free(h);
}

/* ---- for the tests ---- */
long fake_cuda_calls(void) { return atomic_load(&calls); }
long fake_cuda_events_created(void) { return atomic_load(&events_created); }
long fake_cuda_waits_by(void* stream) {
  long n = 0, total = atomic_load(&waits);
  for (long i = 0; i < total && i < MAX_WAITS; ++i) n += waiting_streams[i] == stream;
  return n;
}
long fake_cuda_waits_for(void* event) {
  long n = 0, total = atomic_load(&waits);
  for (long i = 0; i < total && i < MAX_WAITS; ++i) n += waited_events[i] == event;
  return n;
}
long fake_cuda_live_allocations(void) { return atomic_load(&live_allocations); }
long fake_cuda_copies(int kind) { return atomic_load(&copies_by_kind[kind]); }
long fake_cuda_batches(void) { return atomic_load(&batches); }

int fake_cuda_context_count(void) {
  int n = 0;
  pthread_mutex_lock(&fake_mu);
  for (int d = 0; d < MAX_DEVICES; ++d) n += contexts[d].made;
  pthread_mutex_unlock(&fake_mu);
  return n;
}
int fake_cuda_has_context(int device) {
  if (device < 0 || device >= MAX_DEVICES) return 0;
  pthread_mutex_lock(&fake_mu);
  int made = contexts[device].made;
  pthread_mutex_unlock(&fake_mu);
  return made;
}
/* One line per device with a context: the call and thread that created it. */
const char* fake_cuda_context_report(void) {
  static char text[MAX_DEVICES * 192 + 1];
  pthread_mutex_lock(&fake_mu);
  text[0] = 0;
  for (int d = 0; d < MAX_DEVICES; ++d) {
    if (!contexts[d].made) continue;
    size_t used = strlen(text);
    snprintf(text + used, sizeof text - used, "device %d: created by %s on thread \"%s\"%s\n", d, contexts[d].call,
             contexts[d].thread, contexts[d].thread_set_device ? "" : " (which had not called cudaSetDevice)");
  }
  pthread_mutex_unlock(&fake_mu);
  return text;
}

/* Test kernels. A long framework kernel: queued on `stream`, it runs for
 * `us` microseconds and then writes `value` into `count` floats at `dst` (a
 * later layer of backward overwriting memory, as seen from an earlier
 * collective). */
static void fill_later(struct op* op) {
  struct timespec t = {op->n / 1000000, (op->n % 1000000) * 1000};
  nanosleep(&t, NULL);
  float* dst = op->p[0];
  float value;
  memcpy(&value, &op->p[1], sizeof value);
  for (size_t i = 0; i < op->bytes / sizeof(float); ++i) dst[i] = value;
}
static int queue_fill(const char* name, void* stream, float* dst, long count, float value, long us, int kernel) {
  NEED_CONTEXT(name);
  struct op* op = new_op(name, fill_later, kernel);
  op->p[0] = dst;
  memcpy(&op->p[1], &value, sizeof value);
  op->n = us;
  op->bytes = (size_t)count * sizeof(float);
  op_add_access(op, dst, op->bytes, 1, NULL);
  return submit(stream, op, NULL, NULL, 0, NULL, NULL, NULL);
}
int fake_cuda_fill_later(void* stream, float* dst, long count, float value, long us) {
  return queue_fill("fake_cuda_fill_later", stream, dst, count, value, us, 0);
}
/* A kernel (FAKE_CUDA_KERNEL_US) that writes `value` into `count` floats. */
int fake_cuda_kernel_write(void* stream, float* dst, long count, float value) {
  return queue_fill("fake_cuda_kernel_write", stream, dst, count, value, 0, 1);
}
/* A kernel that reads `bytes` at `src` and copies them to host memory, to
 * see what a stream saw at its position. */
int fake_cuda_kernel_read(void* stream, const void* src, size_t bytes, void* host_dst) {
  NEED_CONTEXT("fake_cuda_kernel_read");
  struct op* op = new_op("fake_cuda_kernel_read", copy_now, 1);
  op->p[0] = host_dst;
  op->p[1] = (void*)src;
  op->bytes = bytes;
  op_add_access(op, src, bytes, 0, NULL);
  return submit(stream, op, NULL, NULL, 0, NULL, NULL, NULL);
}
