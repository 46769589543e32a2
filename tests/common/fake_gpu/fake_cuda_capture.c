/* Stream capture (CUDA graphs) in the fake CUDA runtime: work queued on a
 * capturing stream is recorded, not run; cudaStreamEndCapture turns it into
 * a graph that cudaGraphLaunch replays, in capture order, on one stream.
 *
 * Note [Capture modes]: while a capture is active, CUDA forbids "potentially
 * unsafe" calls (here: cudaMalloc, cudaMallocHost, cudaFree, cudaFreeHost,
 * cudaEventQuery, cudaEventSynchronize, cudaStreamSynchronize,
 * cudaStreamQuery, cudaDeviceSynchronize, and work on the legacy default
 * stream) to
 *  - every thread whose own mode (cudaThreadExchangeStreamCaptureMode) is
 *    global, while any capture begun in global mode is active anywhere;
 *  - the capturing thread itself, unless the capture was begun relaxed;
 * a thread in relaxed mode is never refused. A refused call returns
 * cudaErrorStreamCaptureUnsupported (900), or cudaErrorStreamCaptureImplicit
 * (906) for legacy-stream work, and invalidates the captures that forbade it,
 * so their cudaStreamEndCapture returns cudaErrorStreamCaptureInvalidated
 * (901). Legacy-stream work is also refused, and invalidates the capture,
 * while a blocking stream of that device captures (it would wait for it).
 * cudaStreamWaitEvent on a capturing stream for an event recorded outside
 * the capture is refused (cudaErrorStreamCaptureIsolation, 905, unless
 * cudaEventWaitExternal), while waiting for an event recorded in a capture
 * makes a stream join that capture (a fork).
 *
 * Not modelled: unjoined forked streams at cudaStreamEndCapture (every
 * joined stream simply leaves the capture), graph memory nodes
 * (cudaMallocAsync allocates at once), event record/wait nodes on replay. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

#define MAX_CAPTURES 64
struct capture {
  int id, mode, status; /* status: 1 active, 2 invalidated */
  int device;
  pthread_t thread;
  char thread_name[NAME_LEN];
  struct stream* origin;
  struct op** ops;
  int nops;
};
static struct capture* active[MAX_CAPTURES];
static int next_id = 1;
static __thread int thread_mode = CaptureModeGlobal;
static atomic_long invalidated;

#define MAX_REASONS 32
static char* reasons[MAX_REASONS];
static int nreasons;

static const char* mode_name(int mode) {
  return mode == CaptureModeGlobal ? "global" : mode == CaptureModeThreadLocal ? "thread-local" : "relaxed";
}

int capture_id(const struct capture* c) { return c ? c->id : 0; }

struct capture* capture_by_id(int id) {
  for (int i = 0; i < MAX_CAPTURES; ++i) {
    if (active[i] && active[i]->id == id) return active[i];
  }
  return NULL;
}

void capture_invalidate(struct capture* c, const char* why) {
  if (c->status != 1) return;
  c->status = 2;
  atomic_fetch_add(&invalidated, 1);
  char text[768];
  snprintf(text, sizeof text, "capture %d (%s mode, begun on %s by thread \"%s\") invalidated: %s", c->id,
           mode_name(c->mode), stream_label(c->origin->sid), c->thread_name, why);
  if (nreasons < MAX_REASONS) reasons[nreasons++] = strdup(text);
}

void capture_join(struct capture* c, struct stream* s) { s->capture = c; }

void capture_record(struct capture* c, struct op* op) {
  c->ops = realloc(c->ops, (c->nops + 1) * sizeof *c->ops);
  c->ops[c->nops++] = op;
}

static int forbids(const struct capture* c) {
  if (thread_mode == CaptureModeRelaxed) return 0;
  if (pthread_equal(c->thread, pthread_self())) return c->mode != CaptureModeRelaxed;
  return thread_mode == CaptureModeGlobal && c->mode == CaptureModeGlobal;
}

static int invalidate_forbidding(const char* call, int error) {
  int refused = 0;
  for (int i = 0; i < MAX_CAPTURES; ++i) {
    struct capture* c = active[i];
    if (!c || !forbids(c)) continue;
    char me[NAME_LEN], why[512];
    thread_name(me);
    snprintf(why, sizeof why, "%s on thread \"%s\" (in %s capture mode) is not allowed while it captures", call,
             me, mode_name(thread_mode));
    capture_invalidate(c, why);
    refused = error;
  }
  return refused;
}

int capture_refuses(const char* call) { return invalidate_forbidding(call, CaptureUnsupported); }

int capture_check_stream(struct stream* s, const char* call) {
  if (s->capture) return s->capture->status == 2 ? CaptureInvalidated : Success;
  if (!s->legacy) return Success;
  int refused = Success;
  for (int i = 0; i < stream_count(); ++i) {
    struct stream* b = stream_of_slot(i);
    if (!b || !b->capture || !b->blocking || b->device != s->device) continue;
    char why[512];
    snprintf(why, sizeof why, "%s on %s would make it wait for capturing %s", call, stream_label(s->sid),
             stream_label(b->sid));
    capture_invalidate(b->capture, why);
    refused = CaptureImplicit;
  }
  return invalidate_forbidding(call, CaptureImplicit) ? CaptureImplicit : refused;
}

static void end_capture(struct capture* c) {
  for (int i = 0; i < stream_count(); ++i) {
    struct stream* s = stream_of_slot(i);
    if (s && s->capture == c) s->capture = NULL;
  }
  for (int i = 0; i < MAX_CAPTURES; ++i) {
    if (active[i] == c) active[i] = NULL;
  }
}

