// hvdlite's stable C interface, for framework bindings compiled separately
// from the core (the TensorFlow op library is built on the user's machine
// against whatever TensorFlow is installed there), and the one request type
// every binding hands the core (hvdlite._core fills the same struct).
//
// Only C types cross this boundary, so a binding built with another compiler
// or C++ standard-library ABI (TensorFlow's flags) still talks to the same
// process-wide Runtime as hvdlite._core: init/rank/size from Python, collectives
// from the framework. The TF op library is compiled from this very header on
// first use (hvdlite/tensorflow/op_library.py hashes it into the cache key),
// so it never meets a libhvdlite built from another version of it.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

// Note [Codes defined once]
// The op, reduce-op and data-type codes are defined here and nowhere else:
// csrc/common/types.h keeps its own enums for the core, tied to these by
// static_asserts in csrc/api/request.cc; hvdlite._core (and hvdlite._codes,
// which imports without loading the core) export the names and values, from
// which hvdlite/common/ops.py builds ReduceOp, OpType and DataType; the TF
// kernels use the constants below. Adding a code is one line in a list here
// plus the matching enumerator in types.h. The values are part of the wire
// format of negotiation messages: append, never renumber.
#define HVDLITE_OP_TYPES(X) \
  X(ALLREDUCE, 0)           \
  X(ALLGATHER, 1)           \
  X(BROADCAST, 2)           \
  X(ALLTOALL, 3)            \
  X(REDUCESCATTER, 4)       \
  X(BARRIER, 5)             \
  X(JOIN, 6)                \
  X(ADD_PROCESS_SET, 7)     \
  X(REMOVE_PROCESS_SET, 8)

// The reduce ops a user may ask for (the core's internal bit-AND is not one).
#define HVDLITE_REDUCE_OPS(X) \
  X(SUM, 0)                   \
  X(AVERAGE, 1)               \
  X(MIN, 2)                   \
  X(MAX, 3)                   \
  X(PRODUCT, 4)               \
  X(ADASUM, 5)

#define HVDLITE_DTYPES(X) \
  X(UINT8, 0)             \
  X(INT8, 1)              \
  X(INT32, 2)             \
  X(INT64, 3)             \
  X(FLOAT16, 4)           \
  X(BFLOAT16, 5)          \
  X(FLOAT32, 6)           \
  X(FLOAT64, 7)           \
  X(BOOL, 8)              \
  X(INT16, 9)             \
  X(UINT16, 10)

#define HVDLITE_CODE_OP(name, value) HVDLITE_OP_##name = value,
#define HVDLITE_CODE_REDUCE(name, value) HVDLITE_REDUCE_##name = value,
#define HVDLITE_CODE_DTYPE(name, value) HVDLITE_DTYPE_##name = value,
#define HVDLITE_CODE_COUNT(name, value) +1
enum hvdlite_op_type {
  HVDLITE_OP_TYPES(HVDLITE_CODE_OP)
  HVDLITE_NUM_OP_TYPES = 0 HVDLITE_OP_TYPES(HVDLITE_CODE_COUNT)
};
enum hvdlite_reduce_op {
  HVDLITE_REDUCE_OPS(HVDLITE_CODE_REDUCE)
  HVDLITE_NUM_REDUCE_OPS = 0 HVDLITE_REDUCE_OPS(HVDLITE_CODE_COUNT)
};
enum hvdlite_dtype {
  HVDLITE_DTYPES(HVDLITE_CODE_DTYPE)
  HVDLITE_NUM_DTYPES = 0 HVDLITE_DTYPES(HVDLITE_CODE_COUNT)
};

// Status kinds: hvdlite_enqueue's return value and a completion's status
// (core::StatusKind order).
enum hvdlite_status_kind {
  HVDLITE_OK = 0,
  HVDLITE_INVALID_ARGUMENT = 1,
  HVDLITE_COLLECTIVE_ERROR = 2,
  HVDLITE_TRANSPORT_ERROR = 3,
  HVDLITE_TIMEOUT = 4,
  HVDLITE_SHUTDOWN = 5,
  HVDLITE_PRECONDITION_ERROR = 6,  // ranks disagree on the collective; the job is healthy
  HVDLITE_DIVERGENCE_ERROR = 7,    // ranks wait on different collectives, all blocked
  HVDLITE_OUTSIDE_RUN_ERROR = 8,   // a late joiner's collective before hvd.elastic.run
};

// hvdlite_request.flags
enum hvdlite_request_flag {
  // The caller waits for this operation next and runs the cycle itself, so
  // the background thread need not be woken.
  HVDLITE_REQUEST_NO_WAKE = 1,
  // The caller blocks until this operation completes (a TF or JAX op that
  // holds its step): the rank counts as blocked while it is in flight
  // (Note [Divergence] in core/coordinator.cc).
  HVDLITE_REQUEST_CALLER_WAITS = 2,
  // CUDA: the memory the allocate callback returns comes from an allocator
  // ordered by the request's stream alone (TensorFlow's), so kernels queued
  // there before the allocation may still use it; the core makes its own
  // stream wait for the request's stream as it was when allocate returned
  // before it writes the output (Note [Outputs allocated late] in
  // api/session.cc). Without it the memory must be free on every stream.
  HVDLITE_REQUEST_OUTPUT_ON_STREAM = 4,
};

