"""Run by tests/torch/test_one_call.py on 2 ranks: the one-call path of the
synchronous collectives (Note [Torch collectives in one call] in
csrc/python/torch_one_call.cc) takes the common calls on CPU tensors
(allreduce(_), broadcast(_), allgather, grouped_allreduce(_)) and gives the
general path's bytes; every call it declines still gets the general path's
result or error, gradients included; ranks that disagree all raise."""
import warnings

import torch

import hvdlite.torch as hvd
from hvdlite.common import requests as hvd_requests
from hvdlite.torch import collectives, core_calls
from hvdlite.torch.tensors import DTYPE_CODES

warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
warnings.filterwarnings("ignore", "The PyTorch API of nested tensors is in prototype stage")
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def data(tag, rank, dtype):
    values = torch.arange(15, dtype=torch.float64).reshape(5, 3) % 7 + rank + len(tag) % 3
    return values.to(dtype)


def outcome(call):
    """("ok", result bytes, dtype, shape) or ("raised", type, message)."""
    try:
        out = call()
    except Exception as error:  # compared between the two paths, not judged
        return ("raised", type(error).__name__, str(error))
    return ("ok", out.view(torch.uint8).flatten().tolist() if out.numel() else [], str(out.dtype),
            tuple(out.shape))


def fast(tensor, name, op, prescale, postscale, process_set, average, in_place=True):
    """allreduce through the one call alone: the result, or None where it declined."""
    return core_calls.tensor_call(hvd_requests.ALLREDUCE, in_place, False, tensor, name,
                                  process_set, op, prescale, postscale, average)


def one_call(op, in_place, grouped, tensors, name, *arguments):
    return core_calls.tensor_call(op, in_place, grouped, tensors, name, hvd.global_process_set,
                                  *arguments)


def taken(call):
    """call()'s outcome, which must not be the one call's None (declined)."""
    def checked():
        out = call()
        if out is None:
            raise AssertionError("the one call declined a call it should take")
        return out
    return outcome(checked)


def same(tag, quick, general):
    if quick != general:
        raise AssertionError(f"{tag}: one call {quick} != general path {general}")


def check_taken(rank):
    ops = [None, hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, 0]
    for dtype in DTYPE_CODES:
        for op in ops:
            tag = f"one_call.{dtype}.{op!r}"
            scales = (0.5, 2.0) if dtype in FLOATS else (1.0, 1.0)
            for in_place in (True, False):
                quick, slow = data(tag, rank, dtype), data(tag, rank, dtype)
                got = taken(lambda: fast(quick, f"{tag}.{in_place}", op, *scales,
                                         hvd.global_process_set, None, in_place=in_place))
                general = outcome(lambda: collectives._allreduce_now(
                    slow, in_place, None, f"{tag}.{in_place}", op, *scales,
                    hvd.global_process_set))
                same(f"{tag} in place {in_place}", got, general)
                if not in_place and not torch.equal(quick, slow):
                    raise AssertionError(f"{tag}: the one call changed its input")
    parameter = torch.nn.Parameter(torch.full((3,), rank + 1.0))
    assert fast(parameter, "p", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None) is parameter
    assert parameter.detach().tolist() == [3.0] * 3, parameter
    scalar = torch.tensor(rank + 1.0)
    assert fast(scalar, "scalar", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None) is scalar
    assert scalar.item() == 3.0


