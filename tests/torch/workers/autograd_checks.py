"""The gradients of hvdlite.torch's differentiable collectives on real ranks,
against Horovod's definitions (Note [Horovod's gradients] in
hvdlite/common/collective_table.py) computed by hand in every worker.

Every rank can build every rank's input x_r and upstream gradient g_r (from
the names and ranks): rank r backpropagates (out_r * g_r).sum(), so g_r is
what reaches the collective's backward on rank r, and the expected input
gradient is written in terms of all the g_k. Prints "autograd OK"."""
import sys
import zlib

import torch

import hvdlite.torch as hvd
from rank_checks import check, close

torch.set_default_dtype(torch.float64)
OP_NAMES = {hvd.Sum: "Sum", hvd.Average: "Average"}


def known(name, rank, shape):
    """The same values on every rank for (name, rank): anyone can build anyone's."""
    generator = torch.Generator().manual_seed(zlib.crc32(f"{name}/{rank}".encode()))
    return torch.randn(shape, generator=generator)


def leaf(name, rank, shape):
    return known(name, rank, shape).requires_grad_(True)


def backward(outputs, name, rank):
    """Backpropagates sum_i (outputs[i] * g_i).sum() with this rank's g_i."""
    loss = sum((out * known(f"{name}.g{i}", rank, out.shape)).sum()
               for i, out in enumerate(outputs))
    loss.backward()


def upstream(name, rank, shape, index=0):
    return known(f"{name}.g{index}", rank, shape)


def check_allreduce(rank, size, where):
    process_set, members = where
    for op, pre, post in [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0),
                          (hvd.Sum, 2.0, 0.25), (hvd.Average, 0.5, 3.0)]:
        name = f"allreduce.{OP_NAMES[op]}.{pre}.{post}.{len(members)}"
        x = leaf(name, rank, (4, 3))
        out = hvd.allreduce(x * 1.0, op=op, prescale_factor=pre, postscale_factor=post,
                            process_set=process_set)
        backward([out], name, rank)
        # Horovod: the same allreduce of the output gradients.
        want = sum(upstream(name, k, (4, 3)) for k in members) * pre * post
        if op == hvd.Average:
            want = want / len(members)
        close(x.grad, want, f"{name}: gradient on rank {rank}")
    # `average=False` (Horovod's older spelling of Sum) is kept by backward too.
    name = f"allreduce.average_false.{len(members)}"
    x = leaf(name, rank, (2,))
    backward([hvd.allreduce(x, average=False, process_set=process_set)], name, rank)
    close(x.grad, sum(upstream(name, k, (2,)) for k in members), f"{name}: gradient")


def check_grouped_allreduce(rank, size, where):
    process_set, members = where
    for op, pre, post in [(hvd.Sum, 1.0, 1.0), (hvd.Average, 2.0, 0.5)]:
        name = f"grouped_allreduce.{OP_NAMES[op]}.{pre}.{len(members)}"
        shapes = [(3, 2), (5,)]
        xs = [leaf(f"{name}.x{i}", rank, shape) for i, shape in enumerate(shapes)]
        outs = hvd.grouped_allreduce(xs, op=op, prescale_factor=pre, postscale_factor=post,
                                     process_set=process_set)
        backward(outs, name, rank)
        for i, (x, shape) in enumerate(zip(xs, shapes)):
            want = sum(upstream(name, k, shape, i) for k in members) * pre * post
            if op == hvd.Average:
                want = want / len(members)
            close(x.grad, want, f"{name}[{i}]: gradient on rank {rank}")


def rows_of(members, width):
    """Uneven first dimensions: the member at index i has i + 1 rows."""
    return [(index + 1, width) for index in range(len(members))]


def check_allgather(rank, size, where):
    process_set, members = where
    me = members.index(rank)
    shapes = rows_of(members, 2)
    total = (sum(s[0] for s in shapes), 2)
    name = f"allgather.{len(members)}"
    x = leaf(name, rank, shapes[me])
    backward([hvd.allgather(x, process_set=process_set)], name, rank)
    # Horovod: the output gradients averaged over the set, this rank's rows.
    average = sum(upstream(name, k, total) for k in members) / len(members)
    start = sum(s[0] for s in shapes[:me])
    close(x.grad, average[start:start + shapes[me][0]], f"{name}: gradient on rank {rank}")


