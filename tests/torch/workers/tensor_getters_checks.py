"""Run by tests/torch/test_tensor_getters.py on one rank: the one call reads a
tensor's is_cpu, dtype, shape and requires_grad through the getters it looked
up once (Note [Tensor attributes read through their getters] in
csrc/python/torch_one_call.cc), and sees a change to torch.Tensor made after
that, as attribute access does; a one-element tensor of another layout than
torch.strided is declined without its layout read; allreduce_ of one tensor takes its own lane
(Note [The in-place allreduce's own lane]) with the general path's result."""
import torch

import hvdlite.torch as hvd
from hvdlite.common import requests as hvd_requests
from hvdlite.torch import core_calls


def in_place(tensor, name, prescale=1.0):
    """allreduce_ through the one call alone: the result, or None where it declined."""
    return core_calls.tensor_call(hvd_requests.ALLREDUCE, True, False, tensor, name,
                                  hvd.global_process_set, hvd.Sum, prescale, 1.0, None)


def copied(tensor, name):
    return core_calls.tensor_call(hvd_requests.ALLREDUCE, False, False, tensor, name,
                                  hvd.global_process_set, hvd.Sum, 1.0, 1.0, None)


def check_lane():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert in_place(x, "lane.x", prescale=2.0) is x
    assert x.tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]], x
    p = torch.nn.Parameter(torch.ones(3))
    with torch.no_grad():
        assert in_place(p, "lane.p", prescale=3.0) is p
    assert p.tolist() == [3.0, 3.0, 3.0], p
    scalar = torch.tensor(5, dtype=torch.int64)
    assert in_place(scalar, "lane.scalar") is scalar and scalar.item() == 5


def check_type_changes_seen():
    x = torch.ones(2)
    assert in_place(x, "seen.before") is x
    torch.Tensor.is_cpu = property(lambda self: False)  # shadows the C getter
    try:
        assert in_place(x, "seen.patched") is None, "one call used a getter torch.Tensor no longer has"
    finally:
        del torch.Tensor.is_cpu
    assert in_place(x, "seen.after") is x
    graded = torch.ones(2, requires_grad=True)
    assert copied(graded, "seen.grad") is None  # autograd's Function decides
    torch.Tensor.requires_grad = property(lambda self: False)
    try:
        assert copied(graded, "seen.grad.patched") is not None
    finally:
        del torch.Tensor.requires_grad
    assert copied(graded, "seen.grad.after") is None
    torch.Tensor.dtype = property(lambda self: torch.complex64)  # a dtype the core does not carry
    try:
        assert in_place(x, "seen.dtype") is None
    finally:
        del torch.Tensor.dtype
    assert in_place(x, "seen.dtype.after") is x



def check_one_element_layouts():
    """A tensor of at most one element is contiguous unless its layout is
    not strided, which its data_ptr() tells by raising (Note [Contiguous
    without is_contiguous() for one element]): every other layout is
    declined, for the general path."""
    one = torch.ones(1)
    assert in_place(one, "layout.strided") is one
    others = {"coo": torch.ones(1).to_sparse(), "coo.empty": torch.ones(0).to_sparse(),
              "csr": torch.ones(1, 1).to_sparse_csr(), "csc": torch.ones(1, 1).to_sparse_csc(),
              "bsr": torch.ones(1, 1).to_sparse_bsr((1, 1))}
    if torch.backends.mkldnn.is_available():
        others["mkldnn"] = torch.ones(1).to_mkldnn()
    for layout, tensor in others.items():
        assert tensor.layout != torch.strided and tensor.numel() <= 1, layout
        assert in_place(tensor, f"layout.{layout}") is None, layout
        assert copied(tensor, f"layout.{layout}.copied") is None, layout
    assert in_place(one, "layout.after") is one


def main():
    hvd.init()
    check_lane()
    check_type_changes_seen()
    check_one_element_layouts()
    hvd.shutdown()
    print("tensor getters OK", flush=True)


if __name__ == "__main__":
    main()
