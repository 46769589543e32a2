"""The environment handed to the core: HVDLITE_*/HOROVOD_* variables as set by
hvdliterun (or by the user)."""


def core_environment(environ):
    """Returns the variables the core reads, as a plain dict of strings."""
    return {key: value for key, value in environ.items()
            if key.startswith("HVDLITE_") or key.startswith("HOROVOD_")}
