"""Process sets: collectives restricted to a subset of the ranks."""
from hvdlite.common import basics, requests


class ProcessSet:
    """A subset of ranks with its own negotiation and communicator.

    Create it before ``init(process_sets=[...])`` or pass it to
    ``add_process_set`` (a collective call on every rank) afterwards.

    Args:
        ranks (Iterable[int] | None): the global ranks of the set, in any order;
            None is the global set (every rank).

    Raises:
        ValueError: when `ranks` repeats a rank.
    """

    def __init__(self, ranks):
        if ranks is None:
            self.ranks = None  # the global set: every rank, resolved at init
        else:
            ranks = sorted(int(r) for r in ranks)
            if len(set(ranks)) != len(ranks):
                raise ValueError(f"process set ranks {ranks} contain duplicates")
            self.ranks = ranks
        self.process_set_id = None

    def _require_id(self):
        if self.process_set_id is None:
            raise ValueError(f"{self!r} is not registered: pass it to hvdlite.init(process_sets=[...]) "
                             "or hvdlite.add_process_set()")
        return self.process_set_id

    def _resolved_ranks(self):
        if self.ranks is None:
            return list(range(basics.size()))
        return self.ranks

    def size(self):
        """The number of ranks in the set.

        Returns:
            int: the set's size (the job's size for the global set).

        Raises:
            ValueError: when the set is not registered (given to `init(process_sets=...)` or
                `add_process_set()`).
        """
        self._require_id()
        return len(self._resolved_ranks())

    def rank(self):
        """This process's rank within the set.

        Returns:
            int: its index among the set's sorted ranks, or -1 if it is not a member.

        Raises:
            ValueError: when the set is not registered.
        """
        self._require_id()
        ranks = self._resolved_ranks()
        me = basics.rank()
        return ranks.index(me) if me in ranks else -1

    def included(self):
        """Whether this process is a member of the set.

        Returns:
            bool: True when `rank()` is not -1.

        Raises:
            ValueError: when the set is not registered.
        """
        return self.rank() >= 0

    def __repr__(self):
        who = "all ranks" if self.ranks is None else f"ranks={self.ranks}"
        return f"ProcessSet(process_set_id={self.process_set_id}, {who})"


global_process_set = ProcessSet(None)
global_process_set.process_set_id = 0


def _initial_sets(process_sets):
    """The sets given to init(), as ProcessSet objects."""
    return [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets or []]


def _number_initial_sets(sets):
    """Assigns ids 1..k to the sets given to init() (the core created them in this order)."""
    for index, ps in enumerate(sets):
        ps.process_set_id = index + 1


def add_process_set(process_set):
    """Adds a process set on every rank (collective: all ranks must call it with the same ranks).

    Args:
        process_set (ProcessSet | Iterable[int]): the set, or its global ranks.

    Returns:
        ProcessSet: the registered set (a new one when ranks were given).

    Raises:
        ValueError: when the set is already registered.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set!r} is already registered")
    process_set.process_set_id = requests.add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Removes a process set on every rank (collective).

    Args:
        process_set (ProcessSet): a registered set other than the global one.

    Returns:
        bool: True when removed.

    Raises:
        ValueError: for the global set or a set that is not registered.
    """
    if process_set.process_set_id in (None, 0):
        raise ValueError("only a registered, non-global process set can be removed")
    requests.remove_process_set(process_set.process_set_id)
    process_set.process_set_id = None
    return True
