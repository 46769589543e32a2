"""DistributedOptimizer(sharding_stage=1|2) on real ranks against the unsharded
DistributedOptimizer on the same seeds and batches (float64: equal to 1e-12),
then checkpoints across sizes, elastic state, clipping and the refusals.
Prints "sharded OK" at the end."""
import copy
import os
import tempfile

import torch

import hvdlite.torch as hvd
from rank_checks import check, close, expect_error, run_checks, same_on_every_rank

torch.set_default_dtype(torch.float64)
BATCH = 3   # per rank
STEPS = 20


class Net(torch.nn.Module):
    """Uneven parameters: 7 rows (not divisible by 2, 3 or 4), a 0-d scale, one
    row (fewer than the ranks), and one no rank ever uses."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(5, 7)
        self.fc2 = torch.nn.Linear(7, 3)
        self.scale = torch.nn.Parameter(torch.tensor(0.7))
        self.row = torch.nn.Parameter(torch.randn(1, 3))
        self.unused = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return self.scale * self.fc2(torch.tanh(self.fc1(x))) + self.row


def batches(size, steps=STEPS, passes=1, seed=1):
    generator = torch.Generator().manual_seed(seed)
    n = size * BATCH * passes
    return [(torch.randn(n, 5, generator=generator), torch.randn(n, 3, generator=generator))
            for _ in range(steps)]


def train(model, optimizer, data, rank, size, passes=1, clip=None):
    """This rank's slices of each global batch; clip: by global norm after backward."""
    norms = []
    for x, y in data:
        optimizer.zero_grad()
        per_pass = x.shape[0] // passes
        for p in range(passes):
            xs, ys = x[p * per_pass:(p + 1) * per_pass], y[p * per_pass:(p + 1) * per_pass]
            xs, ys = xs[rank * BATCH:(rank + 1) * BATCH], ys[rank * BATCH:(rank + 1) * BATCH]
            (torch.nn.functional.mse_loss(model(xs), ys) / passes).backward()
        if clip is None:
            optimizer.step()
        elif hasattr(optimizer, "clip_grad_norm_"):
            norms.append(optimizer.clip_grad_norm_(clip).item())
            optimizer.step()
        else:
            optimizer.synchronize()
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item())
            with optimizer.skip_synchronize():
                optimizer.step()
    return norms


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


def adamw(params):
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def wrap(model, make, stage, **options):
    return hvd.DistributedOptimizer(make(model.parameters()),
                                    named_parameters=model.named_parameters(),
                                    sharding_stage=stage, **options)


def compare(rank, size, what, make, stage, passes=1, tol=1e-12, clip=None, **options):
    """Sharded against unsharded: the same parameters after STEPS steps."""
    data = batches(size, passes=passes)
    model, reference = Net(), Net()
    optimizer = wrap(model, make, stage, backward_passes_per_step=passes, **options)
    norms = train(model, optimizer, data, rank, size, passes, clip)
    reference_norms = train(reference, wrap(reference, make, 0, backward_passes_per_step=passes,
                                            **options), data, rank, size, passes, clip)
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        close(got, want, f"{what} stage {stage}: {name} vs unsharded", rtol=tol, atol=tol)
    close(torch.tensor(norms), torch.tensor(reference_norms), f"{what}: clipped norms", rtol=tol,
          atol=tol)
    same_on_every_rank(model.named_parameters(), what)
    return optimizer


def check_equivalence(rank, size):
    for stage in (1, 2):
        for make in (sgd, adam, adamw):
            optimizer = compare(rank, size, make.__name__, make, stage)
            # Optimizer state is this rank's rows only.
            owned = sum(t.numel() for values in optimizer.state.values()
                        for k, t in values.items() if k != "step")
            per_element = 1 if make is sgd else 2
            check(owned == per_element * optimizer._layout.owned_elements(),
                  f"{make.__name__}: {owned} state elements, expected the owned rows only")


