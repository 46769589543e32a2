"""hvdlite.torch's helpers on real ranks: broadcast_parameters and
broadcast_optimizer_state from different seeds (parameters without gradients
or state, fresh optimizers, parameter groups, LR schedulers, non-tensor
state: every rank ends with root's state_dict), broadcast_object /
allgather_object, SyncBatchNorm against one BatchNorm over the concatenated
batch, and join() with uneven batches per rank. Prints "helpers OK"."""

import torch

import hvdlite.torch as hvd
from rank_checks import check, close, run_checks, same_on_every_rank

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


def same_structure(got, want, what):
    """got == want recursively, tensors by value and dtype, other values by value and type."""
    check(type(got) is type(want), f"{what}: {type(got).__name__} vs {type(want).__name__}")
    if isinstance(want, torch.Tensor):
        check(got.dtype == want.dtype and torch.equal(got, want), f"{what}: {got} vs {want}")
    elif isinstance(want, dict):
        check(got.keys() == want.keys(), f"{what}: keys {sorted(got)} vs {sorted(want)}")
        for key in want:
            same_structure(got[key], want[key], f"{what}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        check(len(got) == len(want), f"{what}: length {len(got)} vs {len(want)}")
        for i, (a, b) in enumerate(zip(got, want)):
            same_structure(a, b, f"{what}[{i}]")
    else:
        check(got == want, f"{what}: {got!r} vs {want!r}")


def equals_root_state(optimizer, root_rank, what):
    """This rank's state_dict is root_rank's, value for value and type for type."""
    state = optimizer.state_dict()
    same_structure(state, hvd.broadcast_object(state, root_rank=root_rank), what)


class BranchNet(torch.nn.Module):
    """`branch` is used only on rank 0, `never` on no rank, `frozen` needs no gradient."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.trunk = torch.nn.Linear(4, 3)
        self.branch = torch.nn.Linear(3, 3)
        self.never = torch.nn.Parameter(torch.randn(3))
        self.frozen = torch.nn.Linear(3, 3).requires_grad_(False)

    def forward(self, x, use_branch):
        h = self.frozen(torch.tanh(self.trunk(x)))
        return h + self.branch(h) if use_branch else h

    def groups(self, rank):
        """Two parameter groups with different (rank-dependent) hyper-parameters."""
        return [{"params": [self.trunk.weight, self.trunk.bias, self.never]},
                {"params": list(self.branch.parameters()) + list(self.frozen.parameters()),
                 "lr": 0.05 * (rank + 1), "betas": (0.8, 0.9 + 0.01 * rank)}]


def local_steps(model, optimizer, scheduler, rank, steps):
    for step in range(steps):
        torch.manual_seed(200 + 10 * rank + step)
        optimizer.zero_grad()
        model(torch.randn(6, 4), use_branch=rank == 0).pow(2).mean().backward()
        optimizer.step()
        scheduler.step()


def check_optimizer_state_without_gradients(rank, size):
    """Parameters with no gradient (a branch only rank 0 takes, one no rank
    uses, a frozen layer), two parameter groups, an LR scheduler stepped a
    different number of times on each rank: after broadcast_optimizer_state
    every rank's state_dict is the root's, whichever rank is root."""
    for root in (0, size - 1):
        model = BranchNet(rank)
        optimizer = torch.optim.Adam(model.groups(rank), lr=0.01 * (rank + 1),
                                     amsgrad=rank == 0)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        local_steps(model, optimizer, scheduler, rank, steps=rank + 1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=root)
        hvd.broadcast_optimizer_state(optimizer, root_rank=root)
        what = f"state without gradients (root {root})"
        equals_root_state(optimizer, root, what)
        states = optimizer.state
        check((model.branch.weight in states) == (root == 0),
              f"{what}: branch state present {model.branch.weight in states} on rank {rank}")
        check(model.never not in states and model.frozen.weight not in states,
              f"{what}: state for a parameter no rank computed a gradient for")
        want_lr = 0.05 * (root + 1) * 0.5 ** (root + 1)
        check(optimizer.param_groups[1]["lr"] == want_lr,
              f"{what}: group 1 lr {optimizer.param_groups[1]['lr']}, root's is {want_lr}")
        # Training on, distributed, keeps every rank identical; no rank hangs on
        # the parameters without gradients.
        distributed = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        local_steps(model, distributed, scheduler, rank, steps=2)
        same_on_every_rank(model.named_parameters(), f"{what}: after distributed steps")


def check_fresh_optimizer_state(rank, size):
    """An optimizer with no state yet gets it as Horovod creates it (one step
    with zero gradients on the root), wrapped in a DistributedOptimizer or not;
    the parameters stay as they were, and on every rank each trainable
    parameter is left a zero .grad as in Horovod (its test_broadcast_state_no_grad
    broadcasts one); a frozen one keeps None."""
    makers = {
        "Adam": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
        "SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.1),
    }
    for name, make in makers.items():
        for wrapped in (False, True):
            model = BranchNet(0)
            optimizer = make(model.parameters())
            if wrapped:
                optimizer = hvd.DistributedOptimizer(optimizer,
                                                     named_parameters=model.named_parameters())
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            what = f"fresh {name}{' (DistributedOptimizer)' if wrapped else ''}"
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
            equals_root_state(optimizer, 0, what)
            for n, p in model.named_parameters():
                check(torch.equal(p, before[n]), f"{what}: {n} moved")
                if p.requires_grad:
                    check(p.grad is not None and not p.grad.is_sparse
                          and torch.equal(p.grad, torch.zeros_like(p)),
                          f"{what}: {n}.grad is {p.grad}, not zeros")
                else:
                    check(p.grad is None, f"{what}: frozen {n}.grad was set")
                state = optimizer.state.get(p, {})
                if not p.requires_grad:
                    check(not state, f"{what}: state for frozen {n}")
                elif name == "Adam":
                    # Zero gradient plus weight decay: g = 0.1 p, one Adam step.
                    g = 0.1 * p.detach()
                    check(float(state["step"]) == 1.0, f"{what}: {n} step {state.get('step')}")
                    close(state["exp_avg"], 0.1 * g, f"{what}: {n} exp_avg")
                    close(state["exp_avg_sq"], 0.001 * g * g, f"{what}: {n} exp_avg_sq")
                else:
                    close(state["momentum_buffer"], 0.1 * p.detach(), f"{what}: {n} momentum")
            if wrapped:
                local_steps(model, optimizer, torch.optim.lr_scheduler.LambdaLR(
                    optimizer, lambda epoch: 1.0), rank, steps=2)
                same_on_every_rank(model.named_parameters(), f"{what}: after distributed steps")


class CountingSGD(torch.optim.SGD):
    """SGD that also keeps non-tensor state: ints, floats, bools, None, tuples,
    lists (not strings: torch's own load_state_dict cannot take them)."""

    def step(self, closure=None):
        loss = super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state["count"] = state.get("count", 0) + 1
                state["scale"] = 0.5 * state["count"]
                state["odd"] = state["count"] % 2 == 1
                state["pair"] = (state["count"], float(p.detach().sum()))
                state["history"] = [state["count"], None, [True, 2.5]]
                state["nothing"] = None
        return loss


def check_non_tensor_state(rank, size):
    model = BranchNet(rank)
    optimizer = CountingSGD(model.groups(rank)[:1] + [
        {"params": list(model.branch.parameters()), "lr": 0.3, "nesterov": rank == 0,
         "momentum": 0.5 + 0.1 * rank}], lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    # Rank 0 trained (branch state only there); the others did not.
    if rank == 0:
        local_steps(model, optimizer, scheduler, rank, steps=3)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    equals_root_state(optimizer, 0, "non-tensor state")
    state = optimizer.state[model.trunk.weight]
    check(type(state["count"]) is int and state["count"] == 3 and type(state["pair"]) is tuple,
          f"non-tensor state: {state}")


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


CHECKS = [check_broadcast_model_and_optimizer, check_optimizer_state_without_gradients,
          check_fresh_optimizer_state, check_non_tensor_state, check_objects,
          check_sync_batch_norm, check_join_uneven_batches]

DONE = "helpers OK"

if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
