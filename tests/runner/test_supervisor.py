"""The launcher's supervisor on made-up exit events: which failure it reports
when several ranks end together (Note [One failure rule] in
hvdlite/runner/failure_rule.py), and that it still reports the first one when
they do not."""
import queue
import signal
import threading
import time
from types import SimpleNamespace

from hvdlite.runner.processes import Rank
from hvdlite.runner.failure_rule import FAILURE_SETTLE_S
from hvdlite.runner.supervisor import Supervisor


class _Output:
    def join_stderr(self, timeout):
        pass

    def wrote_stderr(self):
        return True


def _rank(number, returncode):
    return Rank(number, "vm", SimpleNamespace(pid=1000 + number, returncode=returncode), _Output())


class _Job:
    def __init__(self, ranks):
        self.ranks = ranks
        self.signals = []

    def running(self):
        return []

    def signal(self, signum):
        self.signals.append(signum)

    def kill(self):
        pass


class _Console:
    def __init__(self):
        self.messages = []

    def message(self, text, level=None):
        self.messages.append(text)


def _supervise(exits, gap_s):
    """Runs a Supervisor over `exits` ((rank, code) in arrival order, `gap_s` apart)."""
    ranks = {number: _rank(number, code) for number, code in exits}
    events, console = queue.Queue(), _Console()

    def feed():
        for number, _ in exits:
            events.put(("exit", ranks[number]))
            time.sleep(gap_s)

    feeder = threading.Thread(target=feed)
    feeder.start()
    code = Supervisor(_Job(list(ranks.values())), console, events).run()
    feeder.join()
    return code, console.messages


def test_a_crashed_rank_is_reported_though_a_peer_that_lost_it_exited_first():
    code, messages = _supervise([(1, 17), (2, -signal.SIGKILL), (0, 17)], gap_s=0.01)
    assert code == 128 + signal.SIGKILL, (code, messages)
    assert len(messages) == 1 and messages[0].startswith("rank 2 (host vm, pid 1002) was killed "
                                                          "by signal 9 (SIGKILL)"), messages


def test_exits_far_apart_report_the_first_failure():
    code, messages = _supervise([(1, 17), (2, -signal.SIGKILL), (0, 0)],
                                gap_s=FAILURE_SETTLE_S + 0.3)
    assert code == 17, (code, messages)
    assert messages[0].startswith("rank 1 (host vm, pid 1001) exited with code 17"), messages


def test_a_clean_job_exits_zero_and_says_nothing():
    assert _supervise([(0, 0), (1, 0)], gap_s=0.0) == (0, [])
