"""DistributedOptimizer on real ranks against one process: N ranks with batch b
must end with the parameters of one process trained on batch N*b (float64),
for each option; then the misuse errors. Prints "optimizer OK" at the end."""
import time
import warnings

import torch

import hvdlite.torch as hvd
from rank_checks import check, close, expect_error, run_checks, same_on_every_rank

torch.set_default_dtype(torch.float64)
BATCH = 4   # per rank
STEPS = 3


class Net(torch.nn.Module):
    """Two layers, a parameter no one uses, and one only some rows use
    (`extra`), so that some ranks compute no gradient for it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(5, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.unused = torch.nn.Parameter(torch.randn(3))
        self.extra = torch.nn.Parameter(torch.randn(5, 3))

    def forward(self, x, extra_rows=None):
        out = self.fc2(torch.tanh(self.fc1(x)))
        if extra_rows is not None and extra_rows.any():
            out = out + extra_rows[:, None] * (x @ self.extra)
        return out


def global_batches(size, steps, passes=1):
    generator = torch.Generator().manual_seed(1)
    n = size * BATCH * passes
    return [(torch.randn(n, 5, generator=generator), torch.randn(n, 3, generator=generator))
            for _ in range(steps)]


def extra_mask(rows):
    """Only the first BATCH rows of a global batch (rank 0's) use `extra`."""
    mask = torch.zeros(rows)
    mask[:BATCH] = 1.0
    return mask


def train(model, optimizer, batches, rank, size, passes=1, clip=None, sync_first=False):
    """rank=None: one process on whole global batches; else this rank's slices."""
    for x, y in batches:
        optimizer.zero_grad()
        rows_per_pass = x.shape[0] // passes
        for p in range(passes):
            xs, ys = x[p * rows_per_pass:(p + 1) * rows_per_pass], y[p * rows_per_pass:(p + 1) * rows_per_pass]
            if rank is None:
                mask = extra_mask(len(xs))
            else:
                xs, ys = xs[rank * BATCH:(rank + 1) * BATCH], ys[rank * BATCH:(rank + 1) * BATCH]
                mask = torch.ones(BATCH) if rank == 0 else None
            loss = torch.nn.functional.mse_loss(model(xs, mask), ys) / passes
            loss.backward()
        if clip is not None and sync_first:
            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with optimizer.skip_synchronize():
                optimizer.step()
        else:
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
    return model


def compare(rank, size, what, make_optimizer, passes=1, reference_lr_scale=1.0, tol=1e-10,
            clip=None, **options):
    batches = global_batches(size, STEPS, passes)
    model = Net()
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters(), 1.0),
                                         named_parameters=model.named_parameters(),
                                         backward_passes_per_step=passes, **options)
    train(model, optimizer, batches, rank, size, passes, clip=clip, sync_first=clip is not None)
    reference = Net()
    train(reference, make_optimizer(reference.parameters(), reference_lr_scale), batches, None,
          size, passes, clip=clip)
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        close(got, want, f"{what}: {name} vs one process", rtol=tol, atol=tol)
    same_on_every_rank(model.named_parameters(), what)
    check(torch.equal(model.unused, Net().unused), f"{what}: a parameter without gradient moved")


def sgd(params, scale):
    return torch.optim.SGD(params, lr=0.1 * scale, momentum=0.9)


def adam(params, scale):
    return torch.optim.Adam(params, lr=0.01 * scale)


def check_against_one_process(rank, size):
    compare(rank, size, "SGD+momentum", sgd)
    compare(rank, size, "Adam", adam)
    compare(rank, size, "backward_passes_per_step=2", sgd, passes=2)
    compare(rank, size, "backward_passes_per_step=2 Adam", adam, passes=2)
    compare(rank, size, "fp16 compression", sgd, tol=2e-3, compression=hvd.Compression.fp16)
    compare(rank, size, "bf16 compression", sgd, tol=2e-2, compression=hvd.Compression.bf16)
    compare(rank, size, "num_groups=2", sgd, num_groups=2)
    compare(rank, size, "groups=2", adam, groups=2)
    compare(rank, size, "gradient_predivide_factor", sgd, gradient_predivide_factor=float(size))
    # Sum adds the ranks' averages: the one-process step with lr * size.
    compare(rank, size, "op=Sum", lambda p, s: torch.optim.SGD(p, lr=0.02 * s), op=hvd.Sum,
            reference_lr_scale=float(size))
    compare(rank, size, "synchronize + clip + skip_synchronize", sgd, clip=0.05)