// One collective. Start from hvdlite_request_defaults(): a zeroed struct
// would ask for scale factors of 0 on GPU 0. Every code is range-checked, and
// a bad one refuses the request before anything is queued. Pointers need to
// stay valid only during hvdlite_enqueue, except input/output, which must stay
// valid until the completion callback has run.
typedef struct hvdlite_request {
  int32_t op;            // hvdlite_op_type
  const char* name;      // unique among the pending operations; required
  int32_t process_set_id;
  int32_t dtype;         // hvdlite_dtype
  const int64_t* shape;
  int32_t ndim;
  const void* input;
  // allreduce, broadcast: where the result goes (may equal input). allgather,
  // alltoall, reducescatter: the caller's buffer of output_bytes (> 0), which
  // the result must fill exactly; else ignored, and the core allocates the
  // output (through the allocate callback or the handle).
  void* output;
  int32_t reduce_op;     // hvdlite_reduce_op: allreduce, reducescatter
  double prescale;
  double postscale;
  int32_t root_rank;     // broadcast: the global rank that sends
  const int64_t* splits; // alltoall: rows to each rank; NULL/0 = split the first dimension evenly
  int32_t num_splits;
  int32_t device;        // -1: host memory; else the CUDA device of input/output
  void* ready_event;     // CUDA: cudaEvent_t recorded once input was written (NULL: all of stream)
  void* stream;          // CUDA: cudaStream_t that must wait for the result (NULL: default)
  const char* group;     // grouped collectives: members share a group name and size; NULL = none
  int32_t group_size;
  const int64_t* process_set_ranks;  // add_process_set: the new set's global ranks
  int32_t num_process_set_ranks;
  int32_t removed_process_set_id;    // remove_process_set: the set to remove
  uint32_t flags;        // hvdlite_request_flag bits
  // Where the user's program called it, or traced it into a graph (Note
  // [Call sites] in core/call_site.h); NULL file: unknown.
  const char* call_site_file;
  int32_t call_site_line;
  const char* call_site_function;
  // The size of `output` for an allgather, alltoall or reducescatter that
  // writes into the caller's buffer (Note [Outputs into the caller's
  // buffer] in api/caller_output.cc); ignored for the other operations.
  int64_t output_bytes;
} hvdlite_request;

static inline hvdlite_request hvdlite_request_defaults(void) {
  hvdlite_request request;
  memset(&request, 0, sizeof(request));
  request.prescale = 1.0;
  request.postscale = 1.0;
  request.device = -1;
  return request;
}

// What a finished collective produced, valid only during the callback.
typedef struct hvdlite_result {
  int32_t status;       // hvdlite_status_kind
  const char* message;  // why it failed; "" when ok
  const int64_t* output_shape;  // allgather, alltoall, reducescatter
  int32_t output_ndim;
  const int64_t* received_splits;  // alltoall
  int32_t num_received_splits;
  int32_t value;  // join: the last rank to join; add/remove_process_set: the set's id
} hvdlite_result;

// Called on the background thread with the output shape of an allgather,
// alltoall or reducescatter; returns memory for it (NULL when it cannot, which
// fails the operation). Must not block on the thread that enqueued.
typedef void* (*hvdlite_allocate_fn)(void* user, const int64_t* shape, int32_t ndim);
// Called once on the background thread when the operation is done. Must be
// quick and must not call back into hvdlite.
typedef void (*hvdlite_done_fn)(void* user, const hvdlite_result* result);

// Queues a collective. Returns HVDLITE_OK, or an hvdlite_status_kind with the
// reason copied into error (truncated to error_size) when it was refused in
// the caller's thread (a bad code or argument: HVDLITE_INVALID_ARGUMENT; not
// initialized, shut down); done is then never called.
int32_t hvdlite_enqueue(const hvdlite_request* request, hvdlite_allocate_fn allocate,
                        hvdlite_done_fn done, void* user, char* error, size_t error_size);

// A call site interned once for the life of the process (Note [Call sites]
// in core/call_site.h), or NULL when file is NULL or empty. For a binding
// that queues requests from the same sites again and again (JAX's CPU
// handler, every step): hvdlite_enqueue_at then skips interning the
// request's strings, about 430 instructions a request (Note [Sites
// interned once] in jax/collective_call.cc).
const void* hvdlite_intern_call_site(const char* file, int32_t line, const char* function);

// hvdlite_enqueue, with `call_site` (from hvdlite_intern_call_site; NULL:
// the request's own call_site_* strings, as hvdlite_enqueue) as the
// request's site.
int32_t hvdlite_enqueue_at(const hvdlite_request* request, const void* call_site,
                           hvdlite_allocate_fn allocate, hvdlite_done_fn done, void* user, char* error,
                           size_t error_size);

// For a thread that waits for collectives it queued with hvdlite_enqueue:
// runs the core's negotiation cycles on this thread until ready(user)
// returns nonzero, instead of waking the background thread and being woken
// by it (as hvdlite.torch's synchronize() does: Note [Cycles on the waiting
// thread] in core/runtime_cycles.cc). The done callbacks of what completes
// run on this thread meanwhile, before ready is asked again. Returns 1 once
// ready; 0 when this thread may not run a cycle now (another thread is
// running one, the rank is stalled or has CUDA work, the runtime stopped):
// the thread that runs them calls the done callbacks, so wait for those; -1
// when hvdlite is not initialized. The background thread takes over what is
// still in flight when it returns. Never call it from a done callback.
typedef int32_t (*hvdlite_ready_fn)(void* user);
int32_t hvdlite_drive_cycles(hvdlite_ready_fn ready, void* user);

int32_t hvdlite_is_initialized(void);
// -1 when hvdlite is not initialized.
int32_t hvdlite_rank(void);
int32_t hvdlite_size(void);
int32_t hvdlite_local_rank(void);
int32_t hvdlite_local_size(void);

#ifdef __cplusplus
}  // extern "C"
#endif
