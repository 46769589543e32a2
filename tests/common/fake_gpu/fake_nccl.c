/* A stand-in for libnccl.so.2 on machines without a GPU, where "device"
 * memory is host memory (fake_cudart.c). Ranks are processes on one machine
 * that meet in a POSIX shared-memory segment named by the unique id. Like the
 * real NCCL, a collective is queued on the caller's CUDA stream
 * (fake_cuda_enqueue_kernel, which also checks its accesses for races: send
 * buffers are read, receive buffers written) and runs when the stream reaches
 * it: it copies this rank's input into its slot, waits at a barrier until
 * every rank's stream has reached the collective, computes its result from
 * all slots and waits again. So a rank that never gets there (dead, or
 * failed) leaves its peers' streams spinning until they call ncclCommAbort,
 * as on a GPU. Also as in NCCL:
 *  - ncclCommInitRankConfig with blocking=0 returns ncclInProgress and
 *    finishes on its own thread (poll ncclCommGetAsyncError); two ranks of a
 *    communicator on one physical GPU of one host (HVDLITE_HOSTNAME, else
 *    gethostname; CUDA_VISIBLE_DEVICES and FAKE_CUDA_MIG as fake_cudart.c
 *    reads them) are refused ("duplicate GPU"); creating a communicator creates the
 *    current device's CUDA context;
 *  - ncclCommFinalize waits until every kernel queued on the communicator has
 *    run: a blocking communicator at once, a non-blocking one returns
 *    ncclInProgress and completes on a thread of its own;
 *  - ncclCommAbort may be called from any thread at any time, even while a
 *    creation, an enqueue or a finalize is in progress (reference counts).
 * For the tests: fake_nccl_finalized() counts ncclCommFinalize calls,
 * fake_nccl_busy_finalizes() those made while kernels of the communicator
 * were still queued (legal in NCCL, but hvdlite finalizes only once every
 * rank said its kernels finished: Note [Failing, not hanging]), and
 * fake_nccl_unfinalized_destroys() ncclCommDestroy of a communicator that was
 * created and never finalized; calling NCCL on a communicator that still
 * reports ncclInProgress (anything but ncclCommGetAsyncError and
 * ncclCommAbort) is misuse: it is recorded (fake_nccl_misuse_report), and a
 * collective so called is refused with ncclInvalidUsage.
 * Environment, read when a communicator is created:
 * Like NCCL before 2.29.7 (FAKE_NCCL_VERSION < 22907; the default), a
 * premultiplied sum on a 1-rank communicator leaves the last elements of a
 * count its blocks do not split evenly unwritten (one_rank_written below).
 * FAKE_NCCL_FAIL_AFTER=n: the communicator's (n+1)-th collective raises an
 * asynchronous error (ncclRemoteError) instead of running, and its stream
 * hangs like a real one until aborted;
 * FAKE_NCCL_HANG_AFTER=n: it hangs without an error (a stuck peer);
 * FAKE_NCCL_INPROGRESS=1 (or a number of milliseconds, 3 for "1"): on a
 * non-blocking communicator every collective and group end returns
 * ncclInProgress and is queued on the stream by a helper thread that long
 * later, when the communicator's async error turns from ncclInProgress to
 * ncclSuccess (as NCCL may do). A test that must see the in-progress state
 * on a loaded machine asks for a long delay.
 * Small tensors only (SLOT_BYTES). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef FAKE_NCCL_VERSION
#define FAKE_NCCL_VERSION 22003
#endif
#define MAX_RANKS 8
#define SLOT_BYTES (4u << 20)
#define FIRST_CUSTOM_OP 5
enum { Success = 0, UnhandledCudaError = 1, SystemError = 2, InternalError = 3, InvalidArgument = 4, InvalidUsage = 5,
       RemoteError = 6, InProgress = 7 };
enum { Sum, Prod, Max, Min };
enum { Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16 };
static const size_t kSize[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

typedef struct { char internal[128]; } ncclUniqueId;
struct shared {
  atomic_int arrived;
  atomic_int generation;
  int devices[MAX_RANKS];
  char hosts[MAX_RANKS][64];
  unsigned char slots[MAX_RANKS][SLOT_BYTES];
};
struct comm {
  struct shared* s;
  int rank, n, device;
  int blocking;
  long inprogress_ms;  /* FAKE_NCCL_INPROGRESS; 0: enqueues complete at once */
  atomic_int refs;      /* the owner, its helper threads, each queued kernel */
  atomic_int aborted;
  atomic_int async_error;
  atomic_int created, finalized;
  _Atomic(const char*) in_progress; /* what the last ncclInProgress was for */
  pthread_mutex_t mu;   /* pending: kernels queued, not yet run */
  pthread_cond_t cv;
  int pending;
  long collectives, fail_after, hang_after;
  ncclUniqueId id;
};

