"""The launcher's own signals (Ctrl-C, SIGTERM, SIGHUP) turned into events
for whatever watches the job."""
import contextlib
import signal
import threading

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def forwarded_signals(events):
    """Turns SIGINT/SIGTERM/SIGHUP into ("signal", signum) events while the
    job runs. SimpleQueue.put is safe to call from a signal handler."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    handler = lambda signum, frame: events.put(("signal", signum))  # noqa: E731
    previous = {signum: signal.signal(signum, handler) for signum in FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
