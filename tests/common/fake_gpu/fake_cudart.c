/* A stand-in for libcudart.so.12 on machines without a GPU that behaves like
 * the real runtime where hvdlite's correctness depends on it:
 *  - "device" memory is host memory, on FAKE_CUDA_DEVICES devices (default 4);
 *    the current device is per thread, as in CUDA;
 *  - a stream is a FIFO queue run by its own thread: copies (and the fake
 *    NCCL's collectives, fake_cuda_launch) complete later, not at call time,
 *    each after FAKE_CUDA_KERNEL_US microseconds (default 1000), so a result
 *    read before its done event fired is stale and a missing wait is seen;
 *  - an event marks a position in a stream; cudaStreamWaitEvent holds a
 *    stream until the event's last recorded position has run (a later
 *    record, on any stream, does not change what an earlier wait waits for);
 *  - copies to or from pageable host memory follow CUDA's rules (a
 *    device-to-host copy into pageable memory waits for the stream; a
 *    host-to-device copy takes the source at call time); cudaMallocHost memory
 *    is pinned and copied in stream order;
 *  - cudaMalloc/cudaMallocAsync of FAKE_CUDA_MALLOC_FAIL_BYTES or more (read
 *    at each call) fail with cudaErrorMemoryAllocation; cudaFreeAsync frees in
 *    stream order.
 * fake_* functions are for the tests (counters) and the fake NCCL. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef FAKE_CUDA_DEVICES
#define FAKE_CUDA_DEVICES 4
#endif
enum { Success = 0, InvalidValue = 1, MemoryAllocation = 2, InvalidDevice = 101, NotReady = 600 };

static atomic_long calls;  /* every cudaXxx call but cudaEventQuery (hvdlite's watchdog polls it) */
static atomic_long records;
static atomic_long live_allocations;
static atomic_long copies_by_kind[5];
#define CALL() atomic_fetch_add(&calls, 1)

static __thread int current_device = 0;

/* ---- streams ---- */
struct item {
  void (*fn)(struct item*);
  int kernel;  /* takes FAKE_CUDA_KERNEL_US */
  void* p[3];
  long n;
  size_t bytes;
  struct item* next;
};
struct stream {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct item *head, *tail;
  int busy, stop, device;
  pthread_t thread;
};

static long kernel_us(void) {
  const char* v = getenv("FAKE_CUDA_KERNEL_US");
  return v ? atol(v) : 1000;
}

static void sleep_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

