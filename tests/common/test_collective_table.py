"""hvdlite/common/collective_table.py: each row agrees with the C API and the
core (codes, request fields, output sizing), and the finishers build what
synchronize() returns. No processes: the table is plain data."""
import re
from pathlib import Path

import numpy as np
import pytest

from hvdlite.common import collective_table as table
from hvdlite.common.ops import OpType
from hvdlite.common.sharding import row_range

API_H = Path(__file__).resolve().parents[2] / "csrc" / "api" / "api.h"


def request_fields():
    """The field names of csrc/api/api.h's hvdlite_request."""
    body = re.search(r"typedef struct hvdlite_request \{(.*?)\} hvdlite_request;",
                     API_H.read_text(), re.S).group(1)
    return set(re.findall(r"^\s*[\w\s\*]+?\**\s*(\w+);", body, re.M))


def test_rows_name_the_core_codes_and_request_fields():
    fields = request_fields()
    assert {"op", "reduce_op", "root_rank", "splits", "output_bytes"} <= fields
    for collective in table.COLLECTIVES:
        assert OpType(collective.op).name.lower() == collective.kind
        assert set(collective.fields) <= fields, collective.kind
        assert table.BY_KIND[collective.kind] is collective
        if collective.groupable:
            assert table.BY_KIND[collective.grouped_kind] is collective
    assert {c.kind for c in table.COLLECTIVES} == {
        "allreduce", "allgather", "broadcast", "alltoall", "reducescatter"}


@pytest.mark.parametrize("shape", [(7, 3), (2,), (), (0, 4)])
@pytest.mark.parametrize("size", [1, 3, 4])
def test_output_shapes_follow_the_core(shape, size):
    rows = shape[0] if shape else 1
    for rank in range(size):
        assert table.ALLREDUCE.output_shape(shape, size, rank) == shape
        assert table.BROADCAST.output_shape(shape, size, rank) == shape
        scattered = table.REDUCESCATTER.output_shape(shape, size, rank)
        assert scattered == (row_range(rows, size, rank)[1],) + tuple(shape[1:])
        assert table.ALLGATHER.output_shape(shape, size, rank) == (rows * size,) + shape[1:]
        assert table.ALLGATHER.output_shape(shape, size, rank, rows=11)[0] == 11
    # every rank's share together is the whole first dimension
    assert sum(table.REDUCESCATTER.output_shape(shape, size, r)[0] for r in range(size)) == rows
    assert table.ALLREDUCE.allocated_before and not table.ALLGATHER.allocated_before


def test_finishers_build_what_synchronize_returns():
    finishing = table.Finishing(lambda raw, shape, like: raw.view(like.dtype).reshape(shape),
                                lambda received, like: np.asarray(received, like))
    source = np.zeros((2, 2), np.float32)
    raw = np.arange(6, dtype=np.float32).view(np.uint8)
    result = (raw, (3, 2), [1, 2], None)

    assert finishing.of(table.ALLREDUCE)((source, "output"), None) == "output"
    received = finishing.of(table.ALLGATHER)((source, None), (result,))
    assert received.dtype == np.float32 and received.shape == (3, 2)
    rows, splits = finishing.of(table.ALLTOALL)((source, np.int64), (result,))
    assert rows.shape == (3, 2) and splits.tolist() == [1, 2] and splits.dtype == np.int64
    parts = [(table.written, (source, "first")), (finishing.received, (source, None))]
    first, second = table.each(parts, [None, result])
    assert first == "first" and second.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert table.member_name("grads", 3) == "grads.3"
