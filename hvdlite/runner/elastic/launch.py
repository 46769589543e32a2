"""`hvdliterun --min-np ...`: an elastic job of worker processes. The job's
set-up is a static job's (job_setup.py); the driver (driver.py) runs it
with the discovered hosts and this machine's processes as its worker
source (process_source.py)."""
import queue

from hvdlite.runner.elastic.discovery import FixedDiscovery, ScriptDiscovery
from hvdlite.runner.elastic.driver import ElasticDriver, Outcome
from hvdlite.runner.elastic.process_source import ProcessSource
from hvdlite.runner.elastic.settings import ElasticSettings
from hvdlite.runner.hosts import Host, HostError, is_local, parse_host_list, parse_hostfile
from hvdlite.runner.job_setup import JobSetup
from hvdlite.runner.processes import LaunchError
from hvdlite.runner.signals import forwarded_signals


def run_elastic(args, console, function_job=None):
    """Runs the elastic job to its end; returns the launcher's exit code.
    function_job: as for launch.launch."""
    return elastic_outcome(args, console, function_job).exit_code


def elastic_outcome(args, console, function_job=None, elastic_settings=None):
    """Runs the elastic job to its end; returns how it ended (driver.Outcome).
    elastic_settings: the driver's (default: settings(args))."""
    try:
        discovery = _discovery(args)
    except HostError as error:
        if function_job is not None:  # hvdlite.run: the caller's mistake, raised to it
            raise ValueError(f"hvdlite.run: {error}") from None
        console.message(f"error: {error}")
        return Outcome(2, formed=False, stop_reason=str(error))
    # Any host a discovery script names may be another machine.
    remote = not (isinstance(discovery, FixedDiscovery) and all(map(is_local, discovery.find())))
    with JobSetup(args, console, remote, function_job) as setup:
        events = queue.SimpleQueue()
        # Workers on this machine listen on the loopback interface until a
        # round has workers elsewhere (rounds.Placement.bind_addr).
        starter = setup.starter(events, {"HVDLITE_ELASTIC_TIMEOUT": f"{args.elastic_timeout:g}"})
        source = ProcessSource(discovery, starter, events)
        driver = ElasticDriver(elastic_settings or settings(args), source, setup.client(),
                               setup.job_id, console.message)
        with forwarded_signals(events):
            try:
                return driver.run()
            except LaunchError as error:
                console.message(str(error))
                return Outcome(error.exit_code, stop_reason=str(error))
            finally:
                source.kill_all()
                source.wait_all()


def settings(args):
    """The driver's settings from hvdliterun's arguments."""
    return ElasticSettings(min_np=args.min_np, max_np=args.max_np, num_proc=args.num_proc,
                           reset_limit=args.reset_limit, elastic_timeout=args.elastic_timeout,
                           cooldown_range=args.blacklist_cooldown_range,
                           discovery_interval=args.discovery_interval, verbose=args.verbose)


def _discovery(args):
    if args.host_discovery_script:
        return ScriptDiscovery(args.host_discovery_script, args.slots)
    if args.hosts:
        return FixedDiscovery(parse_host_list(args.hosts))
    if args.hostfile:
        return FixedDiscovery(parse_hostfile(args.hostfile))
    return FixedDiscovery([Host("localhost", args.max_np or args.num_proc)])
