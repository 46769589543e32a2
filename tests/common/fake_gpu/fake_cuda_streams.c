/* Streams of the fake CUDA runtime: each is a FIFO of operations run by a
 * thread of its own, and the place where ordering is decided.
 *
 * Note [Vector clocks]: ordering is decided when an operation is QUEUED,
 * never by when it happens to run, so a missing wait is reported on every
 * run, however the threads are scheduled (as compute-sanitizer's synccheck).
 * Each stream has a slot, and the slot number is that stream's component in
 * every vector clock. Each stream, each host thread and each event has a
 * clock: "everything I am ordered after".
 *  - Queuing an operation on stream S joins the calling thread's clock into
 *    S's (what the host did or learned before queueing comes first), then
 *    advances S's own component: the new value is the operation's position,
 *    (S, n).
 *  - cudaEventRecord(e, S) copies S's clock into e, per record;
 *    cudaStreamWaitEvent(S, e) joins e's last recorded clock into S's.
 *  - A host synchronisation joins into the calling thread's clock what it
 *    waited for: a stream's clock, an event's, every stream of the device.
 *  - The legacy default stream (null, cudaStreamLegacy) of a device is
 *    ordered after all earlier work of the device's blocking streams, and a
 *    blocking stream's operation after all earlier legacy-stream work: their
 *    clocks are joined on each operation, and the stream thread waits for
 *    those positions, as a GPU would (cudaStreamNonBlocking streams are not
 *    synchronised so).
 * An operation X with clock C is ordered after an earlier one at (S', n')
 * iff C[S'] >= n'. fake_cuda_races.c checks each access against the
 * accesses recorded before it.
 *
 * Each stream thread also waits, before running an item, for the positions
 * it depends on (an event wait, the legacy stream's implicit
 * synchronisation): slots count the positions that have run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;

void clock_join(vclock* into, const vclock* from) {
  for (int i = 0; i < MAX_STREAMS; ++i) {
    if (from->c[i] > into->c[i]) into->c[i] = from->c[i];
  }
}

void thread_name(char out[NAME_LEN]) {
  char name[16] = "?";
  pthread_getname_np(pthread_self(), name, sizeof name);
  if (syscall(SYS_gettid) == getpid()) snprintf(out, NAME_LEN, "%s (main)", name);
  else snprintf(out, NAME_LEN, "%s", name);
}

const char* join_lines(char* const* lines, const int* n, char** joined) {
  pthread_mutex_lock(&fake_mu);
  size_t bytes = 1;
  for (int i = 0; i < *n; ++i) bytes += strlen(lines[i]) + 1;
  free(*joined);
  *joined = calloc(1, bytes);
  for (int i = 0; i < *n; ++i) {
    strcat(*joined, lines[i]);
    strcat(*joined, "\n");
  }
  pthread_mutex_unlock(&fake_mu);
  return *joined;
}

/* ---- host threads' clocks ---- */
static pthread_key_t clock_key;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
static __thread vclock* my_clock;
static void make_key(void) { pthread_key_create(&clock_key, free); }
vclock* thread_clock(void) {
  if (!my_clock) {
    pthread_once(&clock_once, make_key);
    my_clock = calloc(1, sizeof *my_clock);
    pthread_setspecific(clock_key, my_clock); /* freed when the thread exits */
  }
  return my_clock;
}

/* ---- slots: a stream's clock component and the positions it has run ---- */
struct slot {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long done;
  struct stream* stream; /* NULL once destroyed */
  char label[96];
};
static struct slot slots[MAX_STREAMS];
static int used_slots;

/* A free slot; lock held. Past MAX_STREAMS streams a destroyed stream's slot
 * is reused and its positions continue, so the new stream looks ordered
 * after the old one's work: races between the two are missed then. */
static int stream_slot(void) {
  if (used_slots < MAX_STREAMS) {
    struct slot* s = &slots[used_slots];
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return used_slots++;
  }
  for (int i = 0; i < MAX_STREAMS; ++i) {
    if (!slots[i].stream) return i;
  }
  return -1;
}

