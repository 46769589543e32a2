"""The one place Python reads hvdlite's environment variables, as
csrc/core/config.cc is for C++: each variable the Python side reads is
declared once below with its Horovod name where one exists, how its value is
parsed, its default and what it does; modules call get() (or raw()) instead
of looking into os.environ.

The rule: every HVDLITE_*/HOROVOD_* variable Python *reads* is declared
here, whatever its role:

    setting   a tunable a user sets (log level, cache folder, timeouts, the
              JAX FFI switch...); the table of docs/environment.md
              documents each one with the same default (tests/common/
              test_config.py holds the two together).
    layout    job layout and rendezvous plumbing a launcher writes for its
              workers (HVDLITE_RANK, _STORE_ADDR, _SECRET, _JOB_ID, the
              elastic worker's id and first round...); docs/environment.md
              names them as "set by hvdliterun" rather than as tunables.

Writing variables into a child's environment (a launcher building a
worker's environment, the elastic driver placing a worker in a round) is
not a read and stays with the code that does it. Passing every
HVDLITE_/HOROVOD_ variable on unread (to the core, whose Config parses them,
or to mpirun's children) goes through hvdlite_variables().

As in config.cc, a variable set to the empty string counts as unset, and the
HVDLITE_ name wins over the Horovod one. A value that does not parse raises
SettingError naming the variable, the value and what it accepts.
"""
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from hvdlite.common import defaults

PREFIXES = ("HVDLITE_", "HOROVOD_")


class SettingError(ValueError):
    """An hvdlite environment variable holds a value its reader refuses."""


@dataclass(frozen=True)
class Variable:
    """One environment variable Python reads. `parse` turns the text into
    the value and raises ValueError for text it refuses; `accepts` finishes
    the sentence "<NAME>=<value> is not ..." in that case."""
    name: str
    parse: Callable[[str], Any]
    default: Any
    accepts: str
    description: str
    role: str = "setting"   # "setting" or "layout" (see the module docstring)
    aliases: Tuple[str, ...] = ()  # read in order after `name` when it is unset
    documented_default: Optional[str] = None  # docs/environment.md's default column, when not str(default)

    @property
    def names(self):
        return (self.name,) + self.aliases

    @property
    def readme_default(self):
        return self.documented_default if self.documented_default is not None \
            else str(self.default)


# Parsers: each raises ValueError for text it does not accept.
def _text(value):
    return value


def _integer(value):
    return int(value)


def _seconds(value):
    return float(value)


def _lower(value):
    return value.strip().lower()


def _is_one(value):
    # The launchers write "1"; anything else means off, as before this reader.
    return value == "1"


def _on_off(value):
    word = value.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _alias_mode(value):
    word = value.strip().lower()
    if word in ("", "0", "off", "false", "no"):
        return None
    if word in ("1", "on", "true", "yes"):
        return "on"
    if word == "force":
        return "force"
    raise ValueError(value)


# The core's level names (a trace level below logging.DEBUG, as the core's
# trace is below its debug).
LOG_LEVELS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO,
               "warning": logging.WARNING, "warn": logging.WARNING, "error": logging.ERROR,
               "fatal": logging.CRITICAL}


def _log_level(value):
    # A name the core would refuse also means warning here: the core's error
    # at init() says what is wrong with it.
    return LOG_LEVELS.get(value.strip().lower(), logging.WARNING)


