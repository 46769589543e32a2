"""hvdlite.torch with op=hvd.Adasum on real ranks: allreduce (in place and
not), grouped_allreduce, against the NumPy pairwise tree of
tests/common/workers/adasum_reference.py; DistributedOptimizer(op=Adasum)
against a single-process simulation of every rank (each steps its own
optimizer, the parameter deltas are combined by Adasum); with a number of
ranks that is not a power of two, the errors."""
import sys
import zlib
from pathlib import Path

import torch

import hvdlite.torch as hvd
from rank_checks import check, close, run_checks, same_on_every_rank

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from adasum_reference import adasum, power_of_two_only  # noqa: E402

DTYPES = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
SHAPES = [(7,), (5, 3), (1,), (0,), (1001,)]  # odd, and not divisible by 2 or 4


def data(name, rank, shape, dtype):
    """A direction shared by the ranks plus each rank's own."""
    shared = torch.randn(shape, generator=torch.Generator().manual_seed(zlib.crc32(name.encode())))
    own = torch.randn(shape, generator=torch.Generator().manual_seed(
        zlib.crc32(f"{name}/{rank}".encode())))
    return (shared + own).to(dtype)


def expected(inputs):
    """The reference on float64 copies, rounded to the inputs' dtype at each level as the core does."""
    dtype = inputs[0].dtype

    def round_to(v):
        return torch.from_numpy(v).to(dtype).to(torch.float64).numpy()

    wide = [x.to(torch.float64).numpy() for x in inputs]
    return torch.from_numpy(adasum(wide, round_to)).to(dtype)


def expect_close(what, got, inputs, tolerance):
    check(got.dtype == inputs[0].dtype and got.shape == inputs[0].shape,
          f"{what}: {got.dtype}{tuple(got.shape)}")
    if got.numel():
        close(got.double(), expected(inputs).double(), what, rtol=tolerance, atol=tolerance)
        same_on_every_rank([(what, got)], what)


@power_of_two_only
def check_allreduce(rank, size):
    for dtype, tolerance in DTYPES.items():
        for shape in SHAPES:
            name = f"adasum.{dtype}.{shape}"
            inputs = [data(name, r, shape, dtype) for r in range(size)]
            mine = inputs[rank].clone()
            expect_close(name, hvd.allreduce(mine, op=hvd.Adasum, name=name), inputs, tolerance)
            check(torch.equal(mine, inputs[rank]), f"{name}: allreduce changed its input")
            hvd.allreduce_(mine, op=hvd.Adasum, name=name + ".in_place")
            expect_close(name + " in place", mine, inputs, tolerance)


@power_of_two_only
def check_grouped(rank, size):
    shapes = [(7,), (1,), (13, 3), (1001,), (2,)]
    for dtype in (torch.float32, torch.float16):
        group = f"adasum.group.{dtype}"
        inputs = [[data(f"{group}.{i}", r, shape, dtype) for r in range(size)]
                  for i, shape in enumerate(shapes)]
        got = hvd.grouped_allreduce([x[rank] for x in inputs], op=hvd.Adasum, name=group)
        for i, (out, per_rank) in enumerate(zip(got, inputs)):
            expect_close(f"{group}.{i}", out, per_rank, DTYPES[dtype])


# --- DistributedOptimizer(op=Adasum)

def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 3)).double()


def batch(rank, step, backward_pass):
    generator = torch.Generator().manual_seed(1000 * rank + 10 * step + backward_pass)
    return (torch.randn(8, 5, generator=generator, dtype=torch.float64),
            torch.randn(8, 3, generator=generator, dtype=torch.float64))


def backward(model, rank, step, passes):
    for backward_pass in range(passes):
        xs, ys = batch(rank, step, backward_pass)
        torch.nn.functional.mse_loss(model(xs), ys).backward()