def check_taken_broadcast_allgather_grouped(rank):
    """broadcast(_), allgather and grouped_allreduce(_) through the one call:
    the general path's bytes for every dtype (and op, grouped)."""
    for dtype in DTYPE_CODES:
        for root in (0, 1):
            for in_place in (True, False):
                tag = f"one_call.bcast.{dtype}.{root}.{in_place}"
                quick, slow = data(tag, rank, dtype), data(tag, rank, dtype)
                got = taken(lambda: one_call(hvd_requests.BROADCAST, in_place, False, quick, tag,
                                             root))
                general = outcome(lambda: hvd.synchronize(collectives._broadcast_async(
                    slow, in_place, root, tag, hvd.global_process_set)))
                same(tag, got, general)
        tag = f"one_call.gather.{dtype}"
        rows = data(tag, rank, dtype)[:rank + 1]  # ranks give different row counts
        got = taken(lambda: one_call(hvd_requests.ALLGATHER, False, False, rows, tag))
        general = outcome(lambda: hvd.synchronize(hvd.allgather_async(rows, f"{tag}.general")))
        same(tag, got, general)
        scalar = data(tag, rank, dtype)[0, 0]
        got = taken(lambda: one_call(hvd_requests.ALLGATHER, False, False, scalar, f"{tag}.0d"))
        general = outcome(lambda: hvd.synchronize(hvd.allgather_async(scalar, f"{tag}.0d.g")))
        same(f"{tag} scalar", got, general)
    empty = torch.zeros(0, 3)  # no bytes: the core allocates none for the allgather
    for kind, quick, general in (
            ("allreduce", lambda: fast(empty, "empty.ar", hvd.Sum, 1.0, 1.0,
                                       hvd.global_process_set, None, in_place=False),
             lambda: collectives._allreduce_now(empty, False, None, "empty.ar.g", hvd.Sum, 1.0, 1.0,
                                              hvd.global_process_set)),
            ("broadcast", lambda: one_call(hvd_requests.BROADCAST, False, False, empty, "empty.b", 1),
             lambda: hvd.synchronize(hvd.broadcast_async(empty, 1, name="empty.b.g"))),
            ("allgather", lambda: one_call(hvd_requests.ALLGATHER, False, False, empty, "empty.g"),
             lambda: hvd.synchronize(hvd.allgather_async(empty, name="empty.g.g")))):
        got, want = taken(quick), outcome(general)
        same(f"empty {kind}", got, want)
    for op in (None, hvd.Sum, hvd.Min, hvd.Max, hvd.Product):
        # bool cannot be averaged: a member refused at submit would leave the
        # members before it queued on either path
        members = [dtype for dtype in DTYPE_CODES if op is not None or dtype is not torch.bool]
        for in_place in (True, False):
            tag = f"one_call.group.{op!r}.{in_place}"
            quick = [data(tag, rank, dtype) for dtype in members]
            slow = [data(tag, rank, dtype) for dtype in members]
            got = core_calls.tensor_call(hvd_requests.ALLREDUCE, in_place, True, quick, tag,
                                         hvd.global_process_set, op, 1.0, 1.0, None)
            assert got is not None, tag
            general = hvd.synchronize(collectives._grouped_allreduce_async(
                slow, in_place, None, f"{tag}.general", op, 1.0, 1.0, hvd.global_process_set))
            assert isinstance(got, list) and len(got) == len(members), got
            for member, (a, b) in enumerate(zip(got, general)):
                same(f"{tag}.{member}", outcome(lambda: a), outcome(lambda: b))
                assert (a is quick[member]) == in_place, (tag, member)