class BranchNet(torch.nn.Module):
    """`trunk` and `head` on every rank, `branch` only on the ranks that take
    it this step, `never` on none."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.trunk = torch.nn.Linear(5, 6)
        self.head = torch.nn.Linear(6, 3)
        self.branch = torch.nn.Linear(6, 3)
        self.never = torch.nn.Linear(6, 3)

    def forward(self, x, takes_branch):
        h = torch.tanh(self.trunk(x))
        return self.head(h) + self.branch(h) if takes_branch else self.head(h)


BRANCH_TAKERS = {
    "rank 0 only": lambda rank, step, size: rank == 0,
    "rank 0, no rank on step 1": lambda rank, step, size: rank == 0 and step != 1,
    "a different rank each step": lambda rank, step, size: rank == step % size,
}


def train_branches(model, optimizer, batches, takes, size, rank=None, passes=1):
    """rank=None: one process; every rank's rows with that rank's branch choice,
    the losses averaged over the ranks. A parameter that then has no gradient
    gets a zero one, as Horovod's DistributedOptimizer gives it (the step
    applies, e.g. momentum and weight decay)."""
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        rows = x.shape[0] // passes
        for p in range(passes):
            for r in range(size) if rank is None else [rank]:
                lo = p * rows + r * BATCH
                out = model(x[lo:lo + BATCH], takes(r, step, size))
                loss = torch.nn.functional.mse_loss(out, y[lo:lo + BATCH]) / passes
                (loss / size if rank is None else loss).backward()
        if rank is None:
            for param in model.parameters():
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
        optimizer.step()


def check_unused_parameters(rank, size):
    """Parameters without a gradient on some ranks (a branch), on every rank
    for a step, or always (`never`): no rank hangs, every rank ends with the
    same parameters, equal to one process where each missing gradient is zero."""
    makers = {
        "SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.05),
        "Adam": lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.05),
    }
    options = [("", {}), (" groups=2", {"groups": 2}), (" passes=2", {"passes": 2})]
    for taker_name, takes in BRANCH_TAKERS.items():
        for maker_name, make in makers.items():
            for option_name, option in options:
                option = dict(option)
                passes = option.pop("passes", 1)
                what = f"{maker_name}{option_name}, branch on {taker_name}"
                batches = global_batches(size, 4, passes)
                model = BranchNet()
                optimizer = hvd.DistributedOptimizer(
                    make(model.parameters()), named_parameters=model.named_parameters(),
                    backward_passes_per_step=passes, **option)
                train_branches(model, optimizer, batches, takes, size, rank, passes)
                reference = BranchNet()
                train_branches(reference, make(reference.parameters()), batches, takes, size,
                               passes=passes)
                for (name, got), want in zip(model.named_parameters(), reference.parameters()):
                    close(got, want, f"{what}: {name} vs one process")
                same_on_every_rank(model.named_parameters(), what)
                # As in Horovod: the unused layer's gradient is a zero tensor, and
                # weight decay moved it.
                check(model.never.weight.grad is not None and
                      not model.never.weight.grad.any(), f"{what}: never.weight.grad")
                check(not torch.equal(model.never.weight, BranchNet().never.weight),
                      f"{what}: the step did not apply to the parameter without gradient")


def check_explicit_groups(rank, size):
    batches = global_batches(size, STEPS)
    model = Net()
    optimizer = hvd.DistributedOptimizer(
        sgd(model.parameters(), 1.0), named_parameters=model.named_parameters(),
        groups=[[model.fc1.weight, model.fc2.weight], [model.extra, model.unused]])
    train(model, optimizer, batches, rank, size)
    reference = Net()
    train(reference, sgd(reference.parameters(), 1.0), batches, None, size)
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        close(got, want, f"explicit groups: {name} vs one process")


def check_closure(rank, size):
    """step(closure): the optimizer evaluates the closure, whose gradients are
    averaged before the update."""
    batches = global_batches(size, STEPS)
    results = []
    for distributed in (True, False):
        model = Net()
        optimizer = adam(model.parameters(), 1.0)
        if distributed:
            optimizer = hvd.DistributedOptimizer(optimizer,
                                                 named_parameters=model.named_parameters())
        for x, y in batches:
            mask = extra_mask(len(x))
            if distributed:
                x, y = x[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]
                mask = torch.ones(BATCH) if rank == 0 else None

            def closure():
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x, mask), y)
                loss.backward()
                return loss
            optimizer.step(closure)
        results.append(model)
    for (name, got), want in zip(results[0].named_parameters(), results[1].parameters()):
        close(got, want, f"step(closure): {name} vs one process")


def check_overlap(rank, size):
    """The last layer's allreduce starts, and finishes, while backward is still
    working on the layers before it."""
    model = Net()
    optimizer = hvd.DistributedOptimizer(sgd(model.parameters(), 1.0),
                                         named_parameters=model.named_parameters())
    seen = {}

    class SlowBackward(torch.autograd.Function):
        """Identity whose backward (between fc2's and fc1's) waits for fc2's allreduce."""

        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            launched = optimizer._launched.get("fc2.weight")
            seen["started"] = launched is not None
            deadline = time.monotonic() + 30
            while launched is not None and not hvd.poll(launched.handle) and time.monotonic() < deadline:
                time.sleep(0.001)
            seen["finished"] = launched is not None and hvd.poll(launched.handle)
            seen["fc1 pending"] = model.fc1.weight.grad is None
            return grad

    x, y = global_batches(size, 1)[0]
    xs, ys = x[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]
    out = model.fc2(SlowBackward.apply(torch.tanh(model.fc1(xs))))
    torch.nn.functional.mse_loss(out, ys).backward()
    check(seen.get("started"), "fc2.weight's allreduce had not started when backward reached fc1")
    check(seen.get("finished") and seen.get("fc1 pending"),
          f"fc2.weight's allreduce did not finish during backward: {seen}")
    optimizer.step()
    same_on_every_rank(model.named_parameters(), "overlap step")