static double scalars[4096];
static atomic_int ops_created, ops_destroyed;
static atomic_long calls;
static atomic_int last_comm_device = -1;
#define CALL() atomic_fetch_add(&calls, 1)

static void release(struct comm* c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  if (c->s) munmap(c->s, sizeof(struct shared));
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

/* ---- misuse: calls on a communicator that still reports ncclInProgress ---- */
#define MAX_MISUSES 32
static char* misuses[MAX_MISUSES];
static atomic_int misuse_count;
static pthread_mutex_t misuse_mu = PTHREAD_MUTEX_INITIALIZER;

static int misused(struct comm* c, const char* call) {
  if (atomic_load(&c->async_error) != InProgress) return 0;
  char text[512];
  snprintf(text, sizeof text,
           "%s on communicator %p (rank %d of %d) while it still reports ncclInProgress (from %s): poll "
           "ncclCommGetAsyncError until it returns ncclSuccess before calling NCCL on it again",
           call, (void*)c, c->rank, c->n, c->in_progress ? c->in_progress : "?");
  pthread_mutex_lock(&misuse_mu);
  int i = atomic_fetch_add(&misuse_count, 1);
  if (i < MAX_MISUSES) misuses[i] = strdup(text);
  pthread_mutex_unlock(&misuse_mu);
  return 1;
}

/* Turns a pending ncclInProgress into `result`, unless an error came first. */
static void complete(struct comm* c, int result) {
  int expected = InProgress;
  atomic_compare_exchange_strong(&c->async_error, &expected, result);
}

/* A non-blocking call's work, on a thread of its own: c reports
 * ncclInProgress (from `call`) until fn(arg) completes it; fn releases the
 * reference to c taken here. */
static int start_in_progress(struct comm* c, const char* call, void* (*fn)(void*), void* arg) {
  c->in_progress = call;
  atomic_store(&c->async_error, InProgress);
  atomic_fetch_add(&c->refs, 1);
  pthread_t thread;
  pthread_create(&thread, NULL, fn, arg);
  pthread_detach(thread);
  return InProgress;
}

/* Every rank's stream waits here; as on a GPU it spins (politely) until all
 * arrive, or until this rank aborts the communicator. */
static int barrier(struct comm* c) {
  int gen = atomic_load(&c->s->generation);
  if (atomic_fetch_add(&c->s->arrived, 1) == c->n - 1) {
    atomic_store(&c->s->arrived, 0);
    atomic_fetch_add(&c->s->generation, 1);
    return Success;
  }
  struct timespec pause = {0, 20000}; /* backs off to 1 ms: a stuck peer costs little CPU */
  while (atomic_load(&c->s->generation) == gen) {
    if (atomic_load(&c->aborted)) return SystemError;
    nanosleep(&pause, NULL);
    if (pause.tv_nsec < 1000000) pause.tv_nsec *= 2;
  }
  return Success;
}

/* The fake CUDA runtime hvdlite loaded (the same file, so the same copy). */
struct fake_access { const void* p; size_t bytes; int write; const char* op; }; /* as fake_cudart.c's */
static int (*enqueue_kernel)(void* stream, const char* name, void (*run)(void*), void (*finished)(void*),
                             void (*drop)(void*), void* arg, const struct fake_access* accesses, int n,
                             int* captured);
static int (*current_device)(void);
static int (*physical_gpu)(int);
static int (*need_context)(const char* call);
static void* (*host_save)(void);
static void (*host_adopt)(void*);
static int cuda(void) {
  if (enqueue_kernel) return 1;
  const char* path = getenv("HVDLITE_CUDART_LIBRARY");
  void* lib = dlopen(path ? path : "libcudart.so.12", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen(path ? path : "libcudart.so.12", RTLD_NOW);
  if (!lib) return 0;
  current_device = (int (*)(void))dlsym(lib, "fake_cuda_current_device");
  physical_gpu = (int (*)(int))dlsym(lib, "fake_cuda_physical_gpu");
  need_context = (int (*)(const char*))dlsym(lib, "fake_cuda_need_context");
  host_save = (void* (*)(void))dlsym(lib, "fake_cuda_host_save");
  host_adopt = (void (*)(void*))dlsym(lib, "fake_cuda_host_adopt");
  *(void**)&enqueue_kernel = dlsym(lib, "fake_cuda_enqueue_kernel");
  return enqueue_kernel && current_device && physical_gpu && need_context && host_save && host_adopt;
}

static uint16_t float_to_half(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000, exp = (u >> 23) & 0xff, man = u & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e), h = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13), rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return (uint16_t)h;
}
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0) {
    if (!man) u = sign;
    else {
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; --exp; }
      u = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000 | (man << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f; memcpy(&f, &u, 4); return f;
}
static float bf16_to_float(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t float_to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }

static double load(const void* p, int t, size_t i) {
  switch (t) {
    case Int8: return ((const int8_t*)p)[i];
    case Uint8: return ((const uint8_t*)p)[i];
    case Int32: return ((const int32_t*)p)[i];
    case Uint32: return ((const uint32_t*)p)[i];
    case Int64: return (double)((const int64_t*)p)[i];
    case Uint64: return (double)((const uint64_t*)p)[i];
    case Float32: return ((const float*)p)[i];
    case Float64: return ((const double*)p)[i];
    case Float16: return half_to_float(((const uint16_t*)p)[i]);
    case Bfloat16: return bf16_to_float(((const uint16_t*)p)[i]);
  }
  return 0;
}
static void store(void* p, int t, size_t i, double v) {
  switch (t) {
    case Int8: ((int8_t*)p)[i] = (int8_t)v; break;
    case Uint8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case Int32: ((int32_t*)p)[i] = (int32_t)v; break;
    case Uint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    case Int64: ((int64_t*)p)[i] = (int64_t)v; break;
    case Uint64: ((uint64_t*)p)[i] = (uint64_t)v; break;
    case Float32: ((float*)p)[i] = (float)v; break;
    case Float64: ((double*)p)[i] = v; break;
    case Float16: ((uint16_t*)p)[i] = float_to_half((float)v); break;
    case Bfloat16: ((uint16_t*)p)[i] = float_to_bf16((float)v); break;
  }
}

/* My input into my slot; a premultiplied sum scales it on the way. */
static int put(struct comm* c, const void* send, size_t count, int t, int op) {
  if (t < 0 || t > Bfloat16) return InvalidArgument;
  if (count * kSize[t] > SLOT_BYTES) return InvalidUsage;
  unsigned char* slot = c->s->slots[c->rank];
  if (op < FIRST_CUSTOM_OP) {
    memcpy(slot, send, count * kSize[t]);
  } else {
    for (size_t i = 0; i < count; ++i) store(slot, t, i, load(send, t, i) * scalars[op - FIRST_CUSTOM_OP]);
  }
  return Success;
}

/* recv[i] = op over ranks of slot[r][first + i]. */
static void combine(struct comm* c, void* recv, size_t first, size_t count, int t, int op) {
  int base = op >= FIRST_CUSTOM_OP ? Sum : op;
  for (size_t i = 0; i < count; ++i) {
    double acc = load(c->s->slots[0], t, first + i);
    for (int r = 1; r < c->n; ++r) {
      double v = load(c->s->slots[r], t, first + i);
      if (base == Sum) acc += v;
      else if (base == Prod) acc *= v;
      else if (base == Max) acc = v > acc ? v : acc;
      else acc = v < acc ? v : acc;
    }
    store(recv, t, i, acc);
  }
}

/* Deferred work of a group, run in call order at ncclGroupEnd. */
enum { OpAllReduce, OpReduce, OpReduceScatter, OpBroadcast, OpAllGather, OpSend, OpRecv };
struct work { int kind; const void* send; void* recv; size_t count; int type, op, root; struct comm* c; };
static __thread struct work queue[1024];
static __thread int queued = 0, group_depth = 0;

/* NCCL before 2.29.7 (NVIDIA/nccl#1950): a premultiplied sum on a 1-rank
 * communicator runs a kernel of min(32, ceil(bytes / 16 KiB)) blocks, each
 * taking floor(count / blocks) elements rounded up to 16 bytes, so the last
 * elements of a count that does not split evenly are never written. How many
 * it does write, as that NCCL would. */
static size_t one_rank_written(struct comm* c, size_t count, int t, int op) {
  if (FAKE_NCCL_VERSION >= 22907 || c->n != 1 || op < FIRST_CUSTOM_OP) return count;
  size_t esize = kSize[t], per_pack = 16 / esize;
  size_t blocks = (count * esize + (16u << 10) - 1) / (16u << 10);
  if (blocks > 32) blocks = 32;
  if (blocks == 0) return count;
  size_t per_block = (count / blocks + per_pack - 1) / per_pack * per_pack;
  return per_block * blocks < count ? per_block * blocks : count;
}

static int run_collective(struct work* w) {
  struct comm* c = w->c;
  size_t esize = kSize[w->type];
  int rc = Success;
  switch (w->kind) {
    case OpAllReduce:
    case OpReduce:
      rc = put(c, w->send, w->count, w->type, w->op);
      if (barrier(c)) return SystemError;
      if (rc == Success && (w->kind == OpAllReduce || c->rank == w->root)) {
        combine(c, w->recv, 0, one_rank_written(c, w->count, w->type, w->op), w->type, w->op);
      }
      break;
    case OpReduceScatter:
      rc = put(c, w->send, w->count * c->n, w->type, w->op);
      if (barrier(c)) return SystemError;
      if (rc == Success) {
        combine(c, w->recv, c->rank * w->count, one_rank_written(c, w->count, w->type, w->op), w->type, w->op);
      }
      break;
    case OpBroadcast:
      if (c->rank == w->root) rc = put(c, w->send, w->count, w->type, 0);
      if (barrier(c)) return SystemError;
      memmove(w->recv, c->s->slots[w->root], w->count * esize);
      break;
    case OpAllGather:
      rc = put(c, w->send, w->count, w->type, 0);
      if (barrier(c)) return SystemError;
      for (int r = 0; r < c->n; ++r) memcpy((char*)w->recv + r * w->count * esize, c->s->slots[r], w->count * esize);
      break;
  }
  /* nobody writes a slot again before everyone has read it */
  return barrier(c) ? SystemError : rc;
}

/* Sends of a group: [peer, bytes, data] records in my slot; each recv takes
 * the next record addressed to it from its peer's slot. */
static int run_point_to_point(struct comm* c, struct work* ws, int n) {
  size_t used = sizeof(int);
  int records = 0;
  unsigned char* slot = c->s->slots[c->rank];
  for (int i = 0; i < n; ++i) {
    if (ws[i].kind != OpSend) continue;
    size_t bytes = ws[i].count * kSize[ws[i].type];
    if (used + sizeof(int) + sizeof(size_t) + bytes > SLOT_BYTES) return InvalidUsage;
    memcpy(slot + used, &ws[i].root, sizeof(int));
    memcpy(slot + used + sizeof(int), &bytes, sizeof(size_t));
    memcpy(slot + used + sizeof(int) + sizeof(size_t), ws[i].send, bytes);
    used += sizeof(int) + sizeof(size_t) + bytes;
    ++records;
  }
  memcpy(slot, &records, sizeof(int));
  if (barrier(c)) return SystemError;
  int rc = Success;
  size_t cursor[MAX_RANKS];
  int seen[MAX_RANKS];
  for (int r = 0; r < MAX_RANKS; ++r) cursor[r] = sizeof(int), seen[r] = 0;
  for (int i = 0; i < n && rc == Success; ++i) {
    if (ws[i].kind != OpRecv) continue;
    int peer = ws[i].root, total, to;
    unsigned char* theirs = c->s->slots[peer];
    memcpy(&total, theirs, sizeof(int));
    size_t bytes = 0;
    for (;;) {
      if (seen[peer] == total) { rc = InvalidUsage; break; } /* no matching send */
      memcpy(&to, theirs + cursor[peer], sizeof(int));
      memcpy(&bytes, theirs + cursor[peer] + sizeof(int), sizeof(size_t));
      size_t data = cursor[peer] + sizeof(int) + sizeof(size_t);
      cursor[peer] = data + bytes;
      ++seen[peer];
      if (to != c->rank) continue;
      if (bytes != ws[i].count * kSize[ws[i].type]) rc = InvalidUsage;
      else memcpy(ws[i].recv, theirs + data, bytes);
      break;
    }
  }
  return barrier(c) ? SystemError : rc;
}

/* A queued kernel: the works of one call (or of one group), run in order
 * when the stream reaches them; a graph that captured it may run it again. */
struct kernel { struct comm* c; int counted; int n; struct work works[]; };

static void run_kernel(void* arg) {
  struct kernel* k = arg;
  struct comm* c = k->c;
  int error = atomic_load(&c->async_error); /* InProgress: an enqueue or finalize not yet complete */
  if (!atomic_load(&c->aborted) && (error == Success || error == InProgress)) {
    int rc = Success;
    if (c->fail_after >= 0 && c->collectives >= c->fail_after) {
      atomic_store(&c->async_error, RemoteError);
      while (!atomic_load(&c->aborted)) usleep(1000);  /* hangs, as a real stream does */
    } else if (c->hang_after >= 0 && c->collectives >= c->hang_after) {
      while (!atomic_load(&c->aborted)) usleep(1000);  /* stuck without an error */
    } else {
      ++c->collectives;
      int has_p2p = 0;
      for (int i = 0; i < k->n && rc == Success; ++i) {
        if (k->works[i].kind == OpSend || k->works[i].kind == OpRecv) has_p2p = 1;
        else rc = run_collective(&k->works[i]);
      }
      if (has_p2p && rc == Success) rc = run_point_to_point(c, k->works, k->n);
      if (rc != Success && !atomic_load(&c->aborted)) atomic_store(&c->async_error, rc);
    }
  }
}

/* Counted only once the stream is past the kernel: ncclCommFinalize returns
 * when it is no longer pending, and the caller may then find the stream idle. */
static void kernel_finished(void* arg) {
  struct kernel* k = arg;
  struct comm* c = k->c;
  if (k->counted) {
    pthread_mutex_lock(&c->mu);
    --c->pending;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
}

static void drop_kernel(void* arg) {
  struct kernel* k = arg;
  release(k->c);
  free(k);
}

static const char* kOpNames[] = {"ncclAllReduce", "ncclReduce", "ncclReduceScatter", "ncclBroadcast",
                                 "ncclAllGather", "ncclSend", "ncclRecv"};

/* What one work reads and writes, for the race checks (fake_cudart.c). */
static int accesses_of(const struct work* w, struct fake_access* out) {
  if (w->type < 0 || w->type > Bfloat16) return 0;
  size_t bytes = w->count * kSize[w->type], n = (size_t)w->c->n;
  const char* name = kOpNames[w->kind];
  int k = 0;
  switch (w->kind) {
    case OpAllReduce: out[k++] = (struct fake_access){w->send, bytes, 0, name};
                      out[k++] = (struct fake_access){w->recv, bytes, 1, name}; break;
    case OpReduce: out[k++] = (struct fake_access){w->send, bytes, 0, name};
                   if (w->c->rank == w->root) out[k++] = (struct fake_access){w->recv, bytes, 1, name};
                   break;
    case OpReduceScatter: out[k++] = (struct fake_access){w->send, bytes * n, 0, name};
                          out[k++] = (struct fake_access){w->recv, bytes, 1, name}; break;
    case OpBroadcast: if (w->c->rank == w->root) out[k++] = (struct fake_access){w->send, bytes, 0, name};
                      out[k++] = (struct fake_access){w->recv, bytes, 1, name}; break;
    case OpAllGather: out[k++] = (struct fake_access){w->send, bytes, 0, name};
                      out[k++] = (struct fake_access){w->recv, bytes * n, 1, name}; break;
    case OpSend: out[k++] = (struct fake_access){w->send, bytes, 0, name}; break;
    case OpRecv: out[k++] = (struct fake_access){w->recv, bytes, 1, name}; break;
  }
  return k;
}

/* Queues the works on `stream` now. */
static int launch(struct work* works, int n, void* stream) {
  struct comm* c = works[0].c;
  struct kernel* k = malloc(sizeof *k + n * sizeof(struct work));
  k->c = c;
  k->counted = 1;
  k->n = n;
  memcpy(k->works, works, n * sizeof(struct work));
  struct fake_access* accesses = malloc(2 * n * sizeof *accesses);
  int naccesses = 0;
  for (int i = 0; i < n; ++i) naccesses += accesses_of(&works[i], accesses + naccesses);
  atomic_fetch_add(&c->refs, 1);
  pthread_mutex_lock(&c->mu);
  ++c->pending;
  pthread_mutex_unlock(&c->mu);
  int captured = 0;
  int rc = enqueue_kernel(stream, n == 1 ? kOpNames[works[0].kind] : "ncclGroupEnd", run_kernel, kernel_finished,
                          drop_kernel, k, accesses, naccesses, &captured);
  free(accesses);
  if (rc != Success || captured) { /* not queued to run (now): finalize need not wait for it */
    pthread_mutex_lock(&c->mu);
    --c->pending;
    pthread_mutex_unlock(&c->mu);
    if (captured) k->counted = 0;
  }
  return rc == Success ? Success : UnhandledCudaError;
}

/* FAKE_NCCL_INPROGRESS: the enqueue finishes on a helper thread, with what
 * the calling thread knew (its clock, its device: fake_cuda_host_save). */
struct deferred { struct comm* c; void* stream; void* host; int n; struct work works[]; };
static void* deferred_main(void* arg) {
  struct deferred* d = arg;
  long ms = d->c->inprogress_ms;
  struct timespec pause = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&pause, NULL);
  host_adopt(d->host);
  if (!atomic_load(&d->c->aborted)) complete(d->c, launch(d->works, d->n, d->stream));
  release(d->c);
  free(d);
  return NULL;
}

static int enqueue(struct work* works, int n, void* stream) {
  if (!cuda()) return SystemError;
  struct comm* c = works[0].c;
  if (atomic_load(&c->aborted)) return InvalidUsage;
  int error = atomic_load(&c->async_error);
  if (error != Success) return error;
  if (c->blocking || !c->inprogress_ms) return launch(works, n, stream);
  struct deferred* d = malloc(sizeof *d + n * sizeof(struct work));
  d->c = c;
  d->stream = stream;
  d->host = host_save();
  d->n = n;
  memcpy(d->works, works, n * sizeof(struct work));
  return start_in_progress(c, n == 1 ? kOpNames[works[0].kind] : "ncclGroupEnd", deferred_main, d);
}

static __thread void* group_stream;
static int submit(struct work w, void* stream) {
  CALL();
  if (misused(w.c, kOpNames[w.kind])) return InvalidUsage;
  if (group_depth == 0) return enqueue(&w, 1, stream);
  if (queued == 1024) return InvalidUsage;
  group_stream = stream;
  queue[queued++] = w;
  return Success;
}

int ncclGetVersion(int* version) { *version = FAKE_NCCL_VERSION; return Success; }
int ncclGetUniqueId(ncclUniqueId* id) {
  CALL();
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "/hvdlite-fake-nccl-%d-%ld", (int)getpid(), (long)now.tv_nsec);
  return Success;
}

