"""DistributedOptimizer with Compression.powersgd on real ranks: against
PyTorch DDP's own powerSGD_hook (gloo, in the same processes, same seeds and
data), against uncompressed training, what goes on the wire, elastic state,
backward_passes_per_step and a process set. Prints "powersgd OK" at the end.

Usage: powersgd_checks.py STORE_DIR [check ...]; STORE_DIR holds the file
torch.distributed's gloo group meets at. In a job of several workers
(torch_job.py): check_all_in_gloo or check_process_set_in_gloo, which meet in
a fresh folder of rank 0's."""
import copy
import shutil
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ddp_powersgd
from torch.nn.parallel import DistributedDataParallel

import hvdlite.torch as hvd
import hvdlite.torch.powersgd as powersgd_module
from hvdlite.torch.optimizer import COMPRESSION_STATE
from rank_checks import check, close, expect_error, same_on_every_rank

torch.set_default_dtype(torch.float64)
# Ranks share the machine's cores: torch's own intra-op threads on top of
# them make each tiny backward wait on the scheduler (100+ ms on a loaded 2-core host).
torch.set_num_threads(1)
BATCH = 8  # rows per rank and backward pass
STEPS = 6
RANK = 2
START = 2  # DDP's smallest start_powerSGD_iter with error feedback


class Net(torch.nn.Module):
    """fc1 and fc2 are compressed at RANK 2 (their matrices are large enough);
    fc3's 3 x 10 is not (3 x 10 < 2 * (3 + 10) * 2), nor are the biases."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(12, 16)
        self.fc2 = torch.nn.Linear(16, 10)
        self.fc3 = torch.nn.Linear(10, 3)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def batches(size, steps, passes=1, seed=1):
    generator = torch.Generator().manual_seed(seed)
    rows = size * BATCH * passes
    return [(torch.randn(rows, 12, generator=generator), torch.randn(rows, 3, generator=generator))
            for _ in range(steps)]


def my_rows(tensor, rank, size, passes, p):
    """Rank `rank`'s rows of backward pass p of a global batch."""
    start = (p * size + rank) * BATCH
    return tensor[start:start + BATCH]


def train(model, optimizer, data, rank, size, passes=1, no_sync=None):
    """Steps on this rank's rows; no_sync: DDP's context for all passes but the last."""
    for x, y in data:
        optimizer.zero_grad()
        for p in range(passes):
            # DDP's no_sync must hold over the forward pass as well.
            local = no_sync() if no_sync is not None and p + 1 < passes else nullcontext()
            with local:
                torch.nn.functional.mse_loss(model(my_rows(x, rank, size, passes, p)),
                                             my_rows(y, rank, size, passes, p)).backward()
        optimizer.step()


def ddp_order(model):
    """The parameters in the order DDP's one bucket holds them (the order
    autograd produces their gradients, last layer first): PowerSGD draws its
    first Q's in this order, so the hvdlite optimizer gets its parameters so."""
    return list(model.parameters())[::-1]


def hvdlite_run(data, me, size, process_set=hvd.global_process_set, passes=1, lr=0.1,
                **options):
    """PowerSGD training on rank `me`; options go to DistributedOptimizer (op,
    gradient_predivide_factor) or to Compression.powersgd (the rest: rank...)."""
    wrapper = {k: options.pop(k) for k in ("op", "gradient_predivide_factor") if k in options}
    model = Net()
    compression = hvd.Compression.powersgd(**{"rank": RANK, "start_iter": START, **options})
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(ddp_order(model), lr=lr), named_parameters=model.named_parameters(),
        compression=compression, process_set=process_set, backward_passes_per_step=passes,
        **wrapper)
    train(model, optimizer, data, me, size, passes)
    return model, optimizer, compression


def ddp_run(data, rank, size, group, passes, options):
    """DDP with powerSGD_hook, configured as Compression.powersgd(**options)."""
    model = DistributedDataParallel(Net(), process_group=group, bucket_cap_mb=64)
    warm_start = options.get("warm_start", True)
    state = ddp_powersgd.PowerSGDState(group, matrix_approximation_rank=options.get("rank", RANK),
                                       start_powerSGD_iter=START,
                                       min_compression_rate=options.get("min_compression_rate", 2),
                                       use_error_feedback=True, warm_start=warm_start,
                                       random_seed=0)
    model.register_comm_hook(state, ddp_powersgd.powerSGD_hook)
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), data, rank, size, passes,
          no_sync=model.no_sync)
    return model.module


