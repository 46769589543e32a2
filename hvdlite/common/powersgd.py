"""What the bindings' PowerSGD compressions share (hvdlite/torch/powersgd.py,
hvdlite/numpy/powersgd.py for JAX and TensorFlow): their settings,
checked once, the optimizer they belong to, the rule that picks the
gradients worth compressing, the ops they support, and the refusal of
Horovod's per-tensor interface. The math and the state are each binding's:
torch runs it on the gradients' device, the others on the host in NumPy."""
import weakref

import numpy as np

from hvdlite.common.ops import ReduceOp

# One seed per batch of new Q's, drawn from numpy's legacy generator (as
# DDP's hook draws them), below this bound.
SEED_BOUND = 1_000_000_000


def refuse_unconfigured(compression):
    """Refuses the PowerSGD class itself passed as compression=: unlike the
    casting compressions it is an object with settings and state.

    Args:
        compression: what the optimizer was given.

    Raises:
        ValueError: when it is a PowerSGD class, not an instance.
    """
    if isinstance(compression, type) and issubclass(compression, PowerSGDBase):
        raise ValueError("compression=hvd.Compression.powersgd needs its settings: pass "
                         "hvd.Compression.powersgd(rank=..., start_iter=...), an instance")


class PowerSGDBase:
    """Settings and shared rules of hvd.Compression.powersgd(...).

    Args:
        rank (int): columns of P and Q (DDP's matrix_approximation_rank); lower sends less.
        start_iter (int): steps of plain allreduce before compressing (DDP's
            start_powerSGD_iter).
        min_compression_rate (float): compress an n x m gradient only if
            n m > rate (n + m) rank.
        error_feedback (bool): add what compression left out to the next step's gradient.
        warm_start (bool): start each step's power iteration from the last step's Q.
        orthogonalization_epsilon (float): added to column norms in Gram-Schmidt.
        seed (int): the seed of the first Q's (the same on every rank, as it must be).

    Raises:
        ValueError: for a rank below 1, a negative start_iter or epsilon.
    """

    # The binding's words for where PowerSGD goes instead of a single collective.
    not_per_tensor = "PowerSGD compresses a whole step's gradients and keeps state between steps"

    def __init__(self, rank=1, start_iter=1000, min_compression_rate=2.0, error_feedback=True,
                 warm_start=True, orthogonalization_epsilon=0.0, seed=0):
        if int(rank) < 1:
            raise ValueError(f"PowerSGD: rank must be >= 1, got {rank}")
        if int(start_iter) < 0:
            raise ValueError(f"PowerSGD: start_iter must be >= 0, got {start_iter}")
        if float(orthogonalization_epsilon) < 0:
            raise ValueError("PowerSGD: orthogonalization_epsilon must be >= 0, got "
                             f"{orthogonalization_epsilon}")
        self.rank = int(rank)
        self.start_iter = int(start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.error_feedback = bool(error_feedback)
        self.warm_start = bool(warm_start)
        self.orthogonalization_epsilon = float(orthogonalization_epsilon)
        self.seed = int(seed)
        self._reset_state()

    def __repr__(self):
        return (f"PowerSGD(rank={self.rank}, start_iter={self.start_iter}, "
                f"min_compression_rate={self.min_compression_rate}, "
                f"error_feedback={self.error_feedback}, warm_start={self.warm_start}, "
                f"orthogonalization_epsilon={self.orthogonalization_epsilon}, seed={self.seed})")

    _owner = None  # bind()'s optimizer, weakly

    def bind(self, owner):
        """Ties this state to one optimizer: two sharing it would mix their
        error memories (keys are parameter names). An optimizer that is gone
        lets it go.

        Args:
            owner: the optimizer, or what stands for it (weakly referenced).

        Raises:
            ValueError: when another optimizer, still alive, took it.
        """
        taken = self._owner() if self._owner is not None else None
        if taken is not None and taken is not owner:
            raise ValueError("this PowerSGD compression already belongs to another "
                             "DistributedOptimizer; create one hvd.Compression.powersgd(...) "
                             "per optimizer")
        self._owner = weakref.ref(owner)

    def _reset_state(self):
        self.iter = 0     # steps reduced so far, warm-up included
        self.errors = {}  # gradient name -> n x m error memory (this rank's)
        self.qs = {}      # gradient name -> m x r, last step's reduced Q (warm start)
        self._seed_draws = 0
        self._seeds = np.random.RandomState(self.seed)

    def _next_seed(self):
        """The seed of the next batch of new Q's, the same on every rank."""
        self._seed_draws += 1
        return int(self._seeds.randint(SEED_BOUND))

    def _restore_seeds(self, draws):
        """The seed generator where it was after `draws` draws (load_state_dict)."""
        for _ in range(int(draws)):
            self._seeds.randint(SEED_BOUND)
        self._seed_draws = int(draws)

    def _load_state(self, state, copy):
        """load_state_dict()'s shared part: the step count, the seed generator,
        and the error memory and Q's through copy(array) -> the binding's array.

        Raises:
            ValueError: when the state's Q's have another rank's columns.
        """
        if state["rank"] != self.rank:
            raise ValueError(f"PowerSGD state of rank {state['rank']} cannot be loaded into "
                             f"PowerSGD(rank={self.rank}): its Q's have {state['rank']} columns")
        self._reset_state()
        self.iter = int(state["iter"])
        self._restore_seeds(state["seed_draws"])
        self.errors = {k: copy(v) for k, v in state["errors"].items()}
        self.qs = {k: copy(v) for k, v in state["qs"].items()}

    def worth_compressing(self, n, m):
        """DDP's rule: an n x m gradient goes as P and Q only if that sends fewer bytes
        by min_compression_rate.

        Args:
            n (int): rows (the gradient's first dimension).
            m (int): columns (the rest).

        Returns:
            bool: True to compress.
        """
        return (n + m) * min(n, m, self.rank) * self.min_compression_rate < n * m

    # --- Horovod's per-tensor interface does not fit: say where it does

    @classmethod
    def compress(cls, tensor):
        """Refused: PowerSGD is not a per-tensor compression.

        Args:
            tensor: any.

        Raises:
            TypeError: always, saying where to pass it instead.
        """
        raise TypeError(cls.not_per_tensor)

    @classmethod
    def decompress(cls, tensor, ctx):
        """Refused, as compress().

        Args:
            tensor: any.
            ctx: any.

        Raises:
            TypeError: always.
        """
        raise TypeError(cls.not_per_tensor)

    @staticmethod
    def check_op(op):
        """Refuses the ops a low-rank approximation cannot stand for.

        Args:
            op (ReduceOp): the optimizer's reduction.

        Raises:
            ValueError: for anything but Average and Sum.
        """
        if op not in (ReduceOp.Average, ReduceOp.Sum):
            raise ValueError(f"PowerSGD compression supports op=hvd.Average and hvd.Sum, got "
                             f"{ReduceOp(op).name}: a low-rank approximation is linear in the "
                             "gradients, and only sums and averages are")