static void* stream_main(void* arg) {
  struct stream* s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    struct item* it = s->head;
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    s->busy = 1;
    pthread_mutex_unlock(&s->mu);
    if (it->kernel) sleep_us(kernel_us());
    it->fn(it);
    free(it);
    pthread_mutex_lock(&s->mu);
    s->busy = 0;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static struct stream* new_stream(int device) {
  struct stream* s = calloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->device = device;
  pthread_create(&s->thread, NULL, stream_main, s);
  return s;
}

/* The legacy default stream (a null cudaStream_t), one per device. */
static struct stream* default_streams[FAKE_CUDA_DEVICES + 1];
static pthread_mutex_t default_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stream* resolve(void* handle) {
  if (handle) return handle;
  pthread_mutex_lock(&default_mu);
  if (!default_streams[current_device]) default_streams[current_device] = new_stream(current_device);
  struct stream* s = default_streams[current_device];
  pthread_mutex_unlock(&default_mu);
  return s;
}

static void push(void* handle, struct item* it) {
  struct stream* s = resolve(handle);
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static struct item* new_item(void (*fn)(struct item*), int kernel) {
  struct item* it = calloc(1, sizeof *it);
  it->fn = fn;
  it->kernel = kernel;
  return it;
}

static void drain(struct stream* s) {
  pthread_mutex_lock(&s->mu);
  while (s->head || s->busy) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

int cudaGetDeviceCount(int* count) { CALL(); *count = FAKE_CUDA_DEVICES; return Success; }
int cudaGetDevice(int* device) { CALL(); *device = current_device; return Success; }
int cudaSetDevice(int device) {
  CALL();
  if (device < 0 || device >= FAKE_CUDA_DEVICES) return InvalidDevice;
  current_device = device;
  return Success;
}
int cudaStreamCreateWithFlags(void** stream, unsigned flags) {
  CALL();
  *stream = new_stream(current_device);
  return Success;
}
int cudaStreamDestroy(void* handle) {
  CALL();
  struct stream* s = handle;
  drain(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  free(s);
  return Success;
}
int cudaStreamSynchronize(void* stream) { CALL(); drain(resolve(stream)); return Success; }

/* ---- events ---- */
/* Each record is a position of its own: a wait queued after record n waits
 * for record n, even if the event is recorded again (elsewhere) meanwhile,
 * as in CUDA; so records still queued are kept, not just a count. */
struct event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long recorded;
  long* queued;  /* records not run yet */
  int nqueued, cap;
};

static int still_queued(struct event* e, long n) {
  for (int i = 0; i < e->nqueued; ++i) {
    if (e->queued[i] == n) return 1;
  }
  return 0;
}

static void complete_event(struct item* it) {
  struct event* e = it->p[0];
  pthread_mutex_lock(&e->mu);
  for (int i = 0; i < e->nqueued; ++i) {
    if (e->queued[i] == it->n) e->queued[i--] = e->queued[--e->nqueued];
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void wait_event(struct item* it) {
  struct event* e = it->p[0];
  pthread_mutex_lock(&e->mu);
  while (still_queued(e, it->n)) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

#define MAX_WAITS 65536
static void* waiting_streams[MAX_WAITS];
static void* waited_events[MAX_WAITS];
static atomic_long waits;

int cudaEventCreateWithFlags(void** event, unsigned flags) {
  CALL();
  struct event* e = calloc(1, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *event = e;
  return Success;
}
int cudaEventDestroy(void* event) { CALL(); return Success; /* queued work may still name it */ }
int cudaEventRecord(void* event, void* stream) {
  CALL();
  atomic_fetch_add(&records, 1);
  struct event* e = event;
  struct item* it = new_item(complete_event, 0);
  it->p[0] = e;
  pthread_mutex_lock(&e->mu);
  it->n = ++e->recorded;
  if (e->nqueued == e->cap) {
    e->cap = e->cap ? 2 * e->cap : 4;
    e->queued = realloc(e->queued, e->cap * sizeof *e->queued);
  }
  e->queued[e->nqueued++] = it->n;
  pthread_mutex_unlock(&e->mu);
  push(stream, it);
  return Success;
}
int cudaStreamWaitEvent(void* stream, void* event, unsigned flags) {
  CALL();
  long i = atomic_fetch_add(&waits, 1);
  if (i < MAX_WAITS) {
    waiting_streams[i] = stream;
    waited_events[i] = event;
  }
  struct event* e = event;
  struct item* it = new_item(wait_event, 0);
  it->p[0] = e;
  pthread_mutex_lock(&e->mu);
  it->n = e->recorded;  /* the position recorded last, as CUDA does */
  pthread_mutex_unlock(&e->mu);
  push(stream, it);
  return Success;
}
int cudaEventQuery(void* event) {
  struct event* e = event;
  pthread_mutex_lock(&e->mu);
  int done = !still_queued(e, e->recorded);
  pthread_mutex_unlock(&e->mu);
  return done ? Success : NotReady;
}
int cudaEventSynchronize(void* event) {
  CALL();
  struct event* e = event;
  pthread_mutex_lock(&e->mu);
  while (still_queued(e, e->recorded)) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  return Success;
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

static int allocate(void** ptr, size_t bytes) {
  if (too_big(bytes) || !(*ptr = malloc(bytes ? bytes : 1))) {
    *ptr = NULL;
    return MemoryAllocation;
  }
  atomic_fetch_add(&live_allocations, 1);
  return Success;
}
int cudaMalloc(void** ptr, size_t bytes) { CALL(); return allocate(ptr, bytes); }
int cudaFree(void* ptr) {
  CALL();
  if (ptr) atomic_fetch_sub(&live_allocations, 1);
  free(ptr);
  return Success;
}
int cudaMallocAsync(void** ptr, size_t bytes, void* stream) { CALL(); return allocate(ptr, bytes); }
static void free_now(struct item* it) {
  atomic_fetch_sub(&live_allocations, 1);
  free(it->p[0]);
}
int cudaFreeAsync(void* ptr, void* stream) {
  CALL();
  if (!ptr) return Success;
  struct item* it = new_item(free_now, 0);
  it->p[0] = ptr;
  push(stream, it);
  return Success;
}
int cudaMallocHost(void** ptr, size_t bytes) {
  CALL();
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
  pthread_mutex_lock(&pinned_mu);
  for (int i = 0; i < MAX_PINNED; ++i) {
    if (pinned[i].at == ptr) pinned[i].at = NULL;
  }
  pthread_mutex_unlock(&pinned_mu);
  free(ptr);
  return Success;
}

static void copy_now(struct item* it) {
  memmove(it->p[0], it->p[1], it->bytes);
  if (it->n) free(it->p[1]);  /* a snapshot of pageable memory */
}
int cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  CALL();
  if (kind >= 0 && kind < 5) atomic_fetch_add(&copies_by_kind[kind], 1);
  if (kind == 2 && !is_pinned(dst)) {  /* into pageable memory: synchronous */
    drain(resolve(stream));
    memmove(dst, src, bytes);
    return Success;
  }
  struct item* it = new_item(copy_now, 1);
  it->p[0] = dst;
  it->p[1] = (void*)src;
  it->bytes = bytes;
  if (kind == 1 && !is_pinned(src)) {  /* from pageable memory: staged at call time */
    it->p[1] = malloc(bytes ? bytes : 1);
    memcpy(it->p[1], src, bytes);
    it->n = 1;
  }
  push(stream, it);
  return Success;
}
const char* cudaGetErrorString(int error) {
  switch (error) {
    case MemoryAllocation: return "out of memory";
    case InvalidDevice: return "invalid device ordinal";
    case NotReady: return "device not ready";
    default: return "fake CUDA error";
  }
}

/* ---- for the fake NCCL ---- */
static void run_launched(struct item* it) { ((void (*)(void*))it->p[0])(it->p[1]); }
/* Queues fn(arg) on `stream` as a kernel. */
void fake_cuda_launch(void* stream, void (*fn)(void*), void* arg) {
  struct item* it = new_item(run_launched, 1);
  it->p[0] = (void*)fn;
  it->p[1] = arg;
  push(stream, it);
}
int fake_cuda_current_device(void) { return current_device; }

/* ---- for the tests ---- */
long fake_cuda_calls(void) { return atomic_load(&calls); }
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

/* A long framework kernel: queued on `stream`, it runs for `us` microseconds
 * and then writes `value` into `count` floats at `dst` (a later layer of
 * backward overwriting memory, as seen from an earlier collective). */
static void fill_later(struct item* it) {
  sleep_us(it->n);
  float* dst = it->p[0];
  float value = *(float*)&it->p[1];
  for (size_t i = 0; i < it->bytes; ++i) dst[i] = value;
}
void fake_cuda_fill_later(void* stream, float* dst, long count, float value, long us) {
  struct item* it = new_item(fill_later, 0);
  it->p[0] = dst;
  memcpy(&it->p[1], &value, sizeof value);
  it->n = us;
  it->bytes = (size_t)count;
  push(stream, it);
}