def check_options(rank, size):
    compare(rank, size, "backward_passes_per_step=2", adam, 2, passes=2)
    compare(rank, size, "backward_passes_per_step=3", sgd, 1, passes=3)
    compare(rank, size, "clip 0.05", adam, 1, clip=0.05)
    compare(rank, size, "clip 0.05", sgd, 2, clip=0.05)
    compare(rank, size, "clip no-op", sgd, 1, clip=1e9)
    compare(rank, size, "gradient_predivide_factor", adam, 2,
            gradient_predivide_factor=float(size))
    compare(rank, size, "op=Sum", sgd, 1, op=hvd.Sum)
    compare(rank, size, "groups=2", adam, 1, groups=2)
    # Note [Gradients in flight]: with no room, every hook waits for the
    # reducescatters before it; the result is the same, and after backward
    # at most the last one is still in flight.
    from hvdlite.torch import sharded_optimizer
    room, sharded_optimizer._MAX_IN_FLIGHT_BYTES = sharded_optimizer._MAX_IN_FLIGHT_BYTES, 0
    try:
        optimizer = compare(rank, size, "no gradients in flight", adam, 2)
        model = Net()
        optimizer = wrap(model, adam, 2)
        x, y = batches(size, steps=1)[0]
        torch.nn.functional.mse_loss(model(x[rank * BATCH:(rank + 1) * BATCH]),
                                     y[rank * BATCH:(rank + 1) * BATCH]).backward()
        in_flight = [launched for launched in optimizer._pending if launched.handle is not None]
        check(len(in_flight) <= 1, f"{len(in_flight)} reducescatters in flight after backward with no room")
        optimizer.step()
    finally:
        sharded_optimizer._MAX_IN_FLIGHT_BYTES = room
    # fp16 on the wire: the reducescatter and the allreduce add the same
    # fp16 values in different orders, so the steps agree to fp16's precision.
    compare(rank, size, "fp16 compression", sgd, 2, tol=2e-3,
            compression=hvd.Compression.fp16)


def check_process_set(rank, size):
    """A sharded optimizer over ranks {0, 1} (size 2); rank 2 trains alone."""
    if size < 3:
        return
    pair = hvd.add_process_set([0, 1])
    data = batches(2) if rank < 2 else [(x[:BATCH], y[:BATCH]) for x, y in batches(1)]
    model, reference = Net(), Net()
    optimizer = wrap(model, adam, 2, process_set=pair)
    train(model, optimizer, data, min(rank, 1) if rank < 2 else 0, 2 if rank < 2 else 1)
    train(reference, wrap(reference, adam, 0, process_set=pair), data,
          min(rank, 1) if rank < 2 else 0, 2 if rank < 2 else 1)
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        close(got, want, f"process_set: {name}")
    check(optimizer._layout.size == (2 if rank < 2 else 1), "process set layout")
    hvd.remove_process_set(pair)


def check_wrapping(rank, size):
    """isinstance, an LR scheduler and param_group hyper-parameters on the wrapper."""
    model = Net()
    optimizer = wrap(model, adam, 1)
    check(isinstance(optimizer, torch.optim.Adam), "the wrapper is not an Adam")
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train(model, optimizer, batches(size, 1), rank, size)
    scheduler.step()
    check(optimizer.param_groups[0]["lr"] == 0.005, "StepLR did not act on the wrapper")
    index = [p is model.fc1.weight for p in model.parameters()].index(True)
    shard = optimizer.param_groups[0]["params"][index]
    start, count = optimizer._layout.ranges[index]
    check(shard.shape == (count, 5) and (count == 0 or shard.data_ptr() ==
                                         model.fc1.weight.data_ptr() + 8 * 5 * start),
          "the shard is not a view of the parameter's rows")
    # Stage 2 frees the full gradients at step; stage 1 keeps them.
    for stage in (1, 2):
        m = Net()
        o = wrap(m, sgd, stage)
        x, y = batches(size, 1)[0]
        torch.nn.functional.mse_loss(m(x[rank * BATCH:(rank + 1) * BATCH]),
                                     y[rank * BATCH:(rank + 1) * BATCH]).backward()
        o.step()
        check((m.fc1.weight.grad is None) == (stage == 2), f"stage {stage}: full gradient kept?")


def full_dict_equal(a, b, what):
    check(sorted(a["state"]) == sorted(b["state"]), f"{what}: state indices differ")
    for index, values in a["state"].items():
        for key, value in values.items():
            other = b["state"][index][key]
            check(torch.is_tensor(value) == torch.is_tensor(other), f"{what}: {index}.{key} type")
            close(torch.as_tensor(value).double(), torch.as_tensor(other).double(),
                  f"{what}: {index}.{key}", rtol=0, atol=0)


