"""Several torch workers' checks in one hvdlite job, where starting the ranks
(importing torch) costs more than most workers' checks:

    torch_job.py WORKER.py[:CHECK,CHECK...] [WORKER.py[:CHECK,...] ...]

Each WORKER is a worker of this folder made of named checks (check(rank,
size) functions) that declares, at module level, `CHECKS` (its checks) and
`DONE` (the line it prints once they passed). After `:`, the checks to run,
by name (any of the module's functions, in that order); without it, all of
CHECKS. The workers run one after the other, each printing its DONE after its
checks, so a test reads each worker's line as from a job of its own; the
first failed check ends the job (checks.check), so a later worker's DONE is
then missing too.

Unlike tests/common/workers/one_job.py, a check is named per worker (two
workers may have checks of the same name), and each worker's checks run
under the default dtype its import left: most set float64 at import, and
one worker's choice must not change what another checks."""
import sys
from pathlib import Path

import torch

import hvdlite.torch as hvd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common" / "workers"))
from checks import run_check_groups  # noqa: E402
from one_job import load  # noqa: E402


def with_default_dtype(check, dtype):
    def checked(rank, size):
        torch.set_default_dtype(dtype)
        check(rank, size)
    checked.__name__ = check.__name__
    return checked


def group(argument):
    """(checks, done) of one WORKER.py[:CHECK,...] argument."""
    path, _, names = argument.partition(":")
    torch.set_default_dtype(torch.float32)  # torch's own default, as in a process of its own
    worker = load(path)
    dtype = torch.get_default_dtype()
    if names:
        missing = [name for name in names.split(",") if not callable(getattr(worker, name, None))]
        if missing:
            sys.exit(f"torch_job.py: {path} has no check named {', '.join(missing)}")
        checks = [getattr(worker, name) for name in names.split(",")]
    else:
        checks = worker.CHECKS
    return [with_default_dtype(check, dtype) for check in checks], worker.DONE


def main():
    if len(sys.argv) < 2:
        sys.exit("torch_job.py: name at least one worker")
    groups = [group(argument) for argument in sys.argv[1:]]
    sys.argv = sys.argv[:1]  # run_check_groups: every check of every group
    run_check_groups(hvd, groups)


if __name__ == "__main__":
    main()