def check_sparse(rank, size):
    """Embedding gradients: allgathered (sparse) or allreduced (sparse_as_dense)."""
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 10, (STEPS, size * BATCH), generator=generator)
    targets = torch.randn(STEPS, size * BATCH, 2, generator=generator)
    for sparse_as_dense in (False, True):
        results = []
        for distributed in (True, False):
            torch.manual_seed(3)
            embedding = torch.nn.Embedding(10, 2, sparse=True)
            optimizer = torch.optim.SGD(embedding.parameters(), lr=0.5)
            if distributed:
                optimizer = hvd.DistributedOptimizer(
                    optimizer, named_parameters=embedding.named_parameters(),
                    sparse_as_dense=sparse_as_dense)
            for step in range(STEPS):
                rows = slice(rank * BATCH, (rank + 1) * BATCH) if distributed else slice(None)
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(embedding(ids[step, rows]), targets[step, rows])
                loss.backward()
                optimizer.step()
            results.append(embedding.weight.detach())
        close(results[0], results[1], f"sparse gradients (sparse_as_dense={sparse_as_dense})")


def check_process_set(rank, size):
    """On 3+ ranks: an optimizer over ranks {0, 1}; rank 2 trains alone."""
    if size < 3:
        return
    pair = hvd.add_process_set([0, 1])
    batches = global_batches(2, STEPS)
    model = Net()
    optimizer = hvd.DistributedOptimizer(sgd(model.parameters(), 1.0),
                                         named_parameters=model.named_parameters(),
                                         process_set=pair)
    reference = Net()
    reference_optimizer = sgd(reference.parameters(), 1.0)
    if rank < 2:
        train(model, optimizer, batches, rank, 2)
        train(reference, reference_optimizer, batches, None, 2)
    else:
        one_rank = [(x[:BATCH], y[:BATCH]) for x, y in batches]
        train(model, optimizer, one_rank, 0, 1)
        train(reference, reference_optimizer, one_rank, 0, 1)
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        close(got, want, f"process_set: {name}")
    hvd.remove_process_set(pair)


