"""hvdlite.torch's helpers on real ranks: broadcast_parameters and
broadcast_optimizer_state from different seeds, broadcast_object /
allgather_object, SyncBatchNorm against one BatchNorm over the concatenated
batch, and join() with uneven batches per rank. Prints "helpers OK"."""
import torch

import hvdlite.torch as hvd
from rank_checks import check, close, same_on_every_rank

torch.set_default_dtype(torch.float64)


def seeded_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                               torch.nn.Linear(6, 2))


def local_step(model, optimizer, seed):
    """One step on this rank's own data (a closure, so LBFGS works too)."""
    torch.manual_seed(100 + seed)
    x = torch.randn(8, 4)

    def closure():
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss
    optimizer.step(closure)


def check_broadcast_model_and_optimizer(rank, size):
    makers = {
        "SGD": lambda p, r: torch.optim.SGD(p, lr=0.1 * (r + 1), momentum=0.5 + 0.1 * r,
                                            nesterov=r == 0),
        "Adam": lambda p, r: torch.optim.Adam(p, lr=0.01 * (r + 1), betas=(0.9, 0.99 - 0.01 * r),
                                              amsgrad=r == 0),
        "LBFGS": lambda p, r: torch.optim.LBFGS(p, lr=0.5 * (r + 1), history_size=3 + r),
    }
    for name, make in makers.items():
        # Root trained (state exists), the others are fresh (lazy state: none yet);
        # then the other way round: the root fresh, the others trained.
        for root_trained in (True, False):
            model = seeded_model(rank)
            optimizer = make(model.parameters(), rank)
            trains = (rank == 0) == root_trained
            if trains:
                local_step(model, optimizer, rank)
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            what = f"{name} (root {'trained' if root_trained else 'fresh'})"
            same_on_every_rank(model.state_dict().items(), f"{what}: model")
            state = optimizer.state_dict()
            root_state = hvd.broadcast_object(state, root_rank=0)
            check(repr(root_state["param_groups"]) == repr(state["param_groups"]),
                  f"{what}: hyper-parameters {state['param_groups']} vs root's "
                  f"{root_state['param_groups']}")
            check(state["state"].keys() == root_state["state"].keys(), f"{what}: state keys")
            for key, entries in state["state"].items():
                for field, value in entries.items():
                    want = root_state["state"][key][field]
                    if isinstance(value, torch.Tensor):
                        check(torch.equal(value, want), f"{what}: state {key}.{field} differs")
                    elif isinstance(value, list):
                        check(all(torch.equal(a, b) for a, b in zip(value, want)),
                              f"{what}: state {key}.{field} differs")
                    else:
                        check(value == want, f"{what}: state {key}.{field} {value} vs {want}")
            if name != "LBFGS":
                # Training on from the same state keeps every rank identical.
                distributed = hvd.DistributedOptimizer(optimizer,
                                                       named_parameters=model.named_parameters())
                local_step(model, distributed, rank)
                same_on_every_rank(model.named_parameters(), f"{what}: after a distributed step")
    # named_parameters() (a generator of pairs) is accepted too.
    model = seeded_model(rank)
    hvd.broadcast_parameters(model.named_parameters(), root_rank=size - 1)
    want = seeded_model(size - 1)
    for (name, got), expected in zip(model.named_parameters(), want.parameters()):
        check(torch.equal(got, expected), f"broadcast_parameters(named_parameters()): {name}")


def check_objects(rank, size):
    got = hvd.broadcast_object({"epoch": 3, "rank": rank, "tags": ["a"] * rank}, root_rank=1)
    check(got == {"epoch": 3, "rank": 1, "tags": ["a"]}, f"broadcast_object: {got}")
    got = hvd.allgather_object(("rank", rank, "x" * 1000 * rank))
    check(got == [("rank", r, "x" * 1000 * r) for r in range(size)], "allgather_object")


