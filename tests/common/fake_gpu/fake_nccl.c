/* A stand-in for libnccl.so.2 on machines without a GPU, where "device"
 * memory is host memory (fake_cudart.c). Ranks are processes on one machine
 * that meet in a POSIX shared-memory segment named by the unique id: each
 * collective copies every rank's input into its slot, waits at a barrier,
 * computes its own result from all slots, and waits again. Work runs at call
 * time (or at ncclGroupEnd inside a group), not on a stream. Enough to run
 * hvdlite's CUDA path on several ranks; small tensors only (SLOT_BYTES). */
#include <fcntl.h>
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
enum { Success = 0, SystemError = 2, InvalidArgument = 4, InvalidUsage = 5 };
enum { Sum, Prod, Max, Min };
enum { Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16 };
static const size_t kSize[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

typedef struct { char internal[128]; } ncclUniqueId;
struct shared {
  atomic_int arrived;
  atomic_int generation;
  unsigned char slots[MAX_RANKS][SLOT_BYTES];
};
struct comm { struct shared* s; int rank, n; };

static double scalars[4096];
static int ops_created = 0, ops_destroyed = 0;

static void barrier(struct comm* c) {
  int gen = atomic_load(&c->s->generation);
  if (atomic_fetch_add(&c->s->arrived, 1) == c->n - 1) {
    atomic_store(&c->s->arrived, 0);
    atomic_fetch_add(&c->s->generation, 1);
  } else {
    while (atomic_load(&c->s->generation) == gen) sched_yield();
  }
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
    case Bfloat16: ((uint16_t*)p)[i] = float_to_bf16((float)v); break;
  }
}

/* My input into my slot; a premultiplied sum scales it on the way. */
static int put(struct comm* c, const void* send, size_t count, int t, int op) {
  if (t < 0 || t > Bfloat16 || t == Float16) return InvalidArgument; /* float16 is not faked */
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
static struct work queue[1024];
static int queued = 0, group_depth = 0;

static int run_collective(struct work* w) {
  struct comm* c = w->c;
  size_t esize = kSize[w->type];
  int rc = Success;
  switch (w->kind) {
    case OpAllReduce:
    case OpReduce:
      rc = put(c, w->send, w->count, w->type, w->op);
      barrier(c);
      if (rc == Success && (w->kind == OpAllReduce || c->rank == w->root)) combine(c, w->recv, 0, w->count, w->type, w->op);
      break;
    case OpReduceScatter:
      rc = put(c, w->send, w->count * c->n, w->type, w->op);
      barrier(c);
      if (rc == Success) combine(c, w->recv, c->rank * w->count, w->count, w->type, w->op);
      break;
    case OpBroadcast:
      if (c->rank == w->root) rc = put(c, w->send, w->count, w->type, 0);
      barrier(c);
      memmove(w->recv, c->s->slots[w->root], w->count * esize);
      break;
    case OpAllGather:
      rc = put(c, w->send, w->count, w->type, 0);
      barrier(c);
      for (int r = 0; r < c->n; ++r) memcpy((char*)w->recv + r * w->count * esize, c->s->slots[r], w->count * esize);
      break;
  }
  barrier(c); /* nobody writes a slot again before everyone has read it */
  return rc;
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
  barrier(c);
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
  barrier(c);
  return rc;
}

static int submit(struct work w) {
  if (group_depth == 0) {
    if (w.kind == OpSend || w.kind == OpRecv) return run_point_to_point(w.c, &w, 1);
    return run_collective(&w);
  }
  if (queued == 1024) return InvalidUsage;
  queue[queued++] = w;
  return Success;
}

int ncclGetVersion(int* version) { *version = FAKE_NCCL_VERSION; return Success; }
int ncclGetUniqueId(ncclUniqueId* id) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "/hvdlite-fake-nccl-%d-%ld", (int)getpid(), (long)now.tv_nsec);
  return Success;
}
int ncclCommInitRank(struct comm** out, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return InvalidArgument;
  int fd = shm_open(id.internal, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return SystemError;
  if (ftruncate(fd, sizeof(struct shared)) != 0) { close(fd); return SystemError; }
  void* map = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return SystemError;
  struct comm* c = malloc(sizeof *c);
  c->s = map;
  c->rank = rank;
  c->n = nranks;
  barrier(c); /* everyone has it mapped: the name can go */
  if (rank == 0) shm_unlink(id.internal);
  *out = c;
  return Success;
}
int ncclCommDestroy(struct comm* c) { munmap(c->s, sizeof(struct shared)); free(c); return Success; }
int ncclCommAbort(struct comm* c) { return ncclCommDestroy(c); }
const char* ncclGetErrorString(int result) { return "fake NCCL error"; }

int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, struct comm* c, void* st) {
  return submit((struct work){OpAllReduce, s, r, n, t, op, 0, c});
}
int ncclReduce(const void* s, void* r, size_t n, int t, int op, int root, struct comm* c, void* st) {
  return submit((struct work){OpReduce, s, r, n, t, op, root, c});
}
int ncclReduceScatter(const void* s, void* r, size_t n, int t, int op, struct comm* c, void* st) {
  return submit((struct work){OpReduceScatter, s, r, n, t, op, 0, c});
}
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, struct comm* c, void* st) {
  return submit((struct work){OpBroadcast, s, r, n, t, 0, root, c});
}
int ncclAllGather(const void* s, void* r, size_t n, int t, struct comm* c, void* st) {
  return submit((struct work){OpAllGather, s, r, n, t, 0, 0, c});
}
int ncclSend(const void* s, size_t n, int t, int peer, struct comm* c, void* st) {
  return submit((struct work){OpSend, s, NULL, n, t, 0, peer, c});
}
int ncclRecv(void* r, size_t n, int t, int peer, struct comm* c, void* st) {
  return submit((struct work){OpRecv, NULL, r, n, t, 0, peer, c});
}
int ncclGroupStart(void) { ++group_depth; return Success; }
int ncclGroupEnd(void) {
  if (--group_depth > 0) return Success;
  int rc = Success, n = queued, has_p2p = 0;
  queued = 0;
  for (int i = 0; i < n; ++i) {
    if (queue[i].kind == OpSend || queue[i].kind == OpRecv) has_p2p = 1;
    else if (rc == Success) rc = run_collective(&queue[i]);
  }
  if (has_p2p && rc == Success) {
    struct comm* c = NULL;
    for (int i = 0; i < n && !c; ++i) if (queue[i].kind == OpSend || queue[i].kind == OpRecv) c = queue[i].c;
    rc = run_point_to_point(c, queue, n);
  }
  return rc;
}
int ncclRedOpCreatePreMulSum(int* op, void* scalar, int type, int residence, struct comm* c) {
  if (residence != 1 || ops_created == 4096) return InvalidArgument; /* host-immediate only */
  switch (type) {
    case Float32: scalars[ops_created] = *(float*)scalar; break;
    case Float64: scalars[ops_created] = *(double*)scalar; break;
    case Bfloat16: scalars[ops_created] = bf16_to_float(*(uint16_t*)scalar); break;
    default: return InvalidArgument;
  }
  *op = FIRST_CUSTOM_OP + ops_created++;
  return Success;
}
int ncclRedOpDestroy(int op, struct comm* c) { ++ops_destroyed; return Success; }

/* For the tests. */
int fake_nccl_ops_outstanding(void) { return ops_created - ops_destroyed; }
