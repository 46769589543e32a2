"""The numbers an elastic job runs by, and how each front-end spells them
in messages (hvdliterun's --min-np is RayExecutor's min_workers=)."""
from dataclasses import dataclass, field

from hvdlite.common import defaults

# How hvdliterun spells each setting; RayExecutor and hvdlite.spark pass their own.
FLAGS = {"min_np": "--min-np {}", "max_np": "--max-np {}", "reset_limit": "--reset-limit {}",
         "elastic_timeout": "--elastic-timeout {:g} s", "start_wait": "--elastic-timeout {:g} s"}


@dataclass
class ElasticSettings:
    min_np: int
    max_np: int = None  # None: every usable slot
    # The first round starts as soon as this many slots are usable (or min_np
    # of them, once the source's first_round_settle_s has passed), with every
    # usable slot up to max_np, as Horovod's (None: max_np).
    num_proc: int = None
    min_start_hosts: int = 1  # nor before this many hosts have usable slots
    reset_limit: int = None  # None: defaults.RESET_LIMIT
    elastic_timeout: float = defaults.ELASTIC_TIMEOUT_S  # how long to wait for min_np slots
    start_wait: float = None  # the same for the first round (None: elastic_timeout)
    cooldown_range: tuple = None  # (LOW, HIGH) seconds; None: a failed host stays out
    discovery_interval: float = defaults.DISCOVERY_INTERVAL_S
    verbose: bool = False  # every round's layout at warning level
    spelling: dict = field(default_factory=lambda: dict(FLAGS))

    def __post_init__(self):
        if self.reset_limit is None:
            self.reset_limit = defaults.RESET_LIMIT
        if self.start_wait is None:
            self.start_wait = self.elastic_timeout
        if self.num_proc is None:
            self.num_proc = self.max_np

    def spell(self, name):
        """The setting `name` with its value, as the user gave it: "--min-np 2"."""
        return self.spelling[name].format(getattr(self, name))
