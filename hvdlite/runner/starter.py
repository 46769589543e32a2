"""Starting a job's processes: directly on this machine, or on another host
through one ssh connection and its agent (remote.RemoteHost). A static
job's ranks (job.py) and an elastic job's workers
(elastic/process_source.py) start the same way; each exit is reported on
`events` as ("exit", processes.Rank)."""
import os
import shlex
import subprocess
import threading

from hvdlite.common.threads import thread_defaults
from hvdlite.runner.output import RankOutput
from hvdlite.runner.processes import LaunchError, Rank, terminate_with_parent
from hvdlite.runner.remote import RemoteHost, forwarded_environment


class Starter:
    """Starts `command` with the job's `environment` (a full one: this
    process's, with the job's variables on top). remote_options: what ssh
    hosts need (remote.RemoteOptions), or None when the job cannot have
    any, `no_remote_reason` saying why."""

    def __init__(self, command, environment, console, events, output_directory=None,
                 verbose=False, remote_options=None, no_remote_reason=None):
        self.command = command
        self.environment = environment
        self.remote_options = remote_options
        self._console = console
        self._events = events
        self._output_directory = output_directory
        self._verbose = verbose
        self._no_remote_reason = no_remote_reason

    def here(self, label, host, variables, kind="rank", local_size=1):
        """Starts one process on this machine with `variables` on top of the
        job's environment, one of `local_size` on this host (their thread
        pools share its cores: Note [Threads per rank] in
        hvdlite/common/threads.py); `label` prefixes its output. Raises
        LaunchError."""
        env = dict(self.environment)
        env.update(variables)
        env.update(thread_defaults(local_size, env))
        output = RankOutput(label, self._console, self._output_directory)
        try:
            process = subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True, preexec_fn=terminate_with_parent)
        except OSError as error:
            raise LaunchError(f"cannot start {kind} {label}: {shlex.join(self.command)}: "
                              f"{error.strerror or error}. Check the command and your PATH.",
                              exit_code=127 if isinstance(error, FileNotFoundError) else 126,
                              ) from error
        if self._verbose:
            self._console.message(f"started {kind} {label} on {host} (pid {process.pid}): "
                                  f"{shlex.join(self.command)}")
        output.start(process.stdout, process.stderr)
        started = Rank(label, host, process, output)
        threading.Thread(target=_report_exit, args=(started, self._events),
                         name=f"hvdlite-rank{label}-wait", daemon=True).start()
        return started

    def connect(self, host, layouts, size=None, more_ranks=False):
        """Opens `host`'s ssh connection and starts the processes of `layouts`
        (agent.py says what a layout holds) there; with more_ranks, further
        ones can start over it later (RemoteHost.add_rank). Returns the
        RemoteHost; raises LaunchError when ssh cannot run at all."""
        if self.remote_options is None:
            raise LaunchError(f"host {host!r} is not this machine, but {self._no_remote_reason}",
                              exit_code=2)
        connection = RemoteHost(host, self.command, forwarded_environment(self.environment),
                                self.remote_options, self._console, self._events,
                                self._output_directory, self._verbose, size=size,
                                more_ranks=more_ranks)
        try:
            connection.start(os.getcwd(), layouts)
        except OSError as error:
            raise LaunchError(f"cannot run ssh to reach host {host}: {error.strerror or error}; "
                              f"install an ssh client (e.g. openssh-client)",
                              exit_code=127) from error
        return connection


def _report_exit(rank, events):
    rank.process.wait()
    events.put(("exit", rank))