def check_checkpoints(rank, size):
    """Full state at N=size into an unsharded torch optimizer and into a sharded
    one over 2 ranks (a process set: another world size), shard files, and back."""
    data = batches(size, steps=4)
    model = Net()
    optimizer = wrap(model, adam, 1)
    train(model, optimizer, data, rank, size)
    full = optimizer.consolidated_state_dict(root_rank=None)
    on_root = optimizer.consolidated_state_dict(root_rank=0)
    check((on_root is None) == (rank != 0), "consolidated_state_dict(root_rank=0) on others")
    # A plain torch Adam takes it and continues as the unsharded wrapper would.
    plain_model = copy.deepcopy(model)
    plain = adam(plain_model.parameters())
    plain.load_state_dict(copy.deepcopy(full))
    reference = wrap(plain_model, lambda params: plain, 0)
    more = batches(size, steps=3, seed=2)
    train(plain_model, reference, more, rank, size)
    # This rank's shard round trips on the same rank and size.
    shard = optimizer.state_dict()
    copy_model = copy.deepcopy(model)
    again = wrap(copy_model, adam, 1)
    again.load_state_dict(copy.deepcopy(shard))
    train(copy_model, again, more, rank, size)
    train(model, optimizer, more, rank, size)
    for (name, got), want, mine in zip(model.named_parameters(), plain_model.parameters(),
                                       copy_model.parameters()):
        close(got, want, f"full checkpoint into torch Adam: {name}")
        close(mine, got, f"shard state_dict round trip: {name}", rtol=0, atol=0)
    # Shard files and the full state, loaded at size 2 (ranks 0 and 1).
    folder = hvd.broadcast_object(tempfile.mkdtemp() if rank == 0 else None, 0)
    path = os.path.join(folder, f"shard.{rank}")
    optimizer.save_shard(path)
    hvd.barrier()
    full = optimizer.consolidated_state_dict(root_rank=None)
    pair = hvd.add_process_set([0, 1])
    if rank < 2:
        for how in ("full", "shard files"):
            m = copy.deepcopy(model)
            o = wrap(m, adam, 2, process_set=pair)
            if how == "full":
                o.load_state_dict(copy.deepcopy(full))
            else:
                o.load_shards([os.path.join(folder, f"shard.{r}") for r in range(size)])
            check(o._layout.size == 2, "layout at size 2")
            back = o.consolidated_state_dict(root_rank=None)
            full_dict_equal(back, full, f"{how} at size {size} -> 2 -> full")
    hvd.barrier()
    hvd.remove_process_set(pair)
    if rank == 0:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)
    # An unsharded optimizer's state_dict loads into a sharded one at any size.
    m = copy.deepcopy(plain_model)
    o = wrap(m, adam, 1)
    o.load_state_dict(copy.deepcopy(plain.state_dict()))
    full_dict_equal(o.consolidated_state_dict(root_rank=None), plain.state_dict(),
                    "unsharded state_dict -> sharded -> full")
    expect_error(ValueError, "holds the rows of rank", lambda: (
        o.load_state_dict({**shard, "hvdlite.shard": {**shard["hvdlite.shard"],
                                                      "rank": (rank + 1) % size}})),
        "a shard of another rank")


def check_elastic_state(rank, size):
    """TorchState commits the whole state and restores it; its sync re-shards."""
    model = Net()
    optimizer = wrap(model, adam, 2)
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    check(state.sync_after_removal, "a sharded optimizer must be synced after a removal")
    train(model, optimizer, batches(size, steps=3), rank, size)
    state.commit()
    committed = optimizer.consolidated_state_dict(root_rank=None)
    train(model, optimizer, batches(size, steps=2, seed=5), rank, size)
    state.restore()
    full_dict_equal(optimizer.consolidated_state_dict(root_rank=None), committed, "restore")
    state.sync()
    full_dict_equal(optimizer.consolidated_state_dict(root_rank=None), committed, "sync")


class LAMB(torch.optim.SGD):
    """Stands for a LAMB implementation (refused by its class name)."""


def check_errors(rank, size):
    model = Net()
    expect_error(ValueError, "trust ratio", lambda: wrap(model, lambda p: LAMB(p, lr=0.1), 1),
                 "LAMB")
    expect_error(ValueError, "LBFGS cannot be sharded",
                 lambda: wrap(model, lambda p: torch.optim.LBFGS(p), 1), "LBFGS")
    expect_error(ValueError, "PowerSGD compression allreduces low-rank factors",
                 lambda: wrap(model, sgd, 1, compression=hvd.Compression.powersgd(rank=1)),
                 "PowerSGD")
    expect_error(ValueError, "Adasum", lambda: wrap(model, sgd, 2, op=hvd.Adasum), "Adasum")
    expect_error(ValueError, "sharding_stage must be", lambda: wrap(model, sgd, 3), "stage 3")
    # A parameter list that differs on one rank fails on every rank.
    params = list(model.named_parameters())
    if rank == size - 1:
        params = params[:-1]
    expect_error(ValueError, "every rank must pass the same parameters", lambda: (
        hvd.DistributedOptimizer(sgd([p for _, p in params]), named_parameters=params,
                                 sharding_stage=1)), "different parameters")
    # Sparse gradients are refused with what to do.
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(embedding.parameters(), lr=0.1),
                                         named_parameters=embedding.named_parameters(),
                                         sharding_stage=1)
    expect_error(ValueError, "sparse_as_dense=True",
                 lambda: embedding(torch.tensor([rank])).sum().backward(), "sparse gradient")


CHECKS = [check_equivalence, check_options, check_process_set, check_wrapping, check_checkpoints,
          check_elastic_state, check_errors]

DONE = "sharded OK"

if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
