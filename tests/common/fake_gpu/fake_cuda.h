/* What the parts of the fake CUDA runtime share (fake_cudart.c, the API,
 * is built with fake_cuda_streams.c, fake_cuda_races.c and
 * fake_cuda_capture.c; fake_gpu_build.py lists them). Nothing here is
 * exported: the library's interface is its cudaXxx and fake_* functions.
 *
 * Note [One order lock]: every piece of ordering state (vector clocks,
 * stream positions as queued, the allocation table and its accesses,
 * captures, contexts) is changed under fake_mu, and an operation is checked
 * and pushed onto its stream's queue under it, so the order the clocks see is
 * the order the streams run. Nothing blocks while holding it: stream threads
 * never take it, and a host call that waits (a synchronize) first takes what
 * it needs under the lock and then waits without it. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#pragma GCC visibility push(hidden)

#ifndef FAKE_CUDA_DEVICES
#define FAKE_CUDA_DEVICES 4
#endif
#define MAX_DEVICES (FAKE_CUDA_DEVICES > 0 ? FAKE_CUDA_DEVICES : 1)
#define MAX_STREAMS 512 /* vector clock components; see stream_slot() for more */

enum {
  Success = 0, InvalidValue = 1, MemoryAllocation = 2, NoDevice = 100, InvalidDevice = 101,
  InvalidResourceHandle = 400, IllegalState = 401, NotReady = 600,
  CaptureUnsupported = 900, CaptureInvalidated = 901, CaptureIsolation = 905, CaptureImplicit = 906,
  CaptureUnmatched = 903, CapturedEvent = 907, CaptureWrongThread = 908,
};

extern pthread_mutex_t fake_mu; /* Note [One order lock] */

typedef struct { long c[MAX_STREAMS]; } vclock;
void clock_join(vclock* into, const vclock* from);

/* The calling thread's name, as people see it in messages. */
#define NAME_LEN 32
void thread_name(char out[NAME_LEN]);

/* For the fake_*_report() functions: lines[0..*n), one per line, in *joined
 * (reallocated: valid until the next call with it). Takes the lock, under
 * which the lines are kept. */
const char* join_lines(char* const* lines, const int* n, char** joined);

/* ---- operations (fake_cuda_streams.c) ---- */
/* One byte range an operation reads or writes; `op` names it in a race
 * message (NULL: the operation's name). */
struct access { const void* p; size_t bytes; int write; const char* op; };

/* What a stream item or a graph node runs. Shared by reference: a graph
 * node is run by every launch, so run() leaves the op as it found it and
 * drop() frees what it owns when the last reference goes. */
struct op {
  const char* name;
  void (*run)(struct op*);
  void (*drop)(struct op*);
  void (*finished)(struct op*); /* after the stream counts it done: a waiter that wakes sees the stream idle */
  int kernel; /* runs FAKE_CUDA_KERNEL_US first */
  void* p[3];
  long n;
  size_t bytes;
  struct access* acc;
  int nacc;
  atomic_int refs;
};
struct op* new_op(const char* name, void (*run)(struct op*), int kernel);
void op_add_access(struct op* op, const void* p, size_t bytes, int write, const char* access_name);
void unref_op(struct op* op);

struct capture;
struct event;

struct stream {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct item *head, *tail;
  int stop, device, sid;
  int blocking; /* synchronises with the legacy default stream */
  int legacy;   /* it is the legacy default stream */
  vclock clock; /* what its last queued operation is ordered after */
  struct capture* capture;
  pthread_t thread;
};

/* A null handle and cudaStreamLegacy (1) name the current device's legacy
 * default stream, cudaStreamPerThread (2) the thread's own; lock held. */
struct stream* resolve(void* handle);
struct stream* new_stream(int device, int blocking, const char* label);
void destroy_stream(struct stream* s);
const char* stream_label(int sid);
int stream_count(void); /* slots used; stream_of_slot(i) for i below it */
struct stream* stream_of_slot(int sid);
int stream_device(int sid);

/* Queues `op` on `handle` as the calling thread's next operation (Note
 * [Vector clocks]): capture rules, the legacy stream's implicit
 * synchronisation, clocks, race checks. `record`: the op records that
 * event; `wait`: it waits for that event's last record (flags as
 * cudaStreamWaitEvent's). Takes a reference to op (drops it on refusal).
 * On success sid and pos (if given) say where it went, or pos is 0 if it was
 * captured; `snapshot`, if given, gets the stream's clock at it. */
int submit(void* handle, struct op* op, struct event* record, struct event* wait, unsigned wait_flags,
           int* sid, long* pos, vclock* snapshot);
/* Blocks until stream slot `sid` has run position `pos`; without the lock. */
void wait_position(int sid, long pos);
long done_position(int sid);

vclock* thread_clock(void);

/* ---- events (fake_cudart.c) ---- */
struct event {
  int sid;   /* the last record outside a capture: where, */
  long pos;  /* and which position (0: never recorded) */
  vclock* snapshot; /* what it is ordered after */
  int captured; /* the id of the capture its last record went into, or 0 */
};

/* ---- races (fake_cuda_races.c), lock held ---- */
/* `pos` > 0: a stream-ordered allocation, at (sid, pos). */
void races_allocated(void* base, size_t bytes, const char* how, int sid, long pos);
size_t races_size(const void* base);
void races_freed(void* base);
int races_is_device(const void* p);
void races_check(const struct stream* s, long pos, const struct op* op);

/* ---- devices and contexts (fake_cudart.c) ---- */
int current_device_of_thread(void);
/* Creates the current device's context if it has none (CUDA does so on the
 * first call that needs one); NoDevice without devices. Takes the lock. */
int need_context(const char* call);
void count_call(void); /* fake_cuda_calls() */

/* ---- capture (fake_cuda_capture.c), lock held ---- */
/* A potentially unsafe call (Note [Capture modes]): 0, or the error it
 * fails with after invalidating the captures that forbid it. */
int capture_refuses(const char* call);
/* Work queued on `s` while captures are active: 0, or an error. */
int capture_check_stream(struct stream* s, const char* call);
void capture_record(struct capture* c, struct op* op);
int capture_id(const struct capture* c);
struct capture* capture_by_id(int id);
void capture_invalidate(struct capture* c, const char* why);
void capture_join(struct capture* c, struct stream* s);
enum { CaptureModeGlobal = 0, CaptureModeThreadLocal = 1, CaptureModeRelaxed = 2 };

#pragma GCC visibility pop
