"""Which Keras hvdlite.keras serves: Keras 3 (`keras`, on its backend), or Keras 2 (`tf_keras`)
when TF_USE_LEGACY_KERAS is set, the way TensorFlow itself chooses what
`tf.keras` is. Decided once, at import, as TensorFlow does."""
import os


def legacy_keras():
    """True when the environment asks for Keras 2 (TF_USE_LEGACY_KERAS=1/true)."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


def keras_module():
    """The Keras module that model.fit, callbacks and optimizers come from here."""
    if not legacy_keras():
        import keras
        return keras
    try:
        import tf_keras
    except ImportError:
        raise ImportError(
            "TF_USE_LEGACY_KERAS is set, so hvdlite.keras serves Keras 2, but the tf_keras "
            "package is missing; install the one matching your TensorFlow (pip install "
            "'tf-keras~=X.Y.0' for TensorFlow X.Y) or unset TF_USE_LEGACY_KERAS for Keras 3"
        ) from None
    return tf_keras


def is_keras2_optimizer(optimizer):
    """True for tf_keras optimizers, new-style and tf_keras.optimizers.legacy."""
    return type(optimizer).__module__.startswith("tf_keras.") or any(
        c.__module__.startswith("tf_keras.") for c in type(optimizer).__mro__)


def optimizer_variables(optimizer, var_list):
    """The optimizer's variables (slots, iterations...), created first for
    var_list when the optimizer creates them lazily at its first step."""
    if is_keras2_optimizer(optimizer):
        if hasattr(optimizer, "_create_all_weights"):  # tf_keras.optimizers.legacy
            optimizer._create_all_weights(var_list)
            return list(optimizer.variables())
        optimizer.build(var_list)  # new-style tf_keras: a no-op once built
        return list(optimizer.variables)
    if hasattr(optimizer, "replicated_variables"):
        # A sharded optimizer: each rank's rows of its state are its own
        # (Note [Keras shard variables] in sharded_optimizer.py).
        return optimizer.replicated_variables(var_list)
    if not optimizer.built:  # Keras 3 builds it lazily at the first step
        optimizer.build(var_list)
    return list(optimizer.variables)


def backend():
    """Keras' backend: "tensorflow" for Keras 2, else Keras 3's own choice
    (KERAS_BACKEND or ~/.keras/keras.json): "tensorflow", "torch" or "jax"."""
    if legacy_keras():
        return "tensorflow"
    import keras
    return keras.backend.backend()