def check_process_sets(rank):
    """A registered process set goes through the one call as through the
    general path: the same results in a set of both ranks, the same error on
    a rank outside a set."""
    both, first = hvd.add_process_set([0, 1]), hvd.add_process_set([0])
    for process_set in (both, first):
        tag = f"one_call.set.{process_set.process_set_id}"
        calls = {
            "allreduce_": (lambda t: core_calls.tensor_call(
                hvd_requests.ALLREDUCE, True, False, t, f"{tag}.ar", process_set, hvd.Sum, 1.0,
                1.0, None), lambda t: collectives._allreduce_now(
                    t, True, None, f"{tag}.ar.g", hvd.Sum, 1.0, 1.0, process_set)),
            "broadcast_": (lambda t: core_calls.tensor_call(
                hvd_requests.BROADCAST, True, False, t, f"{tag}.b", process_set, 0),
                lambda t: hvd.synchronize(hvd.broadcast_async_(t, 0, f"{tag}.b.g", process_set))),
            "allgather": (lambda t: core_calls.tensor_call(
                hvd_requests.ALLGATHER, False, False, t, f"{tag}.g", process_set),
                lambda t: hvd.synchronize(hvd.allgather_async(t, f"{tag}.g.g", process_set))),
        }
        for kind, (quick, general) in calls.items():
            got = taken(lambda: quick(data(tag, rank, torch.float32)))
            want = outcome(lambda: general(data(tag, rank, torch.float32)))
            if got[0] == "raised" and want[0] == "raised":  # the rank outside the set
                got, want = got[:2], want[:2]
            same(f"{tag} {kind}", got, want)
    hvd.remove_process_set(first)
    hvd.remove_process_set(both)


class MyTensor(torch.Tensor):
    pass