/* Maps the segment, meets the other ranks, checks for duplicate GPUs. */
static int init(struct comm* c) {
  int fd = shm_open(c->id.internal, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return SystemError;
  if (ftruncate(fd, sizeof(struct shared)) != 0) { close(fd); return SystemError; }
  void* map = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return SystemError;
  c->s = map;
  c->s->devices[c->rank] = physical_gpu(c->device);
  const char* host = getenv("HVDLITE_HOSTNAME");
  if (host && *host) snprintf(c->s->hosts[c->rank], 64, "%s", host);
  else gethostname(c->s->hosts[c->rank], 63);
  int met = barrier(c) == Success;
  if (c->rank == 0) shm_unlink(c->id.internal); /* everyone has it mapped (or gave up): the name can go */
  if (!met) return SystemError;
  for (int r = 0; r < c->n; ++r) {
    if (r != c->rank && c->s->devices[r] == c->s->devices[c->rank] &&
        strcmp(c->s->hosts[r], c->s->hosts[c->rank]) == 0) {
      fprintf(stderr, "fake NCCL: Duplicate GPU detected: rank %d and rank %d both on physical GPU %d of host %s\n",
              c->rank, r, c->s->devices[r], c->s->hosts[r]);
      return InvalidUsage;
    }
  }
  return Success;
}

static void* init_main(void* arg) {
  struct comm* c = arg;
  int rc = init(c);
  atomic_store(&c->created, rc == Success);
  atomic_store(&c->async_error, rc);
  release(c);
  return NULL;
}

static struct comm* new_comm(int nranks, ncclUniqueId id, int rank) {
  struct comm* c = calloc(1, sizeof *c);
  c->rank = rank;
  c->n = nranks;
  c->id = id;
  c->device = current_device();
  need_context("ncclCommInitRank");
  atomic_store(&last_comm_device, c->device);
  atomic_store(&c->refs, 1);
  c->blocking = 1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  const char* inprogress = getenv("FAKE_NCCL_INPROGRESS");
  c->inprogress_ms = inprogress && *inprogress ? atol(inprogress) : 0;
  if (c->inprogress_ms == 1) c->inprogress_ms = 3;
  const char* fail = getenv("FAKE_NCCL_FAIL_AFTER");
  c->fail_after = fail && *fail ? atol(fail) : -1;
  const char* hang = getenv("FAKE_NCCL_HANG_AFTER");
  c->hang_after = hang && *hang ? atol(hang) : -1;
  return c;
}

int ncclCommInitRank(struct comm** out, int nranks, ncclUniqueId id, int rank) {
  CALL();
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return InvalidArgument;
  if (!cuda()) return SystemError;
  struct comm* c = new_comm(nranks, id, rank);
  int rc = init(c);
  if (rc != Success) { release(c); return rc; }
  atomic_store(&c->created, 1);
  *out = c;
  return Success;
}

/* ncclConfig_t's leading fields (nccl.h, NCCL >= 2.14). */
struct config { size_t size; unsigned magic, version; int blocking; };
int ncclCommInitRankConfig(struct comm** out, int nranks, ncclUniqueId id, int rank, struct config* config) {
  if (!config || config->magic != 0xcafebeef) return InvalidArgument;
  if (config->blocking != 0) return ncclCommInitRank(out, nranks, id, rank);
  CALL();
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return InvalidArgument;
  if (!cuda()) return SystemError;
  struct comm* c = new_comm(nranks, id, rank);
  c->blocking = 0;
  *out = c;
  return start_in_progress(c, "ncclCommInitRankConfig", init_main, c);
}
int ncclCommGetAsyncError(struct comm* c, int* error) { /* not counted: hvdlite's watchdog polls it */
  *error = atomic_load(&c->async_error);
  return Success;
}
static atomic_int destroyed, aborted, finalized, busy_finalizes, unfinalized_destroys;

/* Until every kernel queued on c has run, or c is aborted. */
static void wait_idle(struct comm* c) {
  pthread_mutex_lock(&c->mu);
  while (c->pending > 0 && !atomic_load(&c->aborted)) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 10000000; /* ncclCommAbort does not signal: look again */
    if (until.tv_nsec >= 1000000000) until.tv_sec += 1, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&c->cv, &c->mu, &until);
  }
  pthread_mutex_unlock(&c->mu);
}

