"""The TF op library reduces every dtype it registers, and registers every
dtype of api.h: its dtype switch (csrc/tensorflow/pending_op.cc) and its op
registrations (op_definitions.cc) agree with the codes defined once."""
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry

import hvdlite.tensorflow as hvd
from hvdlite.common import basics
from hvdlite.tensorflow import op_library


def registered_dtypes():
    op_library.load()
    op_def = op_def_registry.get("HvdliteAllreduce")
    (attr,) = [a for a in op_def.attr if a.name == "T"]
    return [tf.dtypes.as_dtype(t) for t in attr.allowed_values.list.type]


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    dtypes = registered_dtypes()
    names = sorted(d.name for d in dtypes)
    assert names == sorted(n.lower() for n in basics.core().data_types), names
    inputs = [np.array([r + 1, 0, r % 2, 3]) for r in range(size)]
    for dtype in dtypes:
        got = hvd.allreduce(tf.cast(inputs[rank], dtype), op=hvd.Sum, name=f"every.{dtype.name}")
        assert got.dtype == dtype, (dtype, got.dtype)
        expected = np.any(inputs, 0) if dtype == tf.bool else np.sum(inputs, 0)
        assert np.array_equal(got.numpy().astype(np.float64), expected.astype(np.float64)), \
            (dtype, got.numpy(), expected)
        print(f"{dtype.name} OK", flush=True)
    print("every dtype OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