def check_declined():
    base = torch.ones(4)
    declined = {
        "average=": (base, "d.avg", None, 1.0, 1.0, hvd.global_process_set, True),
        "Adasum": (base, "d.adasum", hvd.Adasum, 1.0, 1.0, hvd.global_process_set, None),
        "op as text": (base, "d.text", "sum", 1.0, 1.0, hvd.global_process_set, None),
        "int scale": (base, "d.int", hvd.Sum, 2, 1.0, hvd.global_process_set, None),
        "no name": (base, None, hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "empty name": (base, "", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "no set": (base, "d.noset", hvd.Sum, 1.0, 1.0, None, None),
        "strided": (torch.zeros(8)[::2], "d.strided", hvd.Sum, 1.0, 1.0,
                    hvd.global_process_set, None),
        "subclass": (base.as_subclass(MyTensor), "d.sub", hvd.Sum, 1.0, 1.0,
                     hvd.global_process_set, None),
        "sparse": (torch.eye(3).to_sparse(), "d.sparse", hvd.Sum, 1.0, 1.0,
                   hvd.global_process_set, None),
        "sparse CSR": (torch.eye(3).to_sparse_csr(), "d.csr", hvd.Sum, 1.0, 1.0,
                       hvd.global_process_set, None),
        "complex": (torch.ones(2, dtype=torch.complex64), "d.cx", hvd.Sum, 1.0, 1.0,
                    hvd.global_process_set, None),
        "meta": (torch.ones(2, device="meta"), "d.meta", hvd.Sum, 1.0, 1.0,
                 hvd.global_process_set, None),
        "17 dimensions": (torch.ones([1] * 17), "d.dims", hvd.Sum, 1.0, 1.0,
                          hvd.global_process_set, None),
        "list": ([1.0, 2.0], "d.list", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
    }
    for what, args in declined.items():
        for in_place in (True, False):
            if fast(*args, in_place=in_place) is not None:
                raise AssertionError(f"one call took the {what} case, which needs the general path")
    graded = torch.ones(2, requires_grad=True)
    assert fast(graded, "d.grad", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None,
                in_place=False) is None  # autograd's Function decides
    others = {
        "broadcast of a strided tensor": (hvd_requests.BROADCAST, False, torch.zeros(8)[::2], 0),
        "broadcast, root as bool": (hvd_requests.BROADCAST, True, base, True),
        "broadcast, root as float": (hvd_requests.BROADCAST, True, base, 0.0),
        "broadcast, negative root": (hvd_requests.BROADCAST, True, base, -1),
        "broadcast of a tracked tensor": (hvd_requests.BROADCAST, False, graded, 0),
        "allgather of a tracked tensor": (hvd_requests.ALLGATHER, False, graded),
        "allgather of a subclass": (hvd_requests.ALLGATHER, False, base.as_subclass(MyTensor)),
        "allgather of complex": (hvd_requests.ALLGATHER, False,
                                 torch.ones(2, dtype=torch.complex64)),
        "allgather in place": (hvd_requests.ALLGATHER, True, base),
    }
    for what, (op, in_place, tensor, *arguments) in others.items():
        if one_call(op, in_place, False, tensor, "d.other", *arguments) is not None:
            raise AssertionError(f"one call took the {what} case, which needs the general path")
    groups = {"empty": [], "a tuple": (base, base), "a strided member": [base, torch.zeros(8)[::2]],
              "a tracked member": [base, graded], "not a tensor": [base, 1.0]}
    for what, tensors in groups.items():
        in_place = what != "a tracked member"
        if one_call(hvd_requests.ALLREDUCE, in_place, True, tensors, "d.group", hvd.Sum, 1.0, 1.0,
                    None) is not None:
            raise AssertionError(f"one call took a group with {what}")
    if one_call(hvd_requests.ALLREDUCE, True, False, [base], "d.notgroup", hvd.Sum, 1.0, 1.0,
                None) is not None:
        raise AssertionError("one call took a list as a single tensor")


def check_one_element(rank):
    """Tensors of at most one element skip is_contiguous() (Note [Contiguous
    without is_contiguous() for one element]): whatever their strides and
    offset, the one call takes them with the general path's bytes and the
    sum the ranks expect, writing nothing beside them; other layouts, and
    tensors whose size or storage changed since an earlier call, are judged
    afresh (the one call keeps nothing between calls)."""
    def made(what):
        """(the storage's tensor, the view), the view filled with rank + 1."""
        backing = torch.zeros(8)
        view = {"offset and stride": lambda: backing[3::5],  # shape (1,), stride 5
                "0-d view": lambda: backing[2],
                "column of a row": lambda: backing.view(4, 2)[1:2, 1:],  # shape (1, 1)
                "expanded": lambda: backing[:1].expand(1, 1),
                "no element": lambda: backing[:0].view(2, 0),
                "no element, strided": lambda: backing.view(4, 2)[:, 2:]}[what]()
        view.fill_(rank + 1.0)
        return backing, view
    for what in ("offset and stride", "0-d view", "column of a row", "expanded", "no element",
                 "no element, strided"):
        for in_place in (True, False):
            (quick_backing, quick), (slow_backing, slow) = made(what), made(what)
            tag = f"one.{what}.{in_place}"
            results = []  # the one call's, then the general path's; compared in C order

            def kept(out):
                results.append(out)
                return None if out is None else torch.empty(out.shape).copy_(out).reshape(-1)
            got = taken(lambda: kept(fast(quick, tag, hvd.Sum, 1.0, 1.0, hvd.global_process_set,
                                          None, in_place=in_place)))
            general = outcome(lambda: kept(collectives._allreduce_now(
                slow, in_place, None, tag, hvd.Sum, 1.0, 1.0, hvd.global_process_set)))
            same(tag, got, general)
            assert results[0].shape == results[1].shape == quick.shape, (what, results)
            assert not in_place or results[0] is quick, (what, results)
            want = torch.full((quick.numel(),), 3.0).view(torch.uint8).tolist()
            assert got[:2] == ("ok", want), (what, got)
            assert torch.equal(quick_backing, slow_backing), (what, quick_backing, slow_backing)
            expected = 3.0 if in_place else rank + 1.0  # a new output leaves the input as it was
            assert quick_backing.sum().item() == (expected if quick.numel() else 0.0), \
                (what, quick_backing)
    parameter = torch.nn.Parameter(torch.full((1,), rank + 1.0))
    with torch.no_grad():
        assert fast(parameter, "one.p", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None) is parameter
    assert parameter.item() == 3.0, parameter
    assert fast(parameter, "one.p.new", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None,
                in_place=False) is None  # autograd's Function decides
    declined = {"sparse": torch.ones(1).to_sparse(), "sparse, no element": torch.zeros(0).to_sparse(),
                "subclass": torch.ones(1).as_subclass(MyTensor),
                "nested": torch.nested.nested_tensor([torch.ones(1)])}
    if torch.backends.mkldnn.is_available():
        declined["mkldnn"] = torch.ones(1).to_mkldnn()
    for what, tensor in declined.items():
        for in_place in (True, False):
            if fast(tensor, "one.d", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None,
                    in_place=in_place) is not None:
                raise AssertionError(f"one call took a one-element {what} tensor")
    x = torch.full((1,), rank + 1.0)
    assert hvd.allreduce_(x, name="one.resized", op=hvd.Sum) is x and x.tolist() == [3.0]
    x.resize_(3).fill_(rank + 1.0)  # the same tensor, now three elements
    assert hvd.allreduce_(x, name="one.resized.3", op=hvd.Sum) is x and x.tolist() == [3.0] * 3
    x.set_(torch.full((4, 2), rank + 1.0)[:, 0])  # another storage, strided
    assert hvd.allreduce_(x, name="one.set", op=hvd.Sum) is x and x.tolist() == [3.0] * 4, x
    x.set_(torch.full((1,), rank + 1.0))
    assert hvd.allreduce_(x, name="one.set.1", op=hvd.Sum) is x and x.tolist() == [3.0], x
    shadowed = torch.full((1,), rank + 1.0)
    shadowed.is_contiguous = lambda *args, **kwargs: False  # not asked for one element
    assert hvd.allreduce_(shadowed, name="one.shadowed", op=hvd.Sum) is shadowed
    assert shadowed.tolist() == [3.0], shadowed


def check_fallbacks(rank, size):
    """What the one call declines still works, through the general path."""
    strided = torch.zeros(4, 2)[:, 0]
    strided += rank
    assert hvd.broadcast_(strided, root_rank=1, name="fb.bcast") is strided
    assert strided.tolist() == [1.0] * 4, strided
    assert hvd.broadcast(torch.full((2,), float(rank)), root_rank=True, name="fb.root").tolist() \
        == [1.0, 1.0]
    graded = torch.full((2,), rank + 1.0, requires_grad=True)
    hvd.allgather(graded, name="fb.gather").sum().backward()
    assert graded.grad.tolist() == [1.0, 1.0], graded.grad  # Horovod's: averaged, own rows
    graded = torch.full((2,), rank + 1.0, requires_grad=True)
    out = hvd.broadcast(graded, root_rank=0, name="fb.bgrad")
    out.sum().backward()
    assert out.tolist() == [1.0, 1.0] and graded.grad.tolist() == [float(rank == 0)] * 2
    graded = [torch.full((2,), rank + 1.0, requires_grad=True) for _ in range(2)]
    reduced = hvd.grouped_allreduce(graded, name="fb.group", op=hvd.Sum)
    sum(r.sum() for r in reduced).backward()
    assert [g.grad.tolist() for g in graded] == [[2.0, 2.0]] * 2
    members = [torch.full((2,), float(rank)), torch.zeros(4, 2)[:, 0] + rank]
    assert hvd.grouped_allreduce_(members, name="fb.group_", op=hvd.Sum)[1] is members[1]
    assert [m.tolist() for m in members] == [[1.0] * 2, [1.0] * 4], members
    half = hvd.allreduce(torch.ones(2), name="fb.fp16", op=hvd.Sum,
                         compression=hvd.Compression.fp16)
    assert half.dtype == torch.float32 and half.tolist() == [2.0, 2.0], half
    assert hvd.grouped_allreduce((t for t in [torch.ones(1)]), name="fb.gen", op=hvd.Sum)[0] \
        .tolist() == [2.0]
    assert hvd.grouped_allreduce_([], name="fb.empty") == []


def check_mismatches(rank):
    """Ranks that disagree: every rank raises, naming the tensor, and none hangs."""
    cases = {
        "mm.allreduce_": lambda name: hvd.allreduce_(torch.zeros(2 + rank), name=name),
        "mm.allreduce": lambda name: hvd.allreduce(torch.zeros(2 + rank), name=name),
        "mm.broadcast_": lambda name: hvd.broadcast_(torch.zeros(2 + rank), 0, name=name),
        "mm.broadcast": lambda name: hvd.broadcast(torch.zeros(2 + rank), 0, name=name),
        "mm.allgather": lambda name: hvd.allgather(torch.zeros(2, 1 + rank), name=name),
        "mm.grouped": lambda name: hvd.grouped_allreduce_(
            [torch.zeros(2), torch.zeros(2 + rank)], name=name),
        "mm.grouped_new": lambda name: hvd.grouped_allreduce(
            [torch.zeros(2 + rank), torch.zeros(2)], name=name),
        "mm.dtype": lambda name: hvd.broadcast_(
            torch.zeros(2, dtype=torch.float32 if rank else torch.float64), 0, name=name),
    }
    for name, call in cases.items():
        try:
            call(name)
        except hvd.HorovodInternalError as error:
            if name not in str(error) or "mismatched" not in str(error):
                raise AssertionError(f"{name}: the error does not name the tensor: {error}")
        else:
            raise AssertionError(f"{name}: ranks disagreed and nothing was raised")
    assert hvd.allreduce(torch.ones(2), name="mm.after", op=hvd.Sum).tolist() == [2.0, 2.0]


def check_allreduce_itself(rank, size):
    x = torch.full((4,), rank + 1.0)
    assert hvd.allreduce_(x, name="itself.avg", average=True) is x
    assert x.tolist() == [(size + 1) / 2] * 4, x
    y = torch.full((4,), rank + 1.0)
    assert hvd.allreduce_(y, op=hvd.Sum) is y and y.tolist() == [3.0] * 4  # unnamed
    strided = torch.zeros(4, 2)[:, 0]
    strided += rank + 1
    assert hvd.allreduce_(strided, name="itself.strided", op=hvd.Sum) is strided
    assert strided.tolist() == [3.0] * 4
    try:
        hvd.allreduce_(torch.ones(2, dtype=torch.complex64), op=hvd.Sum, name="itself.cx")
    except ValueError as error:
        assert "complex64" in str(error), error
    else:
        raise AssertionError("allreduce_ took a complex64 tensor")


def check_allreduce_into_a_new_tensor(rank):
    """The synchronous allreduce reduces into a new tensor (in one call for a
    contiguous input): the input is unchanged, the result right, also for a
    strided input."""
    for tensor in (torch.full((4,), rank + 1.0), torch.full((4, 2), rank + 1.0)[:, 0]):
        before = tensor.clone()
        got = hvd.allreduce(tensor, name=f"copy.{tensor.is_contiguous()}", op=hvd.Sum)
        assert got.tolist() == [3.0] * 4 and torch.equal(tensor, before), (got, tensor)
    try:  # the general path's error, as before
        hvd.allreduce(torch.eye(2).to_sparse(), name="copy.sparse", op=hvd.Sum)
    except ValueError as error:
        assert "sparse_coo tensors are not supported" in str(error), error
    else:
        raise AssertionError("allreduce took a sparse tensor")
    graded = torch.full((2,), rank + 1.0, requires_grad=True)
    hvd.allreduce(graded, name="copy.grad", op=hvd.Sum).sum().backward()
    assert graded.grad.tolist() == [2.0, 2.0], graded.grad  # autograd's path, as before


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check_taken(rank)
    check_taken_broadcast_allgather_grouped(rank)
    check_process_sets(rank)
    check_declined()
    check_one_element(rank)
    check_fallbacks(rank, size)
    check_mismatches(rank)
    check_allreduce_itself(rank, size)
    check_allreduce_into_a_new_tensor(rank)
    hvd.shutdown()
    print(f"rank {rank}: one call OK", flush=True)


if __name__ == "__main__":
    main()