static void* finalize_main(void* arg) {
  struct comm* c = arg;
  wait_idle(c);
  complete(c, Success);
  release(c);
  return NULL;
}

int ncclCommFinalize(struct comm* c) {
  CALL();
  if (misused(c, "ncclCommFinalize")) return InvalidUsage;
  atomic_fetch_add(&finalized, 1);
  atomic_store(&c->finalized, 1);
  pthread_mutex_lock(&c->mu);
  if (c->pending > 0) atomic_fetch_add(&busy_finalizes, 1);
  pthread_mutex_unlock(&c->mu);
  int error = atomic_load(&c->async_error);
  if (error != Success) return error;
  if (c->blocking) {
    wait_idle(c);
    return atomic_load(&c->async_error);
  }
  return start_in_progress(c, "ncclCommFinalize", finalize_main, c);
}
int ncclCommDestroy(struct comm* c) {
  CALL();
  misused(c, "ncclCommDestroy"); /* recorded; it is destroyed all the same */
  atomic_fetch_add(&destroyed, 1);
  if (atomic_load(&c->created) && !atomic_load(&c->finalized)) atomic_fetch_add(&unfinalized_destroys, 1);
  release(c);
  return Success;
}
/* Stops this rank's kernels on the communicator (they return at once) and frees it. */
int ncclCommAbort(struct comm* c) {
  CALL();
  atomic_fetch_add(&aborted, 1);
  atomic_store(&c->aborted, 1);
  release(c);
  return Success;
}
const char* ncclGetErrorString(int result) {
  switch (result) {
    case InvalidUsage: return "invalid usage (fake NCCL)";
    case RemoteError: return "remote process exited or there was a network error (fake NCCL)";
    case InProgress: return "NCCL operation in progress (fake NCCL)";
    default: return "fake NCCL error";
  }
}