/* ---- the API ---- */
struct graph {
  struct op** ops;
  int nops;
  atomic_int refs; /* the graph, each instantiation */
};
struct graph_exec { struct graph* graph; };

static void unref_graph(struct graph* g) {
  if (atomic_fetch_sub(&g->refs, 1) != 1) return;
  for (int i = 0; i < g->nops; ++i) unref_op(g->ops[i]);
  free(g->ops);
  free(g);
}

int cudaThreadExchangeStreamCaptureMode(int* mode) {
  count_call();
  if (!mode || *mode < CaptureModeGlobal || *mode > CaptureModeRelaxed) return InvalidValue;
  int previous = thread_mode;
  thread_mode = *mode;
  *mode = previous;
  return Success;
}

int cudaStreamBeginCapture(void* stream, int mode) {
  count_call();
  int rc = need_context("cudaStreamBeginCapture");
  if (rc != Success) return rc;
  if (mode < CaptureModeGlobal || mode > CaptureModeRelaxed) return InvalidValue;
  pthread_mutex_lock(&fake_mu);
  struct stream* s = resolve(stream);
  int slot = 0;
  while (slot < MAX_CAPTURES && active[slot]) ++slot;
  if (s->legacy) rc = CaptureUnsupported;
  else if (s->capture) rc = IllegalState;
  else if (slot == MAX_CAPTURES) rc = MemoryAllocation;
  if (rc == Success) {
    struct capture* c = calloc(1, sizeof *c);
    c->id = next_id++;
    c->mode = mode;
    c->status = 1;
    c->device = s->device;
    c->thread = pthread_self();
    thread_name(c->thread_name);
    c->origin = s;
    s->capture = c;
    active[slot] = c;
  }
  pthread_mutex_unlock(&fake_mu);
  return rc;
}

int cudaStreamEndCapture(void* stream, struct graph** graph) {
  count_call();
  int rc = need_context("cudaStreamEndCapture");
  if (rc != Success) return rc;
  if (!graph) return InvalidValue;
  *graph = NULL;
  pthread_mutex_lock(&fake_mu);
  struct stream* s = resolve(stream);
  struct capture* c = s->capture;
  if (!c) rc = IllegalState;
  else if (c->origin != s) rc = CaptureUnmatched;
  else if (c->mode != CaptureModeRelaxed && !pthread_equal(c->thread, pthread_self())) rc = CaptureWrongThread;
  if (rc == Success) {
    end_capture(c);
    if (c->status == 2) {
      for (int i = 0; i < c->nops; ++i) unref_op(c->ops[i]);
      free(c->ops);
      rc = CaptureInvalidated;
    } else {
      struct graph* g = calloc(1, sizeof *g);
      g->ops = c->ops;
      g->nops = c->nops;
      atomic_store(&g->refs, 1);
      *graph = g;
    }
    free(c);
  }
  pthread_mutex_unlock(&fake_mu);
  return rc;
}

/* status: 0 none, 1 active, 2 invalidated (cudaStreamCaptureStatus). */
int cudaStreamIsCapturing(void* stream, int* status) {
  count_call();
  int rc = need_context("cudaStreamIsCapturing");
  if (rc != Success) return rc;
  if (!status) return InvalidValue;
  pthread_mutex_lock(&fake_mu);
  struct stream* s = resolve(stream);
  *status = s->capture ? s->capture->status : 0;
  for (int i = 0; s->legacy && i < stream_count(); ++i) {
    struct stream* b = stream_of_slot(i);
    if (b && b->capture && b->blocking && b->device == s->device) rc = CaptureImplicit;
  }
  pthread_mutex_unlock(&fake_mu);
  return rc;
}

int cudaGraphInstantiate(struct graph_exec** exec, struct graph* graph, unsigned long long flags) {
  count_call();
  int rc = need_context("cudaGraphInstantiate");
  if (rc != Success) return rc;
  if (!exec || !graph) return InvalidValue;
  *exec = malloc(sizeof **exec);
  (*exec)->graph = graph;
  atomic_fetch_add(&graph->refs, 1);
  return Success;
}

/* Each node is queued on `stream` in capture order, checked as it is queued. */
int cudaGraphLaunch(struct graph_exec* exec, void* stream) {
  count_call();
  int rc = need_context("cudaGraphLaunch");
  if (rc != Success) return rc;
  if (!exec) return InvalidValue;
  struct graph* g = exec->graph;
  for (int i = 0; i < g->nops && rc == Success; ++i) {
    atomic_fetch_add(&g->ops[i]->refs, 1);
    rc = submit(stream, g->ops[i], NULL, NULL, 0, NULL, NULL, NULL);
  }
  return rc;
}

int cudaGraphExecDestroy(struct graph_exec* exec) {
  count_call();
  if (!exec) return InvalidValue;
  unref_graph(exec->graph);
  free(exec);
  return Success;
}

int cudaGraphDestroy(struct graph* graph) {
  count_call();
  if (!graph) return InvalidValue;
  unref_graph(graph);
  return Success;
}

/* ---- for the tests ---- */
long fake_cuda_invalidated_captures(void) { return atomic_load(&invalidated); }

/* Why each capture was invalidated (the first MAX_REASONS), one per line. */
const char* fake_cuda_capture_report(void) {
  static char* text;
  return join_lines(reasons, &nreasons, &text);
}
