"""Several workers' checks in one job, where starting the ranks (importing
TensorFlow, Keras, JAX) costs more than the checks themselves:

    one_job.py WORKER.py [WORKER.py ...] [-- CHECK ...]

Each WORKER is a worker made of named checks (checks.run_checks) that
declares, at module level, `hvd` (its binding), `CHECKS` (its checks, a list
or a dict) and `DONE` (the line it prints once they passed). They are
imported in the order given (each from its own folder, so its own imports
resolve) and their checks run one worker after the other in this one
hvdlite job, each worker's DONE printed after its checks: a test reads each
worker's line as it would from a job of its own. The first failed check
ends the job (checks.check), so a later worker's DONE is then missing too.
Names after `--` pick checks of any worker (checks.run_check_groups)."""
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import run_check_groups  # noqa: E402


def load(path):
    path = Path(path).resolve()
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def main():
    arguments = sys.argv[1:]
    split = arguments.index("--") if "--" in arguments else len(arguments)
    workers = [load(path) for path in arguments[:split]]
    if not workers:
        sys.exit("one_job.py: name at least one worker")
    sys.argv = [sys.argv[0], *arguments[split + 1:]]
    run_check_groups(workers[0].hvd, [(worker.CHECKS, worker.DONE) for worker in workers])


if __name__ == "__main__":
    main()
