"""Rank 0 submits a tensor that rank 1 never submits: the stall inspector warns
on rank 0 naming the tensor and rank 1, then (stall shutdown) fails it on every
rank; the job goes on."""
import time

import numpy as np

import hvdlite.numpy as hvd
from checks import check_job_goes_on
from peer_done import mark_done, wait_until_done


def main():
    hvd.init()
    rank = hvd.rank()
    if rank == 0:
        start = time.monotonic()
        try:
            hvd.allreduce(np.ones(4, np.float32), name="lonely")
        except hvd.HvdliteInternalError as error:
            text = str(error)
            assert "'lonely' stalled" in text and "waiting for ranks [1]" in text, text
            assert "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS" in text, text
            print(f"stall failed after {time.monotonic() - start:.1f} s: {text}", flush=True)
            print(f"{type(error).__name__} missing_ranks={list(error.missing_ranks)} "
                  f"tensors={list(error.tensor_names)}", flush=True)
            mark_done()
        else:
            raise AssertionError("the stalled allreduce did not fail")
    else:
        wait_until_done()  # until rank 0 failed, without ever submitting 'lonely'
    check_job_goes_on(hvd, "after")
    print(f"rank {rank}: stall OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
