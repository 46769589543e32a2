"""Run by tests/torch/test_one_call.py on 2 ranks: hvdlite.numpy.allreduce_
and hvdlite.torch's allreduce_ / allreduce_async(_), called without their
Python frame (Note [A public collective without a Python frame] in
csrc/python/codes/fast_entry.cc), give what their Python definitions give
for every calling form, number unnamed calls as they do, and fall back to
them (errors included) where the core's entry declines, asking the entry once
(Note [Declined without asking twice])."""
import numpy as np
import torch

import hvdlite.numpy as hnp
import hvdlite.torch as hvd
from hvdlite.common import basics, requests

hvd.init()
rank, size = hvd.rank(), hvd.size()
assert size == 2
total = sum(range(1, size + 1))  # each rank gives rank + 1
pair = hvd.add_process_set([0, 1])


def forms(public):
    """(calling form, expected factor of the per-rank sum) for `public`."""
    return [
        (lambda x: public(x), 1 / size),
        (lambda x: public(x, None, None, hvd.Sum), 1),
        (lambda x: public(x, op=hvd.Sum, name=f"kw.{public.__name__}"), 1),
        (lambda x: public(tensor=x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), 1),
        (lambda x: public(x, average=False), 1),
        (lambda x: public(x, True), 1 / size),
        (lambda x: public(x, op=hvd.Sum, process_set=pair), 1),
        (lambda x: public(x, op=hvd.Average, postscale_factor=3.0), 3 / size),
    ]


def check(kind, make, public, finish):
    for number, (call, factor) in enumerate(forms(public)):
        for reference in (False, True):
            x = make()
            function = public.__wrapped__ if reference else public
            got = finish(forms(function)[number][0](x), x)
            expected = total * factor
            assert np.allclose(np.asarray(got), expected), (kind, number, reference, got, expected)


check("numpy", lambda: np.full(3, rank + 1, np.float32), hnp.allreduce_, lambda out, x: out)
check("torch", lambda: torch.full((3,), float(rank + 1)), hvd.allreduce_, lambda out, x: out)
check("torch async_", lambda: torch.full((3,), float(rank + 1)), hvd.allreduce_async_,
      lambda handle, x: hvd.synchronize(handle))
check("torch async", lambda: torch.full((3,), float(rank + 1)), hvd.allreduce_async,
      lambda handle, x: hvd.synchronize(handle))

# Unnamed calls are numbered once each, as the def numbers them.
before = basics.auto_name("allreduce")
hvd.allreduce_(torch.ones(2))
hvd.allreduce_(torch.ones(4)[::2])  # declined (non-contiguous): the general path, named once
after = basics.auto_name("allreduce")
assert int(after.rsplit(".", 1)[1]) == int(before.rsplit(".", 1)[1]) + 3, (before, after)

# Declined: a non-contiguous tensor, and a tensor that requires grad.
strided = torch.full((6,), float(rank + 1))[::2]
assert torch.allclose(hvd.allreduce_(strided, op=hvd.Sum), torch.full((3,), float(total)))
leaf = torch.full((2,), float(rank + 1), requires_grad=True)
handle = hvd.allreduce_async(leaf, op=hvd.Sum)
assert torch.allclose(hvd.synchronize(handle), torch.full((2,), float(total)))

# A declined call asks the core's entry once, not again from the def (Note
# [Declined without asking twice]); a call through the def asks it once too.
from hvdlite.torch import core_calls  # noqa: E402


class CountingEntry:
    def __init__(self, entry):
        self.entry, self.calls = entry, 0

    def __call__(self, *args):
        self.calls += 1
        return self.entry(*args)


def strided_input():
    return torch.full((6,), float(rank + 1))[::2]


def leaf_input():
    return torch.full((3,), float(rank + 1), requires_grad=True)


for public, entry_name, finish in ((hvd.allreduce_, "tensor_call", lambda out: out),
                                   (hvd.allreduce_async_, "allreduce_tensor_async", hvd.synchronize),
                                   (hvd.allreduce_async, "allreduce_tensor_async", hvd.synchronize)):
    real = getattr(core_calls, entry_name)
    counting = CountingEntry(real)
    setattr(core_calls, entry_name, counting)
    try:
        cases = [(strided_input, {"op": hvd.Sum}, total), (strided_input, {"average": False}, total),
                 (lambda: torch.full((3,), float(rank + 1)), {"op": hvd.Sum}, total)]
        if public is hvd.allreduce_async:
            cases.append((leaf_input, {"op": hvd.Sum}, total))
        for make, kwargs, expected in cases:
            for function in (public, public.__wrapped__):
                before = counting.calls
                got = finish(function(make(), **kwargs))
                assert counting.calls == before + 1, (public.__name__, kwargs, counting.calls - before)
                assert torch.allclose(got.detach(), torch.full((3,), float(expected))), (got, expected)
    finally:
        setattr(core_calls, entry_name, real)

# numpy's allreduce_ too: what its entry declines (an array that is not
# C-contiguous, a list) reaches the general path, which refuses it, asking once.
real_array_entry = requests.allreduce_array
counting = CountingEntry(real_array_entry)
requests.allreduce_array = counting
try:
    for make in (lambda: np.full(6, rank + 1, np.float32)[::2], lambda: [1.0, 2.0],
                 lambda: np.full(3, rank + 1, np.float32)):
        for function in (hnp.allreduce_, hnp.allreduce_.__wrapped__):
            before = counting.calls
            try:
                got = function(make(), op=hvd.Sum)
                assert np.allclose(got, total), got
            except ValueError as error:
                assert "must be a writable, C-contiguous np.ndarray" in str(error), error
            assert counting.calls == before + 1, ("numpy allreduce_", counting.calls - before)
finally:
    requests.allreduce_array = real_array_entry

# Errors are the def's, word for word.
for public in (hnp.allreduce_, hvd.allreduce_, hvd.allreduce_async_):
    for args, kwargs in (((), {}), ((np.ones(1),) * 8, {}), ((np.ones(1),), {"bogus": 1}),
                         ((np.ones(1),), {"tensor": np.ones(1)})):
        messages = []
        for function in (public, public.__wrapped__):
            try:
                function(*args, **kwargs)
            except TypeError as error:
                messages.append(str(error))
        assert len(messages) == 2 and messages[0] == messages[1], messages
messages = []
for function in (hnp.allreduce_, hnp.allreduce_.__wrapped__):
    try:
        function([1.0, 2.0], name="a list")
    except ValueError as error:
        messages.append(str(error))
assert len(messages) == 2 and messages[0] == messages[1], messages

hvd.shutdown()
print(f"rank {rank}: fast entry OK", flush=True)