def check_grouped_allgather(rank, size, where):
    process_set, members = where
    me = members.index(rank)
    name = f"grouped_allgather.{len(members)}"
    # Member 0: uneven rows; member 1: reversed uneven rows, another width.
    shapes = [rows_of(members, 2), rows_of(members, 3)[::-1]]
    xs = [leaf(f"{name}.x{i}", rank, s[me]) for i, s in enumerate(shapes)]
    backward(hvd.grouped_allgather(xs, process_set=process_set), name, rank)
    for i, (x, per_rank) in enumerate(zip(xs, shapes)):
        total = (sum(s[0] for s in per_rank), per_rank[0][1])
        average = sum(upstream(name, k, total, i) for k in members) / len(members)
        start = sum(s[0] for s in per_rank[:me])
        close(x.grad, average[start:start + per_rank[me][0]],
              f"{name}[{i}]: gradient on rank {rank}")


def check_broadcast(rank, size, where):
    process_set, members = where
    for root in members:  # a global rank, as in Horovod
        name = f"broadcast.{root}.{len(members)}"
        x = leaf(name, rank, (3, 2))
        out = hvd.broadcast(x, root_rank=root, process_set=process_set)
        close(out.detach(), known(name, root, (3, 2)), f"{name}: forward")
        backward([out], name, rank)
        # Horovod: the set's average of the output gradients on the root, zeros elsewhere.
        average = sum(upstream(name, k, (3, 2)) for k in members) / len(members)
        want = average if rank == root else torch.zeros(3, 2)
        close(x.grad, want, f"{name}: gradient on rank {rank}")


def check_alltoall(rank, size, where):
    process_set, members = where
    n = len(members)
    me = members.index(rank)
    # splits[i][j]: rows member i sends member j; uneven, some zero.
    splits = [[(i + 2 * j) % 3 for j in range(n)] for i in range(n)]
    name = f"alltoall.{n}"
    x = leaf(name, rank, (sum(splits[me]), 4))
    out, received = hvd.alltoall(x, splits=splits[me], process_set=process_set)
    check(received.tolist() == [splits[i][me] for i in range(n)],
          f"{name}: received splits {received.tolist()}")
    backward([out], name, rank)
    # Horovod: the gradient rows go back to the rank they came from. The
    # rows x sent member j sit in member j's output after those of the
    # members before this one.
    parts = []
    for j in range(n):
        g_j = upstream(name, members[j], (sum(splits[i][j] for i in range(n)), 4))
        start = sum(splits[i][j] for i in range(me))
        parts.append(g_j[start:start + splits[me][j]])
    close(x.grad, torch.cat(parts), f"{name}: gradient on rank {rank}")
    # Even splits (splits=None returns only the tensor).
    name = f"alltoall.even.{n}"
    x = leaf(name, rank, (2 * n, 3))
    out = hvd.alltoall(x, process_set=process_set)
    backward([out], name, rank)
    want = torch.cat([upstream(name, k, (2 * n, 3))[2 * me:2 * me + 2] for k in members])
    close(x.grad, want, f"{name}: gradient on rank {rank}")


def scatter_counts(rows, n):
    """Rows per member of a reducescatter: the first rows % n get one more."""
    base, extra = divmod(rows, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def reducescatter_gradient(name, members, rows, width, op, pre, post, index=0):
    """Horovod: every member's output gradient gathered, times the set size
    for Sum (Average: as gathered), times the scale factors."""
    counts = scatter_counts(rows, len(members))
    gathered = torch.cat([upstream(name, k, (counts[i], width), index)
                          for i, k in enumerate(members)])
    factor = pre * post * (len(members) if op == hvd.Sum else 1)
    return gathered * factor


def check_reducescatter(rank, size, where):
    process_set, members = where
    rows = 2 * len(members) + 1  # uneven shares
    for op, pre, post in [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0),
                          (hvd.Sum, 3.0, 0.5), (hvd.Average, 0.5, 4.0)]:
        name = f"reducescatter.{OP_NAMES[op]}.{pre}.{post}.{len(members)}"
        x = leaf(name, rank, (rows, 2))
        out = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post,
                                process_set=process_set)
        backward([out], name, rank)
        want = reducescatter_gradient(name, members, rows, 2, op, pre, post)
        close(x.grad, want, f"{name}: gradient on rank {rank}")


