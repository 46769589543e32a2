"""Which workers form the next round of an elastic job (a pure function of
what the driver knows, so it is tested without processes).

Workers that keep running keep their order, so the rank 0 of the next round
is the lowest-ranked survivor: it holds the last committed state that
State.sync() hands to everyone, new workers included. New workers fill the
free slots of the hosts in the order discovery listed them, up to --max-np.
"""
from dataclasses import dataclass, field


@dataclass
class Plan:
    keep: list = field(default_factory=list)  # running workers, in their new rank order
    leave: list = field(default_factory=list)  # running workers that are not in the round
    start: list = field(default_factory=list)  # (host, slot) of workers to start

    @property
    def size(self):
        return len(self.keep) + len(self.start)


def plan_round(hosts, running, is_excluded, max_np, slot_excluded=None):
    """hosts: {host: slots} from discovery; running: live workers (objects
    with .host and .slot) in their current rank order, then newer ones;
    is_excluded(host) -> bool; slot_excluded(host, slot) -> bool: a slot
    whose late joiner failed (Note [Failure rules] in failures.py) gets no
    new worker while it cools down."""
    usable = {host: slots for host, slots in hosts.items() if not is_excluded(host)}
    plan = Plan()
    taken = set()
    for worker in running:
        fits = worker.slot < usable.get(worker.host, 0) and (worker.host, worker.slot) not in taken
        if fits and (max_np is None or len(plan.keep) < max_np):
            plan.keep.append(worker)
            taken.add((worker.host, worker.slot))
        else:
            plan.leave.append(worker)
    for host, slots in usable.items():
        for slot in range(slots):
            if max_np is not None and plan.size >= max_np:
                return plan
            if (host, slot) not in taken and not (slot_excluded and slot_excluded(host, slot)):
                plan.start.append((host, slot))
    return plan
