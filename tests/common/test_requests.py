"""The one request type across the Python/C++ boundary (hvdlite/common/requests.py,
csrc/api/request.cc, csrc/python/keyword_request.cc): bad requests from every
front door are refused before anything is queued and the job goes on; one
handle table for every binding; the codes defined once in csrc/api/api.h."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"
CSRC = Path(__file__).resolve().parents[2] / "csrc"


@pytest.mark.parametrize("np_", [2, 3])
def test_bad_requests_fail_the_call_and_the_job_goes_on(world, np_):
    pytest.importorskip("torch")
    result = world(np_, WORKERS / "bad_requests.py", timeout=120).expect_ok()
    for rank in range(np_):
        assert "bad requests OK" in result.lines(rank), result


def test_a_handle_is_valid_only_in_the_binding_that_made_it(world):
    pytest.importorskip("torch")
    result = world(2, WORKERS / "binding_handles.py", timeout=120).expect_ok()
    for rank in range(2):
        assert "binding handles OK" in result.lines(rank), result


def _api_codes(list_name):
    """{NAME: value} of one of api.h's code lists (HVDLITE_DTYPES(X) ...)."""
    text = (CSRC / "api" / "api.h").read_text()
    body = re.search(rf"#define {list_name}\(X\)(.*?)\n\n", text, re.S).group(1)
    return {name: int(value) for name, value in re.findall(r"X\((\w+), (\d+)\)", body)}


def test_codes_agree_everywhere():
    from hvdlite import _codes, _core
    from hvdlite.common.ops import DataType, OpType, ReduceOp
    lists = {"op_types": "HVDLITE_OP_TYPES", "reduce_ops": "HVDLITE_REDUCE_OPS",
             "data_types": "HVDLITE_DTYPES"}
    for attribute, list_name in lists.items():
        assert getattr(_core, attribute) == getattr(_codes, attribute) == _api_codes(list_name)
    assert {m.name: int(m) for m in OpType} == _core.op_types
    assert {m.name: int(m) for m in DataType} == _core.data_types
    assert {m.name.upper(): int(m) for m in ReduceOp} == _core.reduce_ops
    # Horovod's public names are unchanged.
    import hvdlite
    assert [m.name for m in ReduceOp] == ["Sum", "Average", "Min", "Max", "Product", "Adasum"]
    assert (hvdlite.Sum, hvdlite.Average, hvdlite.Adasum) == (ReduceOp.Sum, ReduceOp.Average,
                                                             ReduceOp.Adasum)
    assert "BFLOAT16" in DataType.__members__ and "REMOVE_PROCESS_SET" in OpType.__members__


def test_tensorflow_sources_use_api_h_codes_not_literals():
    literal = re.compile(r"\b(?:op|dtype|reduce_op)\s*=\s*-?\d+\s*;"  # request.op = 3;
                         r"|case\s+tf::DT_\w+:\s*return\s+\d+"         # case tf::DT_FLOAT: return 6
                         r"|constexpr\s+int32_t\s+k[A-Z]\w*\s*=\s*\d")  # constexpr int32_t kJoin = 6
    sources = sorted((CSRC / "tensorflow").glob("*.[ch]*"))
    assert sources
    found = [f"{path.name}:{n}: {line.strip()}" for path in sources
             for n, line in enumerate(path.read_text().splitlines(), 1) if literal.search(line)]
    assert not found, "literal codes in the TF sources; use api.h's HVDLITE_* constants:\n" + \
        "\n".join(found)
    kernels = (CSRC / "tensorflow" / "collective_kernels.cc").read_text()
    assert "HVDLITE_OP_ALLREDUCE" in kernels and "hvdlite_request_defaults()" in kernels


def test_importing_hvdlite_loads_no_core():
    """The enums come from hvdlite._codes: `import hvdlite` (the launcher) must
    not load libhvdlite and the MPI library it links."""
    probe = ("import sys, hvdlite; assert hvdlite.Average == 1; "
             "print(sorted(m for m in sys.modules if m.startswith('hvdlite._')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['hvdlite._codes']", out.stdout