def match_ddp(me, size, what, group, process_set=hvd.global_process_set, passes=1, **options):
    data = batches(size, STEPS, passes)
    got, _, _ = hvdlite_run(data, me, size, process_set, passes, **dict(options))
    want = ddp_run(data, me, size, group, passes, options)
    # Not bit for bit: DDP divides the summed Q's by the size itself, and
    # carries an error memory for the uncompressed gradients too (it averages
    # to zero over the ranks); float64 keeps these to rounding.
    for (name, a), b in zip(got.named_parameters(), want.parameters()):
        close(a, b, f"{what}: {name} vs DDP's powerSGD_hook", rtol=1e-9, atol=1e-11)
    # And compression did act: plain averaging ends elsewhere.
    plain = Net()
    plain_optimizer = hvd.DistributedOptimizer(torch.optim.SGD(plain.parameters(), lr=0.1),
                                               named_parameters=plain.named_parameters(),
                                               process_set=process_set,
                                               backward_passes_per_step=passes)
    train(plain, plain_optimizer, data, me, size, passes)
    check((plain.fc1.weight - got.fc1.weight).abs().max() > 1e-4,
          f"{what}: fc1 trained as without compression")


def check_matches_ddp_hook(rank, size):
    group = dist.group.WORLD
    match_ddp(rank, size, "rank 2 (Gram-Schmidt)", group)
    match_ddp(rank, size, "rank 4 (QR)", group, rank=4, min_compression_rate=1)
    match_ddp(rank, size, "rank 1, no warm start", group, rank=1, warm_start=False)
    match_ddp(rank, size, "backward_passes_per_step=2", group, passes=2)


def check_sum_and_predivide(rank, size):
    """Sum approximates the ranks' sum: the Average step at lr / size. A
    predivide factor changes nothing but the scale on the wire."""
    data = batches(size, STEPS)
    average, _, _ = hvdlite_run(data, rank, size)
    summed, _, _ = hvdlite_run(data, rank, size, lr=0.1 / size, op=hvd.Sum)
    predivided, _, _ = hvdlite_run(data, rank, size, gradient_predivide_factor=float(size))
    for (name, a), b, c in zip(average.named_parameters(), summed.parameters(),
                               predivided.parameters()):
        close(b, a, f"op=Sum at lr/size: {name}", rtol=1e-9, atol=1e-11)
        close(c, a, f"gradient_predivide_factor: {name}", rtol=1e-9, atol=1e-11)


def check_converges(rank, size):
    """Least squares y = x W* + noise, W* 24 x 24 of full rank, 100 steps:
    PowerSGD at rank 2 (6x fewer numbers sent) with error feedback ends within
    5% of the uncompressed loss (both near the optimum) and within 1% of its
    weights; without error feedback the same rank stays several times off."""
    torch.manual_seed(3)
    target = torch.randn(24, 24)
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(size * 64, 24, generator=generator)
    y = x @ target + 0.1 * torch.randn(size * 64, 24, generator=generator)
    mine = slice(rank * 64, (rank + 1) * 64)

    def fit(compression):
        torch.manual_seed(5)
        model = torch.nn.Linear(24, 24, bias=False)
        # mse_loss averages over the 24 outputs too: hence the large rate.
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=2.0),
                                             named_parameters=model.named_parameters(),
                                             compression=compression)
        for _ in range(100):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
            optimizer.step()
        with torch.no_grad():
            return torch.nn.functional.mse_loss(model(x), y).item(), model.weight.detach()

    plain_loss, plain_weight = fit(hvd.Compression.none)
    loss, weight = fit(hvd.Compression.powersgd(rank=2, start_iter=10))
    starved, _ = fit(hvd.Compression.powersgd(rank=2, start_iter=10, error_feedback=False))
    print(f"least squares loss after 100 steps: uncompressed {plain_loss:.6f}, PowerSGD rank 2 "
          f"{loss:.6f}, without error feedback {starved:.6f}", flush=True)
    check(loss <= plain_loss * 1.05, f"PowerSGD loss {loss:.6f} not within 5% of the "
                                     f"uncompressed {plain_loss:.6f}")
    relative = ((weight - plain_weight).norm() / plain_weight.norm()).item()
    check(relative < 0.01, f"PowerSGD weights {relative:.4f} (relative) from the uncompressed")
    check(starved > plain_loss * 3, f"without error feedback the loss {starved:.6f} came "
                                    f"close to {plain_loss:.6f}: the problem is too easy")