_SECONDS = "a number of seconds"
_VARIABLES = [
    # Settings.
    Variable("HVDLITE_LOG_LEVEL", _log_level, logging.WARNING,
             "trace, debug, info, warning, error or fatal",
             "level of the core's log and of the `hvdlite` Python logger",
             aliases=("HOROVOD_LOG_LEVEL",), documented_default="warning"),
    Variable("HVDLITE_START_TIMEOUT", _seconds, defaults.RANK_START_TIMEOUT_S, _SECONDS,
             "seconds a rank waits for the others at rendezvous; hvdliterun's --start-timeout",
             aliases=("HOROVOD_START_TIMEOUT",), documented_default="60"),
    Variable("HVDLITE_GLOO_TIMEOUT_SECONDS", _seconds, None, _SECONDS,
             "Horovod's gloo timeout: the start timeout when HVDLITE_START_TIMEOUT is unset",
             aliases=("HOROVOD_GLOO_TIMEOUT_SECONDS",), documented_default="unset"),
    Variable("HVDLITE_ELASTIC_TIMEOUT", _seconds, defaults.ELASTIC_TIMEOUT_S, _SECONDS,
             "seconds an elastic job waits for --min-np usable slots before it stops",
             aliases=("HOROVOD_ELASTIC_TIMEOUT",), role="layout"),
    Variable("HVDLITE_SPARK_START_TIMEOUT", _seconds, defaults.SPARK_START_TIMEOUT_S, _SECONDS,
             "seconds hvdlite.spark.run waits for every task to start and register",
             aliases=("HOROVOD_SPARK_START_TIMEOUT",), documented_default="600"),
    Variable("HVDLITE_CPU_OPERATIONS", _lower, None, "auto, gloo, tcp or mpi",
             "the data transport", aliases=("HOROVOD_CPU_OPERATIONS",),
             documented_default="auto"),
    Variable("HVDLITE_CONTROLLER", _lower, None, "auto, mpi, tcp or gloo",
             "the transport negotiation runs over", aliases=("HOROVOD_CONTROLLER",),
             documented_default="auto"),
    Variable("HVDLITE_GPU_LIBRARY_PATH", _text, None, "directories separated by ':'",
             "directories searched first for NCCL and the CUDA runtime",
             aliases=("HOROVOD_GPU_LIBRARY_PATH",), documented_default="found wheels, torch"),
    # The core reads both under its HOROVOD_ names too, as every variable.
    Variable("HVDLITE_MPI_LIBRARY", _text, None, "the path of a libmpi shared library",
             "load exactly this libmpi when MPI is used", aliases=("HOROVOD_MPI_LIBRARY",),
             documented_default="unset"),
    Variable("HVDLITE_MPI_LIBRARY_PATH", _text, None, "directories separated by ':'",
             "directories searched first for libmpi", aliases=("HOROVOD_MPI_LIBRARY_PATH",),
             documented_default="unset"),
    Variable("HVDLITE_JAX_FFI", _on_off, True,
             "1 (collectives inside jax.jit through the XLA FFI custom call, the default) or 0 "
             "(through an ordered io_callback)",
             "0: hvdlite.jax collectives inside jax.jit go through an ordered io_callback",
             documented_default="1"),  # Horovod has no JAX binding, so no HOROVOD_ name
    Variable("HVDLITE_HOROVOD_ALIAS", _alias_mode, None,
             "1 (horovod imports resolve to hvdlite unless a real Horovod is installed), "
             "force (even then) or 0",
             "`import horovod...` resolves to hvdlite", documented_default="0"),
    Variable("HVDLITE_CACHE_DIR", _text, None, "a folder",
             "where compiled code (the TensorFlow op library, the JAX FFI handler) is cached",
             documented_default="`~/.cache/hvdlite`"),
    Variable("HVDLITE_SECRET_FILE", _text, os.path.join("~", ".hvdlite", "secret"), "a file",
             "the job secret's file when HVDLITE_SECRET is unset (srun, mpirun, torchrun)",
             documented_default="`~/.hvdlite/secret`"),
    Variable("HVDLITE_NETWORK_INTERFACE", _text, None, "interface names separated by ','",
             "hvdliterun's --network-interface when the flag is not given: the interface(s) for "
             "rendezvous, data and NCCL between hosts", documented_default="unset"),
    Variable("HVDLITE_SOCKET_IFNAME", _text, None, "interface names separated by ','",
             "the interface a rank's data connections use (the first this host has)",
             aliases=("HOROVOD_GLOO_IFACE", "GLOO_SOCKET_IFNAME"), documented_default="unset"),
    # Layout and rendezvous, written by the launchers.
    Variable("HVDLITE_RANK", _integer, None, "an integer", "this process's rank",
             role="layout", aliases=("HOROVOD_RANK",)),
    Variable("HVDLITE_SIZE", _integer, None, "an integer", "the number of ranks",
             role="layout", aliases=("HOROVOD_SIZE",)),
    Variable("HVDLITE_HOSTNAME", _text, None, "a host identity",
             "this rank's host identity", role="layout"),
    Variable("HVDLITE_BIND_ADDR", _text, None, "an address",
             "address data connections listen on", role="layout"),
    Variable("HVDLITE_STORE_ADDR", _text, None, "a host name or address",
             "the rendezvous store's host", role="layout"),
    Variable("HVDLITE_STORE_PORT", _integer, None, "a port number",
             "the rendezvous store's port", role="layout"),
    Variable("HVDLITE_SECRET", _text, None, "a secret",
             "the job's secret (store and data connections)", role="layout"),
    Variable("HVDLITE_JOB_ID", _text, None, "a job id", "the job's id", role="layout"),
    Variable("HVDLITE_ELASTIC", _is_one, False, "1", "this worker belongs to an elastic job",
             role="layout", aliases=("HOROVOD_ELASTIC",)),
    Variable("HVDLITE_ELASTIC_WORKER_ID", _text, None, "a worker id",
             "the elastic worker's id, unique for the job's lifetime", role="layout"),
    Variable("HVDLITE_ELASTIC_FIRST_ROUND", _integer, 0, "an integer",
             "the first rendezvous round an elastic worker joins", role="layout"),
    Variable("HVDLITE_THREADS_CHOSEN", _text, None, "cores,local size",
             "the launcher set the rank's thread counts for this many cores and local ranks "
             "(Note [Threads per rank] in hvdlite/common/threads.py)", role="layout"),
]
VARIABLES = {variable.name: variable for variable in _VARIABLES}


