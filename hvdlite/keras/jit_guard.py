"""Keeps Keras from compiling a model that uses hvdlite's ops with XLA
(TensorFlow backend) or torch.compile (torch backend).

On TensorFlow, hvdlite's collectives are custom ops with CPU kernels only; XLA
cannot compile them, so a train step with `jit_compile=True` would fail at its
first call. Keras resolves `jit_compile="auto"` to True on machines with a GPU
(on CPU-only machines it is already False). Once hvdlite.keras is imported, a
model whose optimizer is a hvdlite DistributedOptimizer trains without XLA
instead: the rest of the step still runs on the GPU through TensorFlow's
regular kernels, and only the collectives run on the host. On torch,
jit_compile=True means torch.compile, which hvdlite does not test; the step
runs eagerly. The JAX backend keeps its jitted step: the collectives run in it
as host callbacks (hvdlite/jax/collectives.py).
"""
import warnings

from hvdlite.keras import flavour

_installed = False


def is_distributed(optimizer):
    """True for a hvdlite optimizer whose step must not be compiled."""
    return getattr(optimizer, "_hvdlite_distributed", False) and flavour.backend() != "jax"


def _warn(model):
    if not getattr(model, "_hvdlite_warned_jit", False):
        what = "XLA cannot compile" if flavour.backend() == "tensorflow" else \
            "torch.compile is untested with"
        warnings.warn(f"hvdlite: {what} hvdlite's collective ops; this model trains with "
                      "jit_compile=False", stacklevel=4)
        model._hvdlite_warned_jit = True


def recheck(model):
    """For a model compiled before its optimizer became distributed (load_model)."""
    if model.jit_compile and is_distributed(getattr(model, "optimizer", None)):
        _warn(model)
        model.jit_compile = False


def install():
    """Wraps Keras' `Trainer.jit_compile` setter once per process."""
    global _installed
    if _installed:
        return
    from keras.src.trainers.trainer import Trainer
    original = Trainer.jit_compile

    def set_jit_compile(model, value):
        if value and is_distributed(getattr(model, "optimizer", None)):
            _warn(model)
            value = False
        original.fset(model, value)

    Trainer.jit_compile = property(original.fget, set_jit_compile, original.fdel, original.__doc__)
    _installed = True