def check_wire_sizes(rank, size):
    """A compressed step sends (n + m) r numbers per compressed n x m gradient,
    all P's in one grouped allreduce and all Q's in the next, the rest in a
    third; warm-up steps send nothing through PowerSGD (plain allreduce)."""
    calls = []
    original = powersgd_module.grouped_allreduce_async_

    def counting(tensors, name=None, **options):
        calls.append((name.rsplit(".", 1)[-1], sum(t.numel() for t in tensors)))
        return original(tensors, name=name, **options)

    powersgd_module.grouped_allreduce_async_ = counting
    try:
        data = batches(size, START + 2)
        hvdlite_run(data[:START], rank, size)
        check(calls == [], f"warm-up steps went through PowerSGD: {calls}")
        hvdlite_run(data, rank, size)
    finally:
        powersgd_module.grouped_allreduce_async_ = original
    net = Net()
    uncompressed = sum(p.numel() for p in (net.fc1.bias, net.fc2.bias, net.fc3.weight,
                                           net.fc3.bias))
    p_size = (16 + 10) * RANK    # fc1 is 16 x 12, fc2 10 x 16: P's are n x r
    q_size = (12 + 16) * RANK    # Q's m x r
    expected = [("uncompressed", uncompressed), ("P", p_size), ("Q", q_size)] * 2
    check(calls == expected, f"collectives of two compressed steps: {calls}, want {expected}")
    dense = 16 * 12 + 10 * 16
    print(f"per step: {p_size + q_size} numbers for fc1+fc2 instead of {dense}", flush=True)


def check_elastic_state(rank, size):
    """TorchState commits PowerSGD's state with the optimizer's: restore()
    brings back every rank's own error memory and Q's, and the steps after
    it repeat exactly; sync() gives a rank that joins rank 0's step count and
    Q's, and every rank the average of the error memories held."""
    data = batches(size, 8)
    model, optimizer, compression = hvdlite_run(data[:4], rank, size)
    state = hvd.elastic.TorchState(model, optimizer, step=4)
    state.commit()
    committed = copy.deepcopy(compression.state_dict())
    check(committed["iter"] == 4 and set(committed["errors"]) == {"fc1.weight", "fc2.weight"},
          f"committed PowerSGD state: iter {committed['iter']}, errors {set(committed['errors'])}")
    train(model, optimizer, data[4:], rank, size)
    after_commit = [p.detach().clone() for p in model.parameters()]
    check(compression.iter == 8, "steps after the commit did not count")
    state.restore()
    same_state(compression.state_dict(), committed, "after restore")
    train(model, optimizer, data[4:], rank, size)
    for (name, p), want in zip(model.named_parameters(), after_commit):
        check(torch.equal(p.detach(), want), f"after restore, the steps differ at {name}")
    state.restore()

    # Rank 1 starts afresh, as a worker that joins would.
    if rank == 1:
        model = Net()
        compression = hvd.Compression.powersgd(rank=RANK, start_iter=START)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(ddp_order(model), lr=0.1),
                                             named_parameters=model.named_parameters(),
                                             compression=compression)
        state = hvd.elastic.TorchState(model, optimizer, step=0)
    state.sync()
    check(compression.iter == 4, f"after sync, iter is {compression.iter}")
    synced = compression.state_dict()
    for name in ("fc1.weight", "fc2.weight"):
        # Rank 0 held it alone: its own; the others receive it.
        errors = hvd.allgather_object(committed["errors"][name] if rank == 0 else None)
        check(torch.allclose(synced["errors"][name], errors[0], rtol=0, atol=1e-15),
              f"after sync, the error memory of {name} is not rank 0's")
        check(torch.equal(synced["qs"][name], hvd.broadcast_object(synced["qs"][name])),
              f"after sync, Q of {name} differs from rank 0's")
    train(model, optimizer, data[4:], rank, size)
    same_on_every_rank(model.named_parameters(), "after sync and more steps")