class MissingVariable(KeyError):
    """A variable the caller needs is unset; args[0] is its name, as for
    os.environ[name]."""


def declared(name):
    """The Variable declared as `name`; KeyError names an undeclared one."""
    try:
        return VARIABLES[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in hvdlite/common/config.py; declare it "
                       f"there (name, parsing, default, description)") from None


def lookup(name, environ=None):
    """(variable, text) of the first of `name` and its aliases set to a
    non-empty value in `environ` (default os.environ); None when none is."""
    found = each(name, environ)
    return found[0] if found else None


def each(name, environ=None):
    """(variable, text) for each of `name` and its aliases set to a
    non-empty value, in order: for a caller that falls through to the next
    name when one holds nothing it can use."""
    environ = os.environ if environ is None else environ
    return [(variable, environ[variable]) for variable in declared(name).names
            if environ.get(variable)]


def is_set(name, environ=None):
    """True when `name` or an alias is in `environ` at all, even empty (a
    user who set HVDLITE_RANK decides the layout, whatever its value)."""
    environ = os.environ if environ is None else environ
    return any(variable in environ for variable in declared(name).names)


def raw(name, environ=None):
    """The text of `name` (not its aliases) exactly as set, the empty string
    included; None when unset. For callers that must tell "set but empty"
    apart (an empty secret is refused, not ignored)."""
    declared(name)
    environ = os.environ if environ is None else environ
    return environ.get(name)


_UNSET = object()


def get(name, environ=None, default=_UNSET):
    """The parsed value of `name` (or an alias) in `environ` (default
    os.environ); the declared default, or `default` when given, when unset.
    Raises SettingError for a value the variable does not accept."""
    found = lookup(name, environ)
    if found is None:
        return declared(name).default if default is _UNSET else default
    variable, value = found
    try:
        return declared(name).parse(value)
    except ValueError:
        raise SettingError(f"{variable}={value!r} is not {declared(name).accepts}") from None


def required(name, environ=None):
    """get() for a variable that must be set (launcher-written layout);
    MissingVariable (a KeyError naming it) when it is not."""
    if lookup(name, environ) is None:
        raise MissingVariable(name)
    return get(name, environ)


def hvdlite_variables(environ=None):
    """Every HVDLITE_*/HOROVOD_* variable of `environ`, unparsed: what the
    core's Config reads, and what a launcher forwards to its children."""
    environ = os.environ if environ is None else environ
    return {key: value for key, value in environ.items() if key.startswith(PREFIXES)}