int stream_count(void) { return used_slots; }
const char* stream_label(int sid) { return sid >= 0 && sid < used_slots ? slots[sid].label : "?"; }
struct stream* stream_of_slot(int sid) { return sid >= 0 && sid < used_slots ? slots[sid].stream : NULL; }
int stream_device(int sid) {
  struct stream* s = stream_of_slot(sid);
  return s ? s->device : -1;
}

long done_position(int sid) {
  struct slot* s = &slots[sid];
  pthread_mutex_lock(&s->mu);
  long done = s->done;
  pthread_mutex_unlock(&s->mu);
  return done;
}

void wait_position(int sid, long pos) {
  struct slot* s = &slots[sid];
  pthread_mutex_lock(&s->mu);
  while (s->done < pos) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

/* ---- operations ---- */
struct op* new_op(const char* name, void (*run)(struct op*), int kernel) {
  struct op* op = calloc(1, sizeof *op);
  op->name = name;
  op->run = run;
  op->kernel = kernel;
  atomic_store(&op->refs, 1);
  return op;
}

void op_add_access(struct op* op, const void* p, size_t bytes, int write, const char* access_name) {
  if (!p || !bytes) return;
  op->acc = realloc(op->acc, (op->nacc + 1) * sizeof *op->acc);
  op->acc[op->nacc++] = (struct access){p, bytes, write, access_name};
}

void unref_op(struct op* op) {
  if (atomic_fetch_sub(&op->refs, 1) != 1) return;
  if (op->drop) op->drop(op);
  free(op->acc);
  free(op);
}

/* ---- stream threads ---- */
struct dep { int sid; long pos; };
struct item {
  struct op* op;
  int sid;
  long pos;
  struct dep* deps;
  int ndeps;
  struct item* next;
};

static long kernel_us(void) {
  const char* v = getenv("FAKE_CUDA_KERNEL_US");
  return v ? atol(v) : 1000;
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
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < it->ndeps; ++i) wait_position(it->deps[i].sid, it->deps[i].pos);
    if (it->op->kernel) {
      long us = kernel_us();
      struct timespec t = {us / 1000000, (us % 1000000) * 1000};
      nanosleep(&t, NULL);
    }
    if (it->op->run) it->op->run(it->op);
    struct slot* slot = &slots[it->sid];
    pthread_mutex_lock(&slot->mu);
    slot->done = it->pos;
    pthread_cond_broadcast(&slot->cv);
    pthread_mutex_unlock(&slot->mu);
    if (it->op->finished) it->op->finished(it->op);
    unref_op(it->op);
    free(it->deps);
    free(it);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Lock held. */
struct stream* new_stream(int device, int blocking, const char* label) {
  int sid = stream_slot();
  if (sid < 0) return NULL;
  struct stream* s = calloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->device = device;
  s->blocking = blocking;
  s->sid = sid;
  struct slot* slot = &slots[sid];
  s->clock.c[sid] = slot->done; /* a reused slot's positions go on */
  slot->stream = s;
  if (label) snprintf(slot->label, sizeof slot->label, "%s", label);
  else snprintf(slot->label, sizeof slot->label, "stream %p", (void*)s);
  pthread_create(&s->thread, NULL, stream_main, s);
  return s;
}

/* Without the lock: waits for the stream's work, then ends its thread. */
void destroy_stream(struct stream* s) {
  pthread_mutex_lock(&fake_mu);
  long last = s->clock.c[s->sid];
  pthread_mutex_unlock(&fake_mu);
  wait_position(s->sid, last);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_lock(&fake_mu);
  slots[s->sid].stream = NULL;
  pthread_mutex_unlock(&fake_mu);
  free(s);
}

static struct stream* legacy[MAX_DEVICES];
static __thread struct stream* per_thread[MAX_DEVICES];

static struct stream* must(struct stream* s) {
  if (s) return s;
  fprintf(stderr, "fake CUDA: more than %d live streams; raise MAX_STREAMS in fake_cuda.h\n", MAX_STREAMS);
  abort();
}

struct stream* resolve(void* handle) {
  int device = current_device_of_thread();
  char label[96];
  if (handle == NULL || handle == (void*)1) {
    if (!legacy[device]) {
      snprintf(label, sizeof label, "the legacy default stream of device %d", device);
      legacy[device] = must(new_stream(device, 1, label));
      legacy[device]->legacy = 1;
    }
    return legacy[device];
  }
  if (handle == (void*)2) {
    if (!per_thread[device]) {
      char name[NAME_LEN];
      thread_name(name);
      snprintf(label, sizeof label, "the per-thread default stream of thread \"%s\" on device %d", name, device);
      per_thread[device] = must(new_stream(device, 1, label));
    }
    return per_thread[device];
  }
  return handle;
}

/* ---- queueing ---- */
static void add_dep(struct item* it, int sid, long pos) {
  if (done_position(sid) >= pos) return;
  it->deps = realloc(it->deps, (it->ndeps + 1) * sizeof *it->deps);
  it->deps[it->ndeps++] = (struct dep){sid, pos};
}

/* Note [Vector clocks]: the legacy stream and blocking streams. */
static void implicit_sync(struct stream* s, struct item* it) {
  if (s->legacy) {
    for (int i = 0; i < used_slots; ++i) {
      struct stream* b = slots[i].stream;
      if (!b || b == s || !b->blocking || b->device != s->device || b->capture) continue;
      clock_join(&s->clock, &b->clock);
      add_dep(it, b->sid, b->clock.c[b->sid]);
    }
  } else if (s->blocking && legacy[s->device]) {
    struct stream* n = legacy[s->device];
    clock_join(&s->clock, &n->clock);
    add_dep(it, n->sid, n->clock.c[n->sid]);
  }
}

/* Work on a capturing stream is recorded, not run (fake_cuda_capture.c). */
static int record_into_capture(struct stream* s, struct op* op, struct event* record, struct event* wait,
                               unsigned wait_flags) {
  if (wait && wait->captured != capture_id(s->capture) && !(wait_flags & 1 /* cudaEventWaitExternal */)) {
    char why[256];
    snprintf(why, sizeof why, "cudaStreamWaitEvent made capturing %s wait for an event recorded %s",
             stream_label(s->sid), wait->captured ? "in another capture" : "outside the capture");
    capture_invalidate(s->capture, why);
    unref_op(op);
    return CaptureIsolation;
  }
  if (record) record->captured = capture_id(s->capture);
  capture_record(s->capture, op);
  return Success;
}

int submit(void* handle, struct op* op, struct event* record, struct event* wait, unsigned wait_flags,
           int* sid, long* pos, vclock* snapshot) {
  pthread_mutex_lock(&fake_mu);
  struct stream* s = resolve(handle);
  int rc = capture_check_stream(s, op->name);
  if (rc == Success && !s->capture && wait && wait->captured) {
    /* waiting for an event recorded in a capture forks that capture */
    struct capture* c = capture_by_id(wait->captured);
    if (c) capture_join(c, s);
  }
  if (rc != Success || s->capture) {
    if (rc == Success) rc = record_into_capture(s, op, record, wait, wait_flags);
    else unref_op(op);
    if (pos) *pos = 0;
    pthread_mutex_unlock(&fake_mu);
    return rc;
  }
  struct item* it = calloc(1, sizeof *it);
  it->op = op;
  it->sid = s->sid;
  implicit_sync(s, it);
  clock_join(&s->clock, thread_clock());
  if (wait && wait->pos) {
    clock_join(&s->clock, wait->snapshot);
    add_dep(it, wait->sid, wait->pos);
  }
  it->pos = ++s->clock.c[s->sid];
  if (record) {
    if (!record->snapshot) record->snapshot = malloc(sizeof *record->snapshot);
    *record->snapshot = s->clock;
    record->sid = s->sid;
    record->pos = it->pos;
    record->captured = 0;
  }
  races_check(s, it->pos, op);
  if (sid) *sid = s->sid;
  if (pos) *pos = it->pos;
  if (snapshot) *snapshot = s->clock;
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(&fake_mu);
  return Success;
}