def check_misuse(rank, size):
    model = Net()
    x, y = global_batches(size, 1)[0]
    xs, ys = x[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]
    optimizer = hvd.DistributedOptimizer(sgd(model.parameters(), 1.0),
                                         named_parameters=model.named_parameters())
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    expect_error(AssertionError, "optimizer.zero_grad() was called after loss.backward() but "
                 "before optimizer.step() or optimizer.synchronize()", optimizer.zero_grad,
                 "zero_grad between backward and step")
    expect_error(AssertionError, "Gradients were computed more than backward_passes_per_step",
                 lambda: torch.nn.functional.mse_loss(model(xs), ys).backward(),
                 "a second backward before step")
    optimizer.synchronize()
    optimizer.zero_grad()  # allowed again once synchronized (drops the raced gradients)
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    optimizer.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer.step()
    check(any("skip_synchronize" in str(w.message) for w in caught),
          "step() after synchronize() did not warn")
    same_on_every_rank(model.named_parameters(), "after misuse recovery")
    # Restoring a state while gradients are in flight drops them (elastic
    # restore after a failure outside step()): training goes on cleanly.
    saved = optimizer.state_dict()
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    optimizer.load_state_dict(saved)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    optimizer.step()
    same_on_every_rank(model.named_parameters(), "after load_state_dict with gradients in flight")

    plain = sgd(Net().parameters(), 1.0)
    expect_error(ValueError, "Adasum needs a power-of-two number of ranks",
                 lambda: hvd.DistributedOptimizer(plain, op=hvd.Adasum), "op=Adasum on 3 ranks")
    expect_error(ValueError, "backward_passes_per_step",
                 lambda: hvd.DistributedOptimizer(plain, backward_passes_per_step=0),
                 "backward_passes_per_step=0")
    expect_error(ValueError, "gradient_predivide_factor",
                 lambda: hvd.DistributedOptimizer(plain, op=hvd.Sum, gradient_predivide_factor=2.0),
                 "predivide with Sum")
    expect_error(ValueError, "not named",
                 lambda: hvd.DistributedOptimizer(plain, named_parameters=[("w", model.fc1.weight)]),
                 "missing names")
    duplicated = [("w", p) for p in Net().parameters()]
    expect_error(ValueError, "Found duplicates: w",
                 lambda: hvd.DistributedOptimizer(plain, named_parameters=duplicated),
                 "duplicate names")


def check_failed_allreduce(rank, size):
    """A gradient whose shape differs between ranks fails step() on every rank
    with the core's message naming it; the optimizer is usable afterwards."""
    w = torch.nn.Parameter(torch.ones(2 + rank))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=0.1), named_parameters=[("w", w)])
    w.sum().backward()
    expect_error(hvd.HorovodInternalError, "DistributedOptimizer.w", optimizer.step,
                 "allreduce of mismatched shapes")
    optimizer.zero_grad()  # nothing is left in flight


def check_wrapping(rank, size):
    """The wrapper is an instance of the optimizer's class and keeps its state."""
    model = Net()
    base = torch.optim.Adam(model.parameters(), lr=0.01)
    optimizer = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    check(isinstance(optimizer, torch.optim.Adam), "DistributedOptimizer is not an Adam")
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    x, y = global_batches(size, 1)[0]
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x[rank * BATCH:(rank + 1) * BATCH]),
                                 y[rank * BATCH:(rank + 1) * BATCH]).backward()
    optimizer.step()
    scheduler.step()
    check(optimizer.param_groups[0]["lr"] == 0.005, "StepLR did not act on the wrapper")
    check(len(optimizer.state_dict()["state"]) > 0, "state_dict() of the wrapper is empty")
    same_on_every_rank(model.named_parameters(), "Adam with a scheduler")


CHECKS = [check_against_one_process, check_unused_parameters, check_explicit_groups,
          check_closure, check_overlap, check_sparse, check_process_set, check_misuse,
          check_failed_allreduce, check_wrapping]

DONE = "optimizer OK"

if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
