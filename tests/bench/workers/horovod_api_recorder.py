"""Horovod's torch API for bench/'s "horovod" backend where Horovod is not
installed (BENCH_HOROVOD_MODULE=horovod_api_recorder): every name is
hvdlite.torch's, and each function the bench calls is recorded and printed at
exit, so the test can say and check what the backend really ran."""
import atexit

import hvdlite.torch as _implementation

_called = set()


def _recorded(name, function):
    def call(*args, **kwargs):
        _called.add(name)
        return function(*args, **kwargs)
    return call


def __getattr__(name):  # PEP 562: every Horovod name this module is asked for
    value = getattr(_implementation, name)
    if callable(value) and not isinstance(value, type):
        return _recorded(name, value)
    return value


@atexit.register
def _report():
    print(f"horovod API over {_implementation.__name__}: called {','.join(sorted(_called))}",
          flush=True)