def simulate(size, steps, make_optimizer, passes):
    """Every rank in this process: each steps its own optimizer from the same
    parameters; the parameters then become start + Adasum(deltas)."""
    models = [make_model() for _ in range(size)]
    optimizers = [make_optimizer(m.parameters()) for m in models]
    history = []
    for step in range(steps):
        starts = [p.detach().clone() for p in models[0].parameters()]
        deltas = []
        for r, (model, optimizer) in enumerate(zip(models, optimizers)):
            optimizer.zero_grad()
            backward(model, r, step, passes)
            optimizer.step()
            deltas.append([p.detach() - s for p, s in zip(model.parameters(), starts)])
        for i, start in enumerate(starts):
            new = start + torch.from_numpy(adasum([d[i].numpy() for d in deltas]))
            for model in models:
                with torch.no_grad():
                    list(model.parameters())[i].copy_(new)
        history.append([p.detach().clone() for p in models[0].parameters()])
    return history


@power_of_two_only
def check_optimizer(rank, size):
    cases = [("sgd+momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1),
             ("adam", lambda ps: torch.optim.Adam(ps, lr=0.01), 1),
             ("sgd, 2 backward passes", lambda ps: torch.optim.SGD(ps, lr=0.05), 2)]
    steps = 4
    for label, make_optimizer, passes in cases:
        want = simulate(size, steps, make_optimizer, passes)
        model = make_model()
        optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                             named_parameters=model.named_parameters(),
                                             op=hvd.Adasum, backward_passes_per_step=passes)
        check(isinstance(optimizer, type(make_optimizer([torch.zeros(1)]))),
              f"{label}: not an instance of the wrapped optimizer's class")
        for step in range(steps):
            optimizer.zero_grad()
            backward(model, rank, step, passes)
            optimizer.step()
            for (name, p), q in zip(model.named_parameters(), want[step]):
                close(p.detach(), q, f"{label}, step {step}, {name}", rtol=1e-9, atol=1e-12)
            same_on_every_rank(model.named_parameters(), f"{label}, step {step}")
    try:
        with optimizer.skip_synchronize():
            pass
    except AssertionError as error:
        check("not supported" in str(error), f"skip_synchronize: {error}")
    else:
        check(False, "skip_synchronize() did not raise with Adasum")


def expect_value_error(what, substrings, action, kind=ValueError):
    try:
        action()
    except kind as error:
        check(all(s in str(error) for s in substrings), f"{what}: {error!r} lacks {substrings}")
    else:
        check(False, f"{what}: no {kind.__name__}")


def check_errors(rank, size):
    ones = torch.ones(4)
    if size & (size - 1):
        expect_value_error("allreduce", ["'adasum.bad'", "power-of-two", f"has {size}"],
                           lambda: hvd.allreduce(ones, op=hvd.Adasum, name="adasum.bad"))
        expect_value_error("optimizer", ["power-of-two", f"has {size}"],
                           lambda: hvd.DistributedOptimizer(
                               torch.optim.SGD(make_model().parameters(), lr=0.1), op=hvd.Adasum))
    pair = hvd.add_process_set([0, 1])
    plain = torch.optim.SGD(make_model().parameters(), lr=0.1)
    expect_value_error("optimizer on a process set", ["non-global process sets"],
                       lambda: hvd.DistributedOptimizer(plain, op=hvd.Adasum, process_set=pair),
                       kind=NotImplementedError)  # Horovod's type
    expect_value_error("allreduce on a process set", ["non-global process sets"],
                       lambda: hvd.allreduce(ones, op=hvd.Adasum, process_set=pair),
                       kind=NotImplementedError)
    # Horovod raises a RuntimeError for these; hvdlite's API errors are ValueErrors: both.
    for kind in (RuntimeError, ValueError):
        expect_value_error("reducescatter", ["allreduce only", "not reducescatter"],
                           lambda: hvd.reducescatter(torch.ones(2 * size), op=hvd.Adasum), kind=kind)
        expect_value_error("grouped_reducescatter", ["allreduce only"],
                           lambda: hvd.grouped_reducescatter([torch.ones(2 * size)], op=hvd.Adasum),
                           kind=kind)
    expect_value_error("predivide", ["gradient_predivide_factor"],
                       lambda: hvd.DistributedOptimizer(plain, op=hvd.Adasum,
                                                        gradient_predivide_factor=2.0))
    hvd.remove_process_set(pair)
    check(torch.equal(hvd.allreduce(ones, op=hvd.Sum, name="after"), ones * size),
          "a collective after the errors")


CHECKS = [check_allreduce, check_grouped, check_optimizer, check_errors]

DONE = "torch adasum OK"

if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