int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, struct comm* c, void* st) {
  return submit((struct work){OpAllReduce, s, r, n, t, op, 0, c}, st);
}
int ncclReduce(const void* s, void* r, size_t n, int t, int op, int root, struct comm* c, void* st) {
  return submit((struct work){OpReduce, s, r, n, t, op, root, c}, st);
}
int ncclReduceScatter(const void* s, void* r, size_t n, int t, int op, struct comm* c, void* st) {
  return submit((struct work){OpReduceScatter, s, r, n, t, op, 0, c}, st);
}
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, struct comm* c, void* st) {
  return submit((struct work){OpBroadcast, s, r, n, t, 0, root, c}, st);
}
int ncclAllGather(const void* s, void* r, size_t n, int t, struct comm* c, void* st) {
  return submit((struct work){OpAllGather, s, r, n, t, 0, 0, c}, st);
}
int ncclSend(const void* s, size_t n, int t, int peer, struct comm* c, void* st) {
  return submit((struct work){OpSend, s, NULL, n, t, 0, peer, c}, st);
}
int ncclRecv(void* r, size_t n, int t, int peer, struct comm* c, void* st) {
  return submit((struct work){OpRecv, NULL, r, n, t, 0, peer, c}, st);
}
int ncclGroupStart(void) { CALL(); ++group_depth; return Success; }
int ncclGroupEnd(void) {
  CALL();
  if (--group_depth > 0) return Success;
  int n = queued;
  queued = 0;
  return n ? enqueue(queue, n, group_stream) : Success;
}
int ncclRedOpCreatePreMulSum(int* op, void* scalar, int type, int residence, struct comm* c) {
  CALL();
  if (misused(c, "ncclRedOpCreatePreMulSum")) return InvalidUsage;
  int i = atomic_load(&ops_created);
  if (residence != 1 || i == 4096) return InvalidArgument; /* host-immediate only */
  switch (type) {
    case Float32: scalars[i] = *(float*)scalar; break;
    case Float64: scalars[i] = *(double*)scalar; break;
    case Float16: scalars[i] = half_to_float(*(uint16_t*)scalar); break;
    case Bfloat16: scalars[i] = bf16_to_float(*(uint16_t*)scalar); break;
    default: return InvalidArgument;
  }
  atomic_fetch_add(&ops_created, 1);
  *op = FIRST_CUSTOM_OP + i;
  return Success;
}
int ncclRedOpDestroy(int op, struct comm* c) {
  CALL();
  if (misused(c, "ncclRedOpDestroy")) return InvalidUsage;
  atomic_fetch_add(&ops_destroyed, 1);
  return Success;
}