def sync_bn_vs_reference(rank, size, shape_tail, momentum):
    """Ranks have 3 + r samples each; one BatchNorm over all of them is the reference."""
    channels = shape_tail[0]
    generator = torch.Generator().manual_seed(7)
    counts = [3 + r for r in range(size)]
    full = torch.randn(sum(counts), *shape_tail, generator=generator) * 3 + 1
    upstream = torch.randn(sum(counts), *shape_tail, generator=generator)
    start = sum(counts[:rank])
    mine = slice(start, start + counts[rank])

    reference = torch.nn.BatchNorm1d(channels, momentum=momentum) if len(shape_tail) < 3 else \
        torch.nn.BatchNorm2d(channels, momentum=momentum)
    with torch.no_grad():
        reference.weight.copy_(torch.linspace(0.5, 2.0, channels))
        reference.bias.copy_(torch.linspace(-1.0, 1.0, channels))
    sync = hvd.SyncBatchNorm.convert_sync_batchnorm(
        torch.nn.Sequential(type(reference)(channels, momentum=momentum)))[0]
    check(isinstance(sync, hvd.SyncBatchNorm), "convert_sync_batchnorm did not convert")
    sync.load_state_dict(reference.state_dict())
    what = f"SyncBatchNorm {tuple(shape_tail)} momentum={momentum}"

    for step in range(2):  # twice: running statistics accumulate
        x_ref = (full + step).clone().requires_grad_()
        x = (full + step)[mine].clone().requires_grad_()
        out_ref = reference(x_ref)
        out = sync(x)
        close(out, out_ref[mine], f"{what}: forward, step {step}")
        (out_ref * upstream).sum().backward()
        (out * upstream[mine]).sum().backward()
        close(x.grad, x_ref.grad[mine], f"{what}: input gradient, step {step}")
        for param, ref_param in ((sync.weight, reference.weight), (sync.bias, reference.bias)):
            close(hvd.allreduce(param.grad, op=hvd.Sum), ref_param.grad,
                  f"{what}: summed parameter gradient, step {step}")
            param.grad = None
            ref_param.grad = None
    close(sync.running_mean, reference.running_mean, f"{what}: running_mean")
    close(sync.running_var, reference.running_var, f"{what}: running_var")
    check(int(sync.num_batches_tracked) == 2, f"{what}: num_batches_tracked")
    sync.eval()
    reference.eval()
    close(sync(full[mine]), reference(full)[mine], f"{what}: eval mode")


def check_sync_batch_norm(rank, size):
    sync_bn_vs_reference(rank, size, (5, 3, 2), momentum=0.1)
    sync_bn_vs_reference(rank, size, (4,), momentum=None)
    # float32 input: statistics in float32, tolerance to match.
    bn = hvd.SyncBatchNorm(3).float()
    out = bn(torch.randn(4, 3, dtype=torch.float32) + rank)
    check(out.dtype == torch.float32, f"SyncBatchNorm float32 output is {out.dtype}")
    same_on_every_rank([("running_mean", bn.running_mean)], "SyncBatchNorm float32 running_mean")


def check_join_uneven_batches(rank, size):
    """Rank r has 2 + r batches; the ranks that ran out join() and contribute
    zero gradients, which still count in the average (Horovod's semantics), so
    every rank's parameters equal the one-process run whose loss at each step is
    the sum over the ranks still training divided by the number of ranks, up to
    the step it left."""
    batches = [2 + r for r in range(size)]
    generator = torch.Generator().manual_seed(11)
    data = [[(torch.randn(4, 3, generator=generator), torch.randn(4, 1, generator=generator))
             for _ in range(batches[r])] for r in range(size)]

    def make():
        torch.manual_seed(5)
        model = torch.nn.Linear(3, 1)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    model, optimizer = make()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    for x, y in data[rank]:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    last = hvd.join()
    check(last == size - 1, f"join() returned {last}, expected {size - 1}")

    reference, reference_optimizer = make()
    for step in range(batches[rank]):
        active = [r for r in range(size) if step < batches[r]]
        reference_optimizer.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(reference(data[r][step][0]), data[r][step][1])
                   for r in active) / size
        loss.backward()
        reference_optimizer.step()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        close(got, want, f"join with uneven batches: {name}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check_broadcast_model_and_optimizer(rank, size)
    check_objects(rank, size)
    check_sync_batch_norm(rank, size)
    check_join_uneven_batches(rank, size)
    print("helpers OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