def check_grouped_reducescatter(rank, size, where):
    process_set, members = where
    n = len(members)
    shapes = [(2 * n + 1, 2), (n, 3)]
    for op, pre, post in [(hvd.Sum, 1.0, 1.0), (hvd.Average, 2.0, 0.5)]:
        name = f"grouped_reducescatter.{OP_NAMES[op]}.{pre}.{n}"
        xs = [leaf(f"{name}.x{i}", rank, shape) for i, shape in enumerate(shapes)]
        outs = hvd.grouped_reducescatter(xs, op=op, prescale_factor=pre,
                                         postscale_factor=post, process_set=process_set)
        backward(outs, name, rank)
        for i, (x, (rows, width)) in enumerate(zip(xs, shapes)):
            want = reducescatter_gradient(name, members, rows, width, op, pre, post, i)
            close(x.grad, want, f"{name}[{i}]: gradient on rank {rank}")


def check_chained(rank, size, where):
    """Gradients through two collectives and ordinary ops: each backward
    composes (reducescatter's Sum factor, then allgather's average)."""
    if where[0] is not hvd.global_process_set:
        return
    name = "chained"
    x = leaf(name, rank, (size, 2))
    scattered = hvd.reducescatter(x * 2.0, op=hvd.Sum)  # one row per rank
    gathered = hvd.allgather(scattered.tanh())
    backward([gathered], name, rank)
    # Each rank's forward value of its row, as every rank computes it.
    total = sum(known(name, k, (size, 2)) for k in range(size)) * 2.0
    average = sum(upstream(name, k, (size, 2)) for k in range(size)) / size
    # allgather: this rank's row of the average; through tanh; reducescatter:
    # gathered over the ranks times size (Sum); through the * 2.0.
    through_tanh = average * (1 - total.tanh() ** 2)
    close(x.grad, through_tanh * size * 2.0, f"{name}: gradient on rank {rank}")


def check_differentiable_ops_only(rank, size, where):
    """Min/Max/Product have no gradient: backward fails on every rank, naming the op."""
    if where[0] is not hvd.global_process_set:
        return
    for kind, forward in [("allreduce", lambda x: hvd.allreduce(x, op=hvd.Max)),
                          ("reducescatter", lambda x: hvd.reducescatter(x.repeat(size),
                                                                        op=hvd.Max))]:
        x = torch.ones(3, requires_grad=True)
        try:
            forward(x).sum().backward()
        except ValueError as error:
            check(f"the gradient of {kind}" in str(error) and "not Max" in str(error),
                  f"Max {kind} gradient: {error}")
        else:
            check(False, f"the gradient of a Max {kind} did not fail")


def check_compression(rank, size, where):
    """Compression keeps the graph: the gradient flows back through the casts."""
    if where[0] is not hvd.global_process_set:
        return
    name = "compressed"
    x = known(name, rank, (5,)).float().requires_grad_(True)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    (out * upstream(name, rank, (5,)).float()).sum().backward()
    want = sum(upstream(name, k, (5,)) for k in range(size)).float()
    close(x.grad, want, f"{name}: gradient on rank {rank}", rtol=5e-3, atol=5e-3)


CHECKS = [check_allreduce, check_grouped_allreduce, check_allgather, check_grouped_allgather,
          check_broadcast, check_alltoall, check_reducescatter, check_grouped_reducescatter,
          check_chained, check_differentiable_ops_only, check_compression]


def check_everywhere(rank, size, selected=()):
    """The checks named in `selected` (all when empty) on the global set, then
    on ranks {0, size-1} (on 3 ranks: rank 1 outside, rank 2 at index 1). The
    set's phase comes last: the automatic names of unnamed collectives (those
    in backward too) count per rank, so ranks outside a set fall behind on
    them, and a job that runs other checks runs this one last
    (tests/torch/test_torch_jobs.py)."""
    selected = selected or [c.__name__ for c in CHECKS]
    pair = hvd.add_process_set([0, size - 1])
    for where in [(hvd.global_process_set, list(range(size))), (pair, [0, size - 1])]:
        if rank in where[1]:
            for check_fn in CHECKS:
                if check_fn.__name__ in selected:
                    check_fn(rank, size, where)
    hvd.remove_process_set(pair)


DONE = "autograd OK"


def main():
    hvd.init()
    check_everywhere(hvd.rank(), hvd.size(), sys.argv[1:])
    print(DONE, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
