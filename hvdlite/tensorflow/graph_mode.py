"""TF1-style graph mode (tf.compat.v1 sessions): broadcasting every global
variable, and the session hook that does it when a MonitoredSession starts."""
import tensorflow as tf

from hvdlite.common.exceptions import WrongModeError
from hvdlite.common.process_sets import global_process_set
from hvdlite.tensorflow import collectives
from hvdlite.tensorflow.collectives import do_not_convert


@do_not_convert
def broadcast_global_variables(root_rank, process_set=global_process_set):
    """An op assigning root_rank's value to every global variable of the graph.

    TensorFlow 2 code has no global variables: use broadcast_variables(model.variables, ...).

    Args:
        root_rank (int): the rank whose values every rank gets.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        tf.Operation: the op that assigns them, for a tf.compat.v1 session to run.

    Raises:
        WrongModeError: when executing eagerly (tf.compat.v1 graph mode only).
    """
    if tf.executing_eagerly():
        raise WrongModeError("broadcast_global_variables() works in tf.compat.v1 graph mode only; in "
                         "TensorFlow 2 call hvd.broadcast_variables(model.variables, root_rank)")
    assigns = []
    for variable in tf.compat.v1.global_variables():
        name = f"broadcast_global_variables.{collectives._normalize(variable.name)}"
        assigns.append(variable.assign(collectives.broadcast(variable, root_rank, name=name,
                                                     process_set=process_set)))
    return tf.group(*assigns)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts root_rank's global variables once the session is created, so
    that every rank of a MonitoredTrainingSession starts identical.

    Args:
        root_rank (int): the rank whose variables every rank gets.
        device (str): accepted for Horovod compatibility.
        process_set (ProcessSet): the ranks that take part (default: all).

    Example:
        ```python
        hooks = [hvd.BroadcastGlobalVariablesHook(0)]
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as session:
            ...
        ```
    """

    def __init__(self, root_rank, device="", process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.process_set = process_set
        self.bcast_op = None

    def begin(self):
        """Builds the broadcast op in the session's graph (once per graph)."""
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank, self.process_set)

    def after_create_session(self, session, coord):
        """Runs the broadcast, so every rank starts from root's variables.

        Args:
            session (tf.compat.v1.Session): the session just created.
            coord (tf.train.Coordinator): unused.
        """
        session.run(self.bcast_op)
