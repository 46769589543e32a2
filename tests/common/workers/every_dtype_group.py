"""A grouped allreduce holding every dtype, for every op: one check written
once for the array bindings' collectives workers (tests/common/workers/
collectives.py over NumPy, tests/torch/workers/collectives.py over torch).
The core fuses such a group per dtype; each member must still come back in
its own dtype, reduced as the worker's reference says.

The worker gives its arrays' side: `dtypes`, `float32`, `reduce_ops(dtype)`,
`data(name, rank, shape, dtype)`, `reference(op, inputs, dtype)`,
`expect(what, got, want, dtype)` and `label(dtype)` for messages."""


def check_group_of_every_dtype(hvd, rank, size, prefix, *, dtypes, float32, reduce_ops, data, reference,
                               expect, label):
    for op in reduce_ops(float32):
        members = [d for d in dtypes if op in reduce_ops(d)]
        name = f"{prefix}.every_dtype.{op.name}"
        inputs = [[data(f"{name}.{i}", r, (4, i + 1), d) for i, d in enumerate(members)]
                  for r in range(size)]
        got = hvd.grouped_allreduce(inputs[rank], op=op, name=name)
        for i, d in enumerate(members):
            expect(f"{name}[{label(d)}]", got[i], reference(op, [inputs[r][i] for r in range(size)], d), d)
