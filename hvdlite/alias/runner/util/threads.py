"""horovod.runner.util.threads (Note [Horovod runner adapters])."""
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts `target(*args)` on a new thread and returns the thread; with
    silent=True an exception it raises is dropped."""
    if not isinstance(args, tuple):
        raise ValueError(f"args must be a tuple, not {type(args).__name__}; for a single "
                         f"argument use (arg,)")
    function = target
    if silent:
        def function(*call_args):
            try:
                target(*call_args)
            except Exception:  # noqa: BLE001 - that is what silent asks for
                pass
    thread = threading.Thread(target=function, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
