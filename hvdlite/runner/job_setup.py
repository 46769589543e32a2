"""What every hvdliterun job has, static or elastic, from before its first
rank starts until after its last one ended: a secret and an id, the
rendezvous store (listening where its ranks can reach it), the variables
every rank starts with, what ssh hosts need, and the clean-up of
/dev/shm on this machine at the end.

    with JobSetup(args, console, remote=True, function_job=job) as setup:
        starter = setup.starter(events)
        ...
"""
import contextlib
import os

from hvdlite.runner.cleanup import remove_shared_memory
from hvdlite.runner.environment import job_environment, tuning_environment
from hvdlite.runner.function_job import attached
from hvdlite.runner.remote import RemoteOptions
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.runner.starter import Starter
from hvdlite.store import StoreClient, StoreServer, network

LOCAL_ADDR = "127.0.0.1"


class JobSetup:
    """args: the parsed hvdliterun arguments. remote: the job may have
    hosts other than this machine (then the store listens where they may
    reach it: the addresses it offers them, those of --network-interface or
    else every non-loopback address, one socket each and never the wildcard;
    each connection must still prove the job's secret).
    function_job: hvdlite.run's, attached to the store for the job's run."""

    def __init__(self, args, console, remote, function_job=None):
        self.args = args
        self.interfaces = args.network_interface.split(",") if args.network_interface else None
        self.candidates = [LOCAL_ADDR]  # addresses of this machine that hosts may reach
        self.network_error = None  # why no other host could reach this one
        if remote:
            try:
                self.candidates = network.store_candidates(self.interfaces)
            except network.NetworkError as error:
                self.network_error = error
        self.secret, self.job_id = make_secret(), make_job_id()
        # Where the store listens and this machine's ranks and clients reach
        # it: only the addresses the job offers (Note [Listening where offered]
        # in hvdlite/store/server.py). With several candidates (no interface
        # named, or one with several addresses) it listens on each of them,
        # and on loopback for this machine's ranks.
        self.store_addr, self._listen = LOCAL_ADDR, [LOCAL_ADDR]
        if self.candidates != [LOCAL_ADDR]:
            if self.interfaces and len(self.candidates) == 1:
                self.store_addr, self._listen = self.candidates[0], self.candidates
            else:
                self._listen = [LOCAL_ADDR] + [a for a in self.candidates if a != LOCAL_ADDR]
        self.port = None
        self._console = console
        self._function_job = function_job
        self._stack = None

    def __enter__(self):
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(StoreServer(self.secret, host=self._listen))
            self.port = server.port
            stack.enter_context(attached(self._function_job, self.store_addr, self.port,
                                         self.secret, self.job_id))
            # Last in, first out: after the caller's own clean-up stopped the
            # ranks. Each agent removes its own host's.
            stack.callback(remove_shared_memory, self.job_id)
            self._stack = stack.pop_all()
        if self.args.verbose:
            self._console.message(f"job {self.job_id}: rendezvous store on "
                                  f"{' / '.join(self.candidates)}:{self.port}")
        return self

    def __exit__(self, *exc_info):
        return self._stack.__exit__(*exc_info)

    def job_environment(self):
        """The variables of this job that every rank gets (no layout)."""
        env = job_environment(store_addr=self.store_addr, store_port=self.port,
                              secret=self.secret,
                              job_id=self.job_id, bind_addr=LOCAL_ADDR,
                              start_timeout=f"{self.args.start_timeout:g}")
        env.update(tuning_environment(self.args))
        return env

    def remote_options(self):
        """What ssh hosts and their agents need, or None when the store
        listens on this machine only."""
        if self.candidates == [LOCAL_ADDR]:
            return None
        return RemoteOptions(store_candidates=self.candidates, store_port=self.port,
                             connect_timeout=self.args.start_timeout,
                             network_interfaces=self.interfaces, ssh_port=self.args.ssh_port,
                             ssh_identity_file=self.args.ssh_identity_file)

    def starter(self, events, extra_environment=None):
        """A Starter of the job's command with this process's environment,
        the job's variables and `extra_environment` on top."""
        environment = dict(os.environ)
        environment.update(self.job_environment())
        environment.update(extra_environment or {})
        reason = f"workers cannot start there: {self.network_error}" if self.network_error \
            else "the job's hosts are all this machine"
        return Starter(self.args.command, environment, self._console, events,
                       output_directory=self.args.output_filename, verbose=self.args.verbose,
                       remote_options=self.remote_options(), no_remote_reason=reason)

    def client(self):
        """A client of the job's store, closed with the set-up."""
        return self._stack.enter_context(StoreClient(self.store_addr, self.port, self.secret))
