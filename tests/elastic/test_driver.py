"""The elastic driver (hvdlite/runner/elastic/driver.py, failures.py) on a
worker source of its own: workers that are records, ended by the test or
by a rule of the source, in a real store. The rules of Note [Failure
rules], the reset limit and its default, without starting a process."""
import logging
import queue

import pytest

from hvdlite.common import defaults
from hvdlite.runner.elastic import driver as driver_module
from hvdlite.runner.elastic.driver import ElasticDriver
from hvdlite.runner.elastic.failures import FailureRules
from hvdlite.runner.elastic.settings import ElasticSettings
from hvdlite.runner.elastic.source import Ending, Worker, WorkerSource
from hvdlite.store import StoreClient, StoreServer
from hvdlite.store.rounds import failure_key, latest_key, reset_key


pytestmark = pytest.mark.timeout(60)


class FakeSource(WorkerSource):
    """Hosts with slots; once a round has been published, each running
    worker ends as `plan(worker, newest round)` says:
    None (it goes on), or the Ending it ends with. When one fails, the
    others ask for a new round, as real survivors do when their collectives
    fail."""

    def __init__(self, store, job_id, hosts, plan=lambda worker, round_: None):
        self.hosts = hosts
        self._store, self._job_id, self._plan = store, job_id, plan
        self._events = queue.SimpleQueue()
        self._workers = []

    def find_hosts(self):
        return dict(self.hosts)

    def start(self, host, slot, first_round):
        worker = Worker(f"{host}/{slot}/{len(self._workers)}", len(self._workers), host, slot,
                        host)
        self._workers.append(worker)
        return worker

    def end(self, worker, ending):
        worker.ending = ending
        self._events.put(("exit", worker))
        if not ending.ok:
            latest = int(self._store.get(latest_key(self._job_id)))
            for other in self._workers:
                if other.alive():
                    self._store.set(failure_key(self._job_id, latest, other.id), "")
            self._store.add(reset_key(self._job_id, latest), 1)

    def workers(self):
        return self._workers

    def next_event(self, timeout):
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            pass
        latest = self._store.try_get(latest_key(self._job_id))
        for worker in self._workers:
            ending = self._plan(worker, int(latest)) if worker.alive() and latest else None
            if ending is not None:
                self.end(worker, ending)
        return None

    def stop(self, workers, signum=None):
        for worker in workers:
            if worker.alive():
                self.end(worker, Ending(True, "was stopped"))

    def kill_all(self):
        self.stop(self._workers)


@pytest.fixture
def store():
    with StoreServer("secret") as server, StoreClient("127.0.0.1", server.port, "secret") as c:
        yield c


def run_driver(store, source, messages, **settings):
    settings.setdefault("discovery_interval", 0.05)
    report = lambda text, level=logging.WARNING: messages.append(text)  # noqa: E731
    return ElasticDriver(ElasticSettings(**settings), source, store, "job", report).run()


FAIL = Ending(False, "exited with code 3", exit_code=3)


def test_a_host_whose_workers_always_fail_is_excluded_and_the_others_finish(store):
    # Without a cooldown range, b is excluded for good after its first failure.
    def plan(worker, round_):
        if worker.host == "b":
            return FAIL
        return Ending(True, "exited with code 0") if round_ > 0 else None
    messages = []
    source = FakeSource(store, "job", {"a": 2, "b": 1}, plan)
    outcome = run_driver(store, source, messages, min_np=2)
    assert outcome.exit_code == 0 and outcome.stop_reason is None, messages
    assert "excluding host b from the job: worker 2 failed there" in messages, messages
    assert [w.host for w in outcome.final] == ["a", "a"]
    assert len([w for w in source.workers() if w.host == "b"]) == 1  # never started again


def test_a_failure_that_repeats_on_a_returning_host_stops_at_the_reset_limit(store):
    # With a cooldown, b comes back and fails again, and again: the reset
    # limit is what ends that, instead of re-forming forever.
    messages = []
    source = FakeSource(store, "job", {"a": 1, "b": 1},
                        lambda worker, round_: FAIL if worker.host == "b" else None)
    outcome = run_driver(store, source, messages, min_np=1, cooldown_range=(0.01, 0.01),
                         reset_limit=4)
    assert outcome.exit_code == driver_module.STOPPED_EXIT_CODE, messages
    assert "already been reset 4 time(s), the limit (--reset-limit 4)" in outcome.stop_reason
    assert len([m for m in messages if m.startswith("re-forming")]) == 4, messages
    assert any("the cooldown of excluded host(s) b ended" in m for m in messages), messages


def test_the_reset_limit_has_a_finite_default():
    assert ElasticSettings(min_np=1).reset_limit == defaults.RESET_LIMIT == 100
    from hvdlite.runner.arguments import parse_args
    from hvdlite.runner.elastic.launch import settings
    assert settings(parse_args(["--min-np", "2", "true"])).reset_limit == 100


