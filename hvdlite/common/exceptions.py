"""Exceptions raised by every hvdlite binding (the C++ core maps its errors onto these).

A run-time failure is an HvdliteInternalError (Horovod's HorovodInternalError
is the same class), or one of its subclasses, which say what kind of failure
it was and carry fields a program can read instead of parsing the message:

    try:
        hvd.allreduce(grad, name="grad")
    except hvd.DivergenceError as error:
        for call in error.calls:          # every rank's part, with its call site
            print(call.rank, call.tensor_name, call.call_site)
    except hvd.PeerLostError as error:
        print(error.ranks, error.hosts, error.lost_hosts)

Every class has every field (empty where the kind has nothing to say), so
`getattr` is never needed.
"""
from typing import NamedTuple, Optional


class CallSite(NamedTuple):
    """Where the user's program called a collective (or traced it into a graph)."""
    file: str
    line: int
    function: str

    def __str__(self):
        return f"{self.file}:{self.line} in {self.function}()"


class RankCall(NamedTuple):
    """One rank's part in a failure: the collective it submitted or waits on
    and where it called it. tensor_name is "" for a rank that waits on
    nothing (op "join" while it is in join()); value is, for a mismatch, the
    rank's value of the field the ranks disagree on; blocked says that a
    thread of the rank was blocked waiting (synchronize(), a blocking
    collective, join(), barrier(), a TensorFlow or JAX op)."""
    rank: int
    tensor_name: str
    op: str
    call_site: Optional[CallSite]
    value: str
    blocked: bool


_FIELDS = ("tensor_names", "ranks", "missing_ranks", "hosts", "lost_hosts", "field", "calls")


def _rank_call(call):
    if isinstance(call, RankCall):
        return call
    rank, tensor_name, op, site, value, blocked = call
    return RankCall(rank, tensor_name, op, CallSite(*site) if site else None, value, bool(blocked))


class HvdliteInternalError(RuntimeError):
    """A collective failed at run time: a lost peer, ranks that disagree on a
    tensor, a stall, or a runtime that was shut down. Elastic training catches
    it to restore the last commit and continue.

    The keyword arguments are kept as fields of the same names, empty when the
    failure has nothing to say about them.

    Args:
        *args: the message, as for any exception.
        tensor_names (Iterable[str]): the tensors that failed.
        ranks (Iterable[int]): the ranks it is about: those that disagree (mismatch),
            every rank of the set (divergence), the missing ones (stall), the lost
            ones (lost peer), those that asked to shut down (shutdown).
        missing_ranks (Iterable[int]): ranks that never submitted the tensor (stall, shutdown).
        hosts (Iterable[str]): the hosts of `ranks`, where known.
        lost_hosts (Iterable[str]): hosts that stopped answering (HVDLITE_PEER_TIMEOUT_SECONDS).
        field (str): a mismatch: the field the ranks disagree on ("shape", ...).
        calls (Iterable): every rank's part, RankCall(rank, tensor_name, op,
            call_site, value, blocked), call_site a CallSite or None.
    """

    tensor_names = ()
    ranks = ()
    missing_ranks = ()
    hosts = ()
    lost_hosts = ()
    field = ""
    calls = ()

    def __init__(self, *args, tensor_names=(), ranks=(), missing_ranks=(), hosts=(), lost_hosts=(),
                 field="", calls=()):
        super().__init__(*args)
        self.tensor_names = tuple(tensor_names)
        self.ranks = tuple(ranks)
        self.missing_ranks = tuple(missing_ranks)
        self.hosts = tuple(hosts)
        self.lost_hosts = tuple(lost_hosts)
        self.field = field
        self.calls = tuple(_rank_call(c) for c in calls)

    @property
    def call_sites(self):
        """{rank: CallSite} of the first call of each rank that has a known site."""
        sites = {}
        for call in self.calls:
            if call.call_site is not None:
                sites.setdefault(call.rank, call.call_site)
        return sites

    def fields(self):
        """The fields as a dict (for logs, or to send elsewhere).

        Returns:
            dict: {field name: value} for tensor_names, ranks, missing_ranks, hosts,
                lost_hosts, field and calls.
        """
        return {name: getattr(self, name) for name in _FIELDS}

    # Pickled with its fields (Ray and Spark send a worker's exception to the driver).
    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls, args, state):
    error = cls.__new__(cls)
    RuntimeError.__init__(error, *args)
    error.__dict__.update(state)
    return error


class CollectiveMismatchError(HvdliteInternalError):
    """The ranks submitted the same tensor with different parameters (shape,
    dtype, op, root rank...), or an op that cannot run while a rank has
    joined. It fails on every rank; the job itself is healthy.
    `field` names the field; `values` maps each rank to its value."""

    @property
    def values(self):
        return {call.rank: call.value for call in self.calls}


class DivergenceError(HvdliteInternalError):
    """The ranks waited on different collectives (a rank took another branch,
    skipped a step, or blocks on its collectives in another order) while
    every one was blocked, so none could ever complete. `calls` says what
    each rank waited on and where."""


class PeerLostError(HvdliteInternalError):
    """A peer is gone: its process exited or its host stopped answering.
    `ranks` are the lost ranks, `hosts` their hosts; `lost_hosts` the hosts
    that stopped answering (what the elastic driver excludes)."""


class StallTimeoutError(HvdliteInternalError):
    """A collective waited longer than HVDLITE_STALL_SHUTDOWN_TIME_SECONDS
    for ranks that never submitted it (`missing_ranks`), or for a peer frozen
    inside a transfer."""


class ShutdownError(HvdliteInternalError):
    """hvdlite was shut down (some rank called shutdown() or exited) before
    the collective completed: `ranks` asked to shut down; `missing_ranks`
    never submitted this tensor."""


class UnsupportedOperationError(ValueError, NotImplementedError):
    """A collective with arguments hvdlite (like Horovod) does not support,
    such as op=Adasum for anything but allreduce. hvdlite's API errors are
    ValueErrors, Horovod raises a RuntimeError here: this is both, so either
    `except` clause of a script catches it."""


class WrongModeError(ValueError, RuntimeError):
    """A call made where it cannot work, such as TF1's
    broadcast_global_variables() under eager execution (Horovod: RuntimeError;
    hvdlite's API errors: ValueError; this is both)."""


class CollectiveOutsideRunError(RuntimeError):
    """A worker that joined a running elastic job submitted, before entering
    hvd.elastic.run, a collective whose result it cannot compute alone
    (Note [Late joiners] in hvdlite/common/late_joiners.py). The core refuses
    it with its own kind, which every binding raises as this type. Not an
    HvdliteInternalError: nothing retries it."""


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts were added or removed; elastic training re-forms the job.

    Args:
        skip_sync (bool): True when hosts were only removed: the surviving ranks then
            skip the sync after the reset, unless the state sets `sync_after_removal`.
    """

    def __init__(self, skip_sync=False):
        super().__init__("the set of hosts of this job changed")
        self.skip_sync = skip_sync


# Horovod's names, so code written for Horovod catches the same errors.
HorovodInternalError = HvdliteInternalError

__all__ = ["HvdliteInternalError", "HorovodInternalError", "HostsUpdatedInterrupt",
           "CollectiveMismatchError", "DivergenceError", "PeerLostError", "StallTimeoutError",
           "ShutdownError", "CollectiveOutsideRunError", "CallSite", "RankCall"]
