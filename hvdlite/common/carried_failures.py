"""The hvdlite failure behind an error a framework raised (Note [Failures by
message] in csrc/api/session.h). Apart from hvdlite.common.exceptions, which
the core itself imports to raise, so that module imports nothing of hvdlite."""
from hvdlite.common import basics
from hvdlite.common.exceptions import HvdliteInternalError


def carried_failure(error):
    """The hvdlite failure behind an error a framework raised: TensorFlow's
    tf.errors from a graph, Keras' fit() or a numpy_function, XLA's runtime
    error from a jitted step. Such an error keeps only the core's words; the
    core remembers each failure it delivered (kind, message, fields), and
    this gives back the one whose message the error's text contains, as
    hvdlite's type with its fields. Nothing is parsed from the text.

    Args:
        error (BaseException): what the framework raised.

    Returns:
        HvdliteInternalError | None: `error` itself when it is one already; the
            failure it carries; None for an error that did not come from an hvdlite
            collective (or whose failure is older than the last 256).
    """
    if isinstance(error, HvdliteInternalError):
        return error
    failure = basics.core().exception_for(str(error))
    return failure if isinstance(failure, HvdliteInternalError) else None
