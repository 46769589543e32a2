"""`hvdliterun --min-np ...`: sets up an elastic job (store, environment,
discovery, workers) and hands it to the driver."""
import os
import queue

from hvdlite.runner.elastic.discovery import FixedDiscovery, ScriptDiscovery
from hvdlite.runner.elastic.driver import ElasticDriver
from hvdlite.runner.elastic.workers import WorkerPool
from hvdlite.runner.environment import job_environment, tuning_environment
from hvdlite.runner.hosts import Host, HostError, parse_host_list, parse_hostfile
from hvdlite.runner.processes import LaunchError
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.runner.signals import forwarded_signals
from hvdlite.runner.store import StoreClient, StoreServer

LOCAL_ADDR = "127.0.0.1"


def run_elastic(args, console):
    """Runs the elastic job to its end; returns the launcher's exit code."""
    try:
        discovery = _discovery(args)
    except HostError as error:
        console.message(f"error: {error}")
        return 2
    secret, job_id = make_secret(), make_job_id()
    # Workers run on this machine only (workers.py), so the store and the
    # data connections stay on the loopback interface.
    with StoreServer(secret, host=LOCAL_ADDR) as server, \
            StoreClient(LOCAL_ADDR, server.port, secret) as store:
        environment = dict(os.environ)
        environment.update(job_environment(
            store_addr=LOCAL_ADDR, store_port=server.port, secret=secret, job_id=job_id,
            bind_addr=LOCAL_ADDR, start_timeout=f"{args.start_timeout:g}"))
        environment.update(tuning_environment(args))
        environment["HVDLITE_ELASTIC_TIMEOUT"] = f"{args.elastic_timeout:g}"
        events = queue.SimpleQueue()
        pool = WorkerPool(args.command, environment, console, events,
                          output_directory=args.output_filename, verbose=args.verbose)
        driver = ElasticDriver(args, discovery, pool, store, job_id, console, events)
        with forwarded_signals(events):
            try:
                return driver.run()
            except LaunchError as error:
                console.message(str(error))
                return error.exit_code
            finally:
                pool.kill_all()
                pool.wait_all()


def _discovery(args):
    if args.host_discovery_script:
        return ScriptDiscovery(args.host_discovery_script, args.slots)
    if args.hosts:
        return FixedDiscovery(parse_host_list(args.hosts))
    if args.hostfile:
        return FixedDiscovery(parse_hostfile(args.hostfile))
    return FixedDiscovery([Host("localhost", args.max_np or args.num_proc)])
