// hvdlite's stable C interface, for framework bindings compiled separately
// from the core (the TensorFlow op library is built on the user's machine
// against whatever TensorFlow is installed there).
//
// Only C types cross this boundary, so a binding built with another compiler
// or C++ standard-library ABI (TensorFlow's flags) still talks to the same
// process-wide Runtime as hvdlite._core: init/rank/size from Python, collectives
// from the framework. Append to these structs and enums; never reorder.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVDLITE_API_VERSION 1

// Status kinds passed to a completion callback (core::StatusKind order).
enum hvdlite_status_kind {
  HVDLITE_OK = 0,
  HVDLITE_INVALID_ARGUMENT = 1,
  HVDLITE_COLLECTIVE_ERROR = 2,
  HVDLITE_TRANSPORT_ERROR = 3,
  HVDLITE_TIMEOUT = 4,
  HVDLITE_SHUTDOWN = 5,
  HVDLITE_PRECONDITION_ERROR = 6,  // ranks disagree on the collective; the job is healthy
};

// One collective. Codes are those of csrc/common/types.h (OpType, ReduceOp,
// DataType). Pointers need to stay valid only during hvdlite_enqueue, except
// input/output, which must stay valid until the completion callback has run.
typedef struct hvdlite_request {
  int32_t op;
  const char* name;
  int32_t reduce_op;
  int32_t dtype;
  const int64_t* shape;
  int32_t ndim;
  const void* input;
  void* output;  // allreduce, broadcast: where the result goes (may equal input)
  int32_t root_rank;
  double prescale;
  double postscale;
  const int64_t* splits;  // alltoall; NULL/0 = split the first dimension evenly
  int32_t num_splits;
  int32_t process_set_id;
  const char* group;  // grouped allreduce: members share a group name and size; NULL = none
  int32_t group_size;
} hvdlite_request;

// What a finished collective produced, valid only during the callback.
typedef struct hvdlite_result {
  int32_t status;       // hvdlite_status_kind
  const char* message;  // why it failed; "" when ok
  const int64_t* output_shape;  // allgather, alltoall, reducescatter
  int32_t output_ndim;
  const int64_t* received_splits;  // alltoall
  int32_t num_received_splits;
  int32_t value;  // join: the last rank to join
} hvdlite_result;

// Called on the background thread with the output shape of an allgather,
// alltoall or reducescatter; returns memory for it (NULL when it cannot, which
// fails the operation). Must not block on the thread that enqueued.
typedef void* (*hvdlite_allocate_fn)(void* user, const int64_t* shape, int32_t ndim);
// Called once on the background thread when the operation is done. Must be
// quick and must not call back into hvdlite.
typedef void (*hvdlite_done_fn)(void* user, const hvdlite_result* result);

// Queues a collective. Returns 0, or an hvdlite_status_kind with the reason
// copied into error (truncated to error_size) when it was refused in the
// caller's thread (bad argument, not initialized); done is then never called.
int32_t hvdlite_enqueue(const hvdlite_request* request, hvdlite_allocate_fn allocate,
                        hvdlite_done_fn done, void* user, char* error, size_t error_size);

int32_t hvdlite_is_initialized(void);
// -1 when hvdlite is not initialized.
int32_t hvdlite_rank(void);
int32_t hvdlite_size(void);
int32_t hvdlite_local_rank(void);
int32_t hvdlite_local_size(void);
int32_t hvdlite_api_version(void);

#ifdef __cplusplus
}  // extern "C"
#endif