/* For the tests. */
int fake_nccl_ops_outstanding(void) { return atomic_load(&ops_created) - atomic_load(&ops_destroyed); }
long fake_nccl_calls(void) { return atomic_load(&calls); }
int fake_nccl_last_comm_device(void) { return atomic_load(&last_comm_device); }
int fake_nccl_aborted(void) { return atomic_load(&aborted); }
int fake_nccl_destroyed(void) { return atomic_load(&destroyed); }
int fake_nccl_finalized(void) { return atomic_load(&finalized); }
int fake_nccl_busy_finalizes(void) { return atomic_load(&busy_finalizes); }
int fake_nccl_unfinalized_destroys(void) { return atomic_load(&unfinalized_destroys); }
int fake_nccl_misuse_count(void) { return atomic_load(&misuse_count); }
/* Every recorded misuse (the first MAX_MISUSES), one per line. */
const char* fake_nccl_misuse_report(void) {
  static char text[MAX_MISUSES * 520 + 1];
  pthread_mutex_lock(&misuse_mu);
  text[0] = 0;
  int n = atomic_load(&misuse_count);
  for (int i = 0; i < n && i < MAX_MISUSES; ++i) {
    strcat(text, misuses[i]);
    strcat(text, "\n");
  }
  pthread_mutex_unlock(&misuse_mu);
  return text;
}
