"""horovod.runner.launch (Note [Horovod runner adapters]): horovodrun's
parse_args and _run_elastic, on hvdliterun's parser and elastic driver."""
import sys

from hvdlite import alias
from hvdlite.alias.runner import gloo_run
from hvdlite.alias.runner.elastic import constants, driver
from hvdlite.common import defaults
from hvdlite.runner import arguments
from hvdlite.runner.elastic import launch as elastic_launch
from hvdlite.runner.output import Console

__all__ = ["parse_args", "_run_elastic"]

# Horovod's words for a job that a worker's failure ended (gloo_run.py);
# its tests match them.
_WORKER_FAILED = ("Horovod detected that one or more processes exited with non-zero status, "
                  "thus causing the job to be terminated. The first process to do so was:\n"
                  "Process name: {name}\nExit code: {code}\n")


def parse_args():
    """horovodrun's command line (sys.argv) as hvdliterun reads it: hvdliterun
    takes horovodrun's flags, so the result is hvdliterun's namespace."""
    return arguments.parse_args(sys.argv[1:])


def _run_elastic(args):
    """Runs the elastic job `args` describes (from parse_args) to its end on
    hvdliterun's elastic driver, its workers resolving horovod imports as
    this process does. Returns None; raises RuntimeError as Horovod does when
    the job fails (a worker's failure, the reset limit, too few slots)."""
    args.horovod_alias = args.horovod_alias or alias.mode_from_environment() or "on"
    # The flags win; without them, the module constants that Horovod's
    # tests patch (horovodrun has no --discovery-interval).
    if args.discovery_interval == defaults.DISCOVERY_INTERVAL_S:
        args.discovery_interval = driver.DISCOVER_HOSTS_FREQUENCY_SECS
    if args.elastic_timeout == defaults.ELASTIC_TIMEOUT_S:
        args.elastic_timeout = driver.ELASTIC_TIMEOUT_SECS
    settings = elastic_launch.settings(args)
    settings.min_start_hosts = gloo_run._get_min_start_hosts(settings)
    outcome = elastic_launch.elastic_outcome(args, Console(), elastic_settings=settings)
    if outcome.exit_code == 0:
        return None
    if outcome.reset_limit_reached:
        raise RuntimeError(constants.RESET_LIMIT_EXCEEDED_MESSAGE.format(args.reset_limit))
    if outcome.failure is not None:
        worker = outcome.failure
        raise RuntimeError(_WORKER_FAILED.format(name=f"{worker.host}[{worker.slot}]",
                                                 code=worker.ending.exit_code))
    raise RuntimeError(outcome.stop_reason or
                       f"the elastic job ended with exit code {outcome.exit_code}")
