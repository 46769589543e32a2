"""horovod.runner.common.util.config_parser (Note [Horovod runner adapters])."""
from hvdlite.runner.environment import tuning_environment


def set_env_from_args(env, args):
    """Adds to the dict `env` the variables that the tuning flags of `args`
    (from horovod.runner.launch.parse_args) set in every rank."""
    env.update(tuning_environment(args))
    return env
