"""horovod.runner under the Horovod alias (Note [Horovod alias] in
hvdlite/alias/__init__.py): what scripts and Horovod's own elastic tests
call of Horovod's launcher, as thin adapters onto hvdliterun.

Note [Horovod runner adapters]
Every other `horovod.X` is hvdlite.X itself, but hvdlite.runner is not
Horovod's runner: its modules are named for what they do here (arguments.py,
elastic/launch.py), and Horovod's tests patch module attributes that hvdlite
has no use for. So `horovod.runner` is this package, which holds only the
names Horovod's users and tests reach for, under Horovod's module names:

    horovod.runner.run, RankFailedError      hvdlite.run (function.py)
    horovod.runner.launch.parse_args         hvdliterun's parser (it takes horovodrun's flags)
    horovod.runner.launch._run_elastic       an elastic job on hvdliterun's driver; errors
                                             raised as Horovod raises them (RuntimeError)
    horovod.runner.elastic.driver            DISCOVER_HOSTS_FREQUENCY_SECS, ELASTIC_TIMEOUT_SECS:
                                             read when _run_elastic starts, so a test's
                                             mock.patch of them takes effect
    horovod.runner.elastic.constants         RESET_LIMIT_EXCEEDED_MESSAGE
    horovod.runner.gloo_run                  _get_min_start_hosts (patched by those tests too)
    horovod.runner.common.util.config_parser set_env_from_args
    horovod.runner.util.threads              in_thread

Anything else under horovod.runner fails to import with a message that says
the alias has no such module.
"""
from typing import TYPE_CHECKING

__all__ = ["run", "RankFailedError"]

if TYPE_CHECKING:
    from hvdlite.runner.function import RankFailedError, run


def __getattr__(name):
    # As hvdlite.runner: loaded on first use.
    if name in __all__:
        from hvdlite.runner import function
        return getattr(function, name)
    raise AttributeError(f"module 'horovod.runner' (hvdlite's adapter) has no attribute {name!r}")
