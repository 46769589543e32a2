"""Ranks disagree on a tensor: every rank gets an error naming it, and the next
collective still works."""
import numpy as np

import hvdlite.numpy as hvd
from checks import check_job_goes_on


def expect_error(fn, *needles):
    try:
        fn()
    except hvd.HvdliteInternalError as error:
        text = str(error)
        for needle in needles:
            assert needle in text, f"'{needle}' not in: {text}"
        print("ERROR:", text)
        return
    raise AssertionError("no error raised")


def main():
    hvd.init()
    rank = hvd.rank()
    expect_error(lambda: hvd.allreduce(np.zeros(2 + rank, np.float32), name="bad_shape"),
                 "bad_shape", "mismatched shape", "rank 0 has [2]", "rank 1 has [3]")
    dtype = np.float32 if rank == 0 else np.float64
    expect_error(lambda: hvd.allreduce(np.zeros(4, dtype), name="bad_dtype"),
                 "bad_dtype", "mismatched dtype", "float32", "float64")
    op = hvd.Sum if rank == 0 else hvd.Max
    expect_error(lambda: hvd.allreduce(np.zeros(4, np.float32), op=op, name="bad_op"),
                 "bad_op", "mismatched reduce op")
    if rank == 0:
        expect_error(lambda: hvd.allreduce(np.zeros(4, np.float32), name="bad_kind"),
                     "bad_kind", "mismatched operation")
    else:
        expect_error(lambda: hvd.broadcast(np.zeros(4, np.float32), 0, name="bad_kind"),
                     "bad_kind", "mismatched operation")
    expect_error(lambda: hvd.broadcast(np.zeros(4, np.float32), root_rank=rank, name="bad_root"),
                 "bad_root", "mismatched root rank")
    # Still working, and the failed names can be reused.
    check_job_goes_on(hvd, "bad_shape")
    print(f"rank {rank}: mismatch OK")
    hvd.shutdown()


if __name__ == "__main__":
    main()
