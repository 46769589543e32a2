"""`hvdliterun --min-np ...`: sets up an elastic job (store, environment,
discovery, workers) and hands it to the driver."""
import os
import queue

from hvdlite.store import network
from hvdlite.runner.cleanup import remove_shared_memory
from hvdlite.runner.elastic.discovery import FixedDiscovery, ScriptDiscovery
from hvdlite.runner.elastic.driver import ElasticDriver
from hvdlite.runner.elastic.workers import WorkerPool
from hvdlite.runner.environment import job_environment, tuning_environment
from hvdlite.runner.function_job import attached
from hvdlite.runner.hosts import Host, HostError, is_local, parse_host_list, parse_hostfile
from hvdlite.runner.processes import LaunchError
from hvdlite.runner.remote import RemoteOptions
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.runner.signals import forwarded_signals
from hvdlite.store import StoreClient, StoreServer

LOCAL_ADDR = "127.0.0.1"


def run_elastic(args, console, function_job=None):
    """Runs the elastic job to its end; returns the launcher's exit code.
    function_job: as for launch.launch."""
    try:
        discovery = _discovery(args)
    except HostError as error:
        if function_job is not None:  # hvdlite.run: the caller's mistake, raised to it
            raise ValueError(f"hvdlite.run: {error}") from None
        console.message(f"error: {error}")
        return 2
    remote_options, no_remote_reason = None, None
    candidates = [LOCAL_ADDR]
    interfaces = args.network_interface.split(",") if args.network_interface else None
    if not _only_this_machine(discovery):
        try:
            candidates = network.store_candidates(interfaces)
        except network.NetworkError as error:
            no_remote_reason = f"workers cannot start there: {error}"
    secret, job_id = make_secret(), make_job_id()
    # With hosts other than this machine (possible whenever a discovery
    # script may name one) the store must be reachable from them: listen on
    # every interface (each connection still has to prove the job secret).
    listen = LOCAL_ADDR if candidates == [LOCAL_ADDR] else "0.0.0.0"
    with StoreServer(secret, host=listen) as server, \
            StoreClient(LOCAL_ADDR, server.port, secret) as store, \
            attached(function_job, server.port, secret, job_id):
        if listen != LOCAL_ADDR:
            remote_options = RemoteOptions(
                store_candidates=candidates, store_port=server.port,
                connect_timeout=args.start_timeout, network_interfaces=interfaces,
                ssh_port=args.ssh_port, ssh_identity_file=args.ssh_identity_file)
        environment = dict(os.environ)
        # Workers on this machine listen on the loopback interface until a
        # round has workers elsewhere (rounds.Placement.bind_addr).
        environment.update(job_environment(
            store_addr=LOCAL_ADDR, store_port=server.port, secret=secret, job_id=job_id,
            bind_addr=LOCAL_ADDR, start_timeout=f"{args.start_timeout:g}"))
        environment.update(tuning_environment(args))
        environment["HVDLITE_ELASTIC_TIMEOUT"] = f"{args.elastic_timeout:g}"
        events = queue.SimpleQueue()
        pool = WorkerPool(args.command, environment, console, events,
                          output_directory=args.output_filename, verbose=args.verbose,
                          remote_options=remote_options, no_remote_reason=no_remote_reason)
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
                remove_shared_memory(job_id)  # this machine's; each agent removes its host's


def _only_this_machine(discovery):
    return isinstance(discovery, FixedDiscovery) and all(map(is_local, discovery.find()))


def _discovery(args):
    if args.host_discovery_script:
        return ScriptDiscovery(args.host_discovery_script, args.slots)
    if args.hosts:
        return FixedDiscovery(parse_host_list(args.hosts))
    if args.hostfile:
        return FixedDiscovery(parse_hostfile(args.hostfile))
    return FixedDiscovery([Host("localhost", args.max_np or args.num_proc)])