def test_every_worker_of_a_round_failing_stops_at_once_with_the_first_failure(store):
    messages = []
    source = FakeSource(store, "job", {"a": 1, "b": 1, "c": 1},
                        lambda worker, round_: Ending(False, "exited", exit_code=5 + worker.name))
    outcome = run_driver(store, source, messages, min_np=1)
    assert outcome.exit_code == 5 and outcome.failure.name == 0, messages
    assert outcome.stop_reason.startswith("every worker of round 0 failed"), messages
    assert not [m for m in messages if m.startswith("excluding")], messages


def test_first_round_waits_for_min_np_slots_then_says_what_it_found(store):
    messages = []
    source = FakeSource(store, "job", {"a": 1})
    outcome = run_driver(store, source, messages, min_np=2, elastic_timeout=0.2)
    assert not outcome.formed and outcome.exit_code == 1
    assert outcome.stop_reason == ("discovery found 1 slot(s) (a:1), fewer than --min-np 2, "
                                   "within --elastic-timeout 0.2 s; not starting")


# --- the rules alone (failures.py) -------------------------------------------


class Named(WorkerSource):
    host_kind = "Ray node"
    find_hosts = start = workers = next_event = stop = kill_all = None

    def host_name(self, host):
        return host.upper()


def failed(name, host):
    worker = Worker(str(name), name, host, 0, host)
    worker.ending = Ending(False, f"raised: E{name}", exit_code=name)
    return worker


def test_rules_exclude_each_failed_host_once_and_go_on_while_a_host_is_left():
    messages = []
    rules = FailureRules(None, Named(), lambda text, level: messages.append(text))
    w1, w2, w3 = failed(1, "a"), failed(2, "a"), failed(3, "b")
    rules.record(w1)
    rules.record(w2)
    assert rules.judge([w1, w2, Worker("4", 4, "c", 0, "c"), w3], 0) is None
    assert messages == ["excluding Ray node A from the job: workers 1, 2 failed there"]
    assert rules.exclusions.is_excluded("a") and not rules.exclusions.is_excluded("b")
    assert not rules.pending()


def test_rules_stop_when_every_host_of_the_round_failed():
    rules = FailureRules((5, 10), Named(), lambda text, level: None)
    survivor, w2 = Worker("1", 1, "a", 1, "a"), failed(2, "a")
    rules.record(w2)
    verdict = rules.judge([survivor, w2], 3)
    assert verdict.worker is w2
    assert verdict.message.startswith("every Ray node of round 3 (A) has had a failed worker "
                                      "and is excluded")
    assert verdict.message.endswith("worker 2 (host a), which raised: E2")


def test_rules_count_failures_of_earlier_judgements_when_the_whole_round_failed():
    rules = FailureRules(None, Named(), lambda text, level: None)
    w1, w2 = failed(1, "a"), failed(2, "b")
    rules.record(w1)
    assert rules.judge([w1, w2, Worker("3", 3, "c", 0, "c")], 0) is None
    # The round re-formed without w1; its other workers failed later.
    w3 = failed(3, "c")
    rules.record(w2)
    rules.record(w3)
    assert rules.judge([w2, w3], 1).worker is w2



def test_first_round_takes_every_usable_slot_up_to_max_np(store):
    # Horovod's first round: not -np (num_proc) and then a re-form to grow.
    messages = []
    source = FakeSource(store, "job", {"a": 2, "b": 3},
                        lambda worker, round_: Ending(True, "exited with code 0"))
    outcome = run_driver(store, source, messages, min_np=2, num_proc=2, max_np=4,
                         reset_limit=0)
    assert outcome.exit_code == 0, messages
    assert [(w.host, w.slot) for w in outcome.final] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert not [m for m in messages if m.startswith("re-forming")], messages


def test_first_round_waits_for_min_start_hosts(store):
    # Horovod's gloo_run._get_min_start_hosts, which its elastic tests patch.
    messages = []
    source = FakeSource(store, "job", {"a": 4})
    outcome = run_driver(store, source, messages, min_np=2, min_start_hosts=2,
                         elastic_timeout=0.2)
    assert not outcome.formed and outcome.exit_code == 1
    assert "fewer than --min-np 2 on at least 2 hosts" in outcome.stop_reason, outcome


def test_training_over_is_said_in_the_store(store):
    # Note [Training over]: workers waiting for a round read it and leave.
    from hvdlite.store.rounds import training_over_key
    messages = []
    source = FakeSource(store, "job", {"a": 1},
                        lambda worker, round_: Ending(True, "exited with code 0"))
    assert run_driver(store, source, messages, min_np=1).exit_code == 0
    assert store.try_get(training_over_key("job")) == b"worker 0 finished training"