def check_error_average_on_sync(rank, size):
    """When every rank holds an error memory, sync() leaves each rank their average."""
    data = batches(size, 4)
    _, optimizer, compression = hvdlite_run(data, rank, size)
    mine = copy.deepcopy(compression.state_dict()["errors"])
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for name, error in mine.items():
        average = hvd.allreduce(error, op=hvd.Average, name=f"check.{name}")
        close(compression.errors[name], average, f"error memory of {name} after sync",
              rtol=1e-12, atol=1e-15)
    check(COMPRESSION_STATE in optimizer.state_dict(), "state_dict() lacks PowerSGD's state")


def same_state(got, want, what):
    check(got["iter"] == want["iter"] and got["seed_draws"] == want["seed_draws"],
          f"{what}: iter/seed draws {got['iter']}/{got['seed_draws']}, want "
          f"{want['iter']}/{want['seed_draws']}")
    for part in ("errors", "qs"):
        check(set(got[part]) == set(want[part]), f"{what}: {part} of {sorted(got[part])}")
        for name, tensor in want[part].items():
            check(torch.equal(got[part][name], tensor), f"{what}: {part}[{name}] differs")


def check_process_set(rank, size):
    """On 3 ranks: PowerSGD over ranks {0, 1} matches DDP's hook on a gloo
    group of the same two; rank 2 is in neither."""
    if size < 3:
        return
    pair = hvd.add_process_set([0, 1])
    group = dist.new_group([0, 1])
    if rank < 2:
        match_ddp(rank, 2, "process set {0, 1}", group, process_set=pair)
    hvd.remove_process_set(pair)


def check_misuse(rank, size):
    model = Net()

    def wrap(**options):
        return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        named_parameters=model.named_parameters(), **options)

    expect_error(ValueError, "op=hvd.Average and hvd.Sum",
                 lambda: wrap(compression=hvd.Compression.powersgd(), op=hvd.Max), "op=Max")
    expect_error(ValueError, "Adasum",
                 lambda: wrap(compression=hvd.Compression.powersgd(), op=hvd.Adasum), "Adasum")
    expect_error(ValueError, "an instance",
                 lambda: wrap(compression=hvd.Compression.powersgd), "the class itself")
    shared = hvd.Compression.powersgd()
    kept = wrap(compression=shared)
    expect_error(ValueError, "another", lambda: wrap(compression=shared), "shared compression")
    del kept
    expect_error(TypeError, "DistributedOptimizer",
                 lambda: hvd.allreduce(torch.ones(4, 4), compression=hvd.Compression.powersgd()),
                 "PowerSGD on one allreduce")
    expect_error(ValueError, "rank must be >= 1", lambda: hvd.Compression.powersgd(rank=0),
                 "rank 0")


CHECKS = [check_matches_ddp_hook, check_sum_and_predivide, check_converges, check_wire_sizes,
          check_elastic_state, check_error_average_on_sync, check_process_set, check_misuse]


def run_in_gloo_group(store_dir, checks, rank, size):
    """`checks` with torch.distributed's gloo group (DDP's hook) up beside hvdlite."""
    dist.init_process_group("gloo", init_method=f"file://{Path(store_dir) / 'gloo'}", rank=rank,
                            world_size=size)
    for check_function in checks:
        check_function(rank, size)
    dist.destroy_process_group()


def in_a_fresh_folder(*checks):
    """A check for torch_job.py: `checks` in a gloo group that meets in a new
    folder of rank 0's (every rank runs on this host), removed afterwards."""
    def run(rank, size):
        store_dir = hvd.broadcast_object(tempfile.mkdtemp(prefix="powersgd-") if rank == 0 else None,
                                         name="powersgd.store_dir")
        run_in_gloo_group(store_dir, checks, rank, size)
        hvd.barrier()
        if rank == 0:
            shutil.rmtree(store_dir)
    return run


check_all_in_gloo = in_a_fresh_folder(*CHECKS)
check_process_set_in_gloo = in_a_fresh_folder(check_process_set)
DONE = "powersgd OK"


def main():
    store_dir, selected = Path(sys.argv[1]), sys.argv[2:]
    hvd.init()
    run_in_gloo_group(store_dir, [c for c in CHECKS if not selected or c.__name__ in selected],
                      hvd.rank(), hvd.size())
    print(DONE, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
