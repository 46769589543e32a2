"""One elastic worker as a Spark task (hvdlite.spark.run_elastic): what runs
on the executors. It registers in the job's store, beats, waits to be
admitted into a round, and runs the user's function with the elastic
environment; the driver's side is elastic.py, which says what the keys
hold."""
import json
import os
import socket
import threading
import time

from hvdlite.common.membership import LeftJob
from hvdlite.runner.elastic.source import worker_environment
from hvdlite.spark import task as task_module
from hvdlite.store import StoreClient

HEARTBEAT_S = 1.0
POLL_S = 0.2


def key(job, kind, worker):
    """{job}/spark/{kind}/{worker}: alive, admitted, done, left."""
    return f"{job}/spark/{kind}/{worker}"


def closed_key(job):
    return f"{job}/spark/closed"


def registrations_key(job):
    return f"{job}/spark/registrations"


def registration_key(job, number):
    return f"{job}/spark/registration/{number}"


def run_worker(spec):
    """The body of one elastic worker's task: register, beat, wait to be
    admitted into a round, run fn with the elastic environment."""
    from pyspark import TaskContext
    context = TaskContext.get()
    worker = f"{context.partitionId()}.{context.attemptNumber()}"
    job = spec.job_id
    with StoreClient(spec.store_addr, spec.store_port, spec.secret,
                     timeout=spec.start_timeout) as store:
        beating = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(spec, worker, beating), daemon=True)
        beat.start()
        try:
            number = store.add(registrations_key(job), 1)
            store.set(registration_key(job, number), json.dumps({
                "worker": worker, "host": socket.gethostname(), "executor": executor_name(),
                "task_attempt": context.taskAttemptId()}))
            first_round = _wait_admitted(store, job, worker)
            if first_round is None:
                return []
            env = task_module.job_environment(spec)
            env.update(worker_environment(worker, first_round, spec.elastic_timeout))
            env.update(spec.env or {})
            with task_module.environment_set(env):
                result, out, err = task_module.call(spec)
            store.set(key(job, "done", worker), "1")
            return [(worker, result, out, err)]
        except LeftJob:  # not part of the newest round (its executor was excluded)
            store.set(key(job, "left", worker), "1")
            return []
        except BaseException as error:
            store.set(task_module.error_key(job, worker), task_module.describe(error))
            raise
        finally:
            beating.set()


def executor_name():
    """host/pid of the executor JVM that runs this task: the nearest
    ancestor of this Python worker named java (pyspark's daemon forks the
    workers; without the daemon the executor starts them itself)."""
    pid = os.getpid()
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/stat") as stat:  # "pid (comm) state ppid ..."
                pid = int(stat.read().rpartition(") ")[2].split()[1])
            with open(f"/proc/{pid}/comm") as comm:
                if comm.read().strip() == "java":
                    return f"{socket.gethostname()}/{pid}"
        except (OSError, ValueError, IndexError):
            break
    return f"{socket.gethostname()}/{os.getppid()}"


def _wait_admitted(store, job, worker):
    """The first round's number (a str), or None when training ended first."""
    while True:
        admitted = store.try_get(key(job, "admitted", worker))
        if admitted is not None:
            return admitted.decode()
        if store.try_get(closed_key(job)) is not None:
            return None
        time.sleep(POLL_S)


def _heartbeat(spec, worker, stop):
    with StoreClient(spec.store_addr, spec.store_port, spec.secret,
                     timeout=spec.start_timeout) as store:
        while not stop.wait(HEARTBEAT_S):
            store.add(key(spec.job_id, "alive", worker), 1)
