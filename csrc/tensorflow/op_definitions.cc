// The hvdlite TensorFlow ops: names, attributes and shape functions. The
// kernels are in collective_kernels.cc and grouped_kernels.cc; gradients are
// registered in Python (hvdlite/tensorflow/gradients.py).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvdlite::tensorflow_ops {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

#define HVDLITE_TYPES "{uint8, int8, int32, int64, half, bfloat16, float, double, bool, int16, uint16}"

// Note [Stateful collectives]: every collective is registered stateful. A
// collective has a side effect no graph can see (its peers wait for it), so
// TensorFlow must never run one while it infers shapes or folds constants
// (EvaluateConstantTensor runs parts of a gradient graph while it is built:
// one rank would run a collective its peers never run, and both hang), nor
// merge two identical ones (common-subexpression elimination) or prune one
// whose output is unused. Stateful ops are also ordered by tf.function's
// automatic control dependencies, so every rank issues them in program order.

// Every collective names its tensor (the same on every rank) and its process
// set, and says where the program built it: [file, line, function] of the
// user's frame when the op was created (traced, inside tf.function), or []
// (Note [Call sites] in core/call_site.h; hvdlite/tensorflow/collectives.py).
#define HVDLITE_CALL_SITE_ATTR .Attr("call_site: list(string) = []")
#define HVDLITE_COMMON_ATTRS .Attr("tensor_name: string").Attr("process_set_id: int = 0") HVDLITE_CALL_SITE_ATTR
// Allreduce, grouped allreduce and reducescatter.
#define HVDLITE_REDUCE_ATTRS                                            \
  .Attr("reduce_op: int")                                               \
      .Attr("prescale_factor: float = 1.0")                             \
      .Attr("postscale_factor: float = 1.0")

// Output i: input i's shape except the first dimension, known only after negotiation.
Status firstDimensionUnknownAt(InferenceContext* c, int i) {
  ShapeHandle input = c->input(i);
  if (!c->RankKnown(input)) {
    c->set_output(i, c->UnknownShape());
    return Status();
  }
  ShapeHandle output;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(input, 1, &input));
  TF_RETURN_IF_ERROR(c->ReplaceDim(input, 0, c->UnknownDim(), &output));
  c->set_output(i, output);
  return Status();
}

Status firstDimensionUnknown(InferenceContext* c) { return firstDimensionUnknownAt(c, 0); }

REGISTER_OP("HvdliteAllreduce")
    .Attr("T: " HVDLITE_TYPES)
    .Input("tensor: T")
    .Output("reduced: T")
    HVDLITE_REDUCE_ATTRS
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("HvdliteGroupedAllreduce")
    .Attr("T: list(" HVDLITE_TYPES ")")
    .Input("tensors: T")
    .Output("reduced: T")
    HVDLITE_REDUCE_ATTRS
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return Status();
    });

REGISTER_OP("HvdliteAllgather")
    .Attr("T: " HVDLITE_TYPES)
    .Input("tensor: T")
    .Output("gathered: T")
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn(firstDimensionUnknown);

REGISTER_OP("HvdliteBroadcast")
    .Attr("T: " HVDLITE_TYPES)
    .Input("tensor: T")
    .Output("broadcast: T")
    .Attr("root_rank: int")
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("HvdliteAlltoall")
    .Attr("T: " HVDLITE_TYPES)
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("received: T")
    .Output("received_splits: int32")
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(firstDimensionUnknown(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return Status();
    });

REGISTER_OP("HvdliteReducescatter")
    .Attr("T: " HVDLITE_TYPES)
    .Input("tensor: T")
    .Output("reduced: T")
    HVDLITE_REDUCE_ATTRS
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn(firstDimensionUnknown);

// Grouped allgather and reducescatter (grouped_kernels.cc).
Status firstDimensionsUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(firstDimensionUnknownAt(c, i));
  return Status();
}

REGISTER_OP("HvdliteGroupedAllgather")
    .Attr("T: list(" HVDLITE_TYPES ")")
    .Input("tensors: T")
    .Output("gathered: T")
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn(firstDimensionsUnknown);

REGISTER_OP("HvdliteGroupedReducescatter")
    .Attr("T: list(" HVDLITE_TYPES ")")
    .Input("tensors: T")
    .Output("reduced: T")
    HVDLITE_REDUCE_ATTRS
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn(firstDimensionsUnknown);

// Control operations: stateful so that TF never prunes or merges them.
REGISTER_OP("HvdliteBarrier")
    HVDLITE_COMMON_ATTRS
    .SetIsStateful()  // Note [Stateful collectives]
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs);

REGISTER_OP("HvdliteJoin")
    .Output("last_rank: int32")
    HVDLITE_CALL_SITE_ATTR
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

// rank/size as ops, so that a saved graph asks the running job, not the one it was traced in.
REGISTER_OP("HvdliteRank").Output("rank: int32").SetIsStateful().SetShapeFn(
    ::tensorflow::shape_inference::ScalarShape);
REGISTER_OP("HvdliteSize").Output("size: int32").SetIsStateful().SetShapeFn(
    ::tensorflow::shape_inference::ScalarShape);
REGISTER_OP("HvdliteLocalRank").Output("local_rank: int32").SetIsStateful().SetShapeFn(
    ::tensorflow::shape_inference::ScalarShape);
REGISTER_OP("HvdliteLocalSize").Output("local_size: int32").SetIsStateful().SetShapeFn(
    ::tensorflow::shape_inference::ScalarShape);

}  // namespace hvdlite::tensorflow_ops
