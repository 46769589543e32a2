"""`import horovod...` resolved to hvdlite, so that a script written for
Horovod runs unchanged: `hvdliterun --horovod-alias ...` in every rank, or
`python -m hvdlite.alias train.py` in one process.

Note [Horovod alias]
A meta-path finder, first on sys.meta_path, answers for `horovod` and every
`horovod.X` with the module object of `hvdlite.X` itself (not a copy), so
`horovod.torch is hvdlite.torch` and Horovod's exception classes are
hvdlite's. horovod.tensorflow.keras and horovod.keras are hvdlite.keras
(hvdlite.tensorflow.keras only re-exports it; its submodules would load a
second time under that name). horovod.runner is hvdlite.alias.runner: thin
adapters of Horovod's launcher API (Note [Horovod runner adapters]).

The finder has to be in place before the script's first `import horovod`,
whatever the command is (python, a shell wrapper, python -m, a tool that
starts Python again). So the launcher puts bootstrap/ first on PYTHONPATH:
it holds a `horovod` package whose __init__ installs the finder and hands
back hvdlite in its own place; nothing runs until something imports horovod.
`python -m hvdlite.alias` installs the finder directly and passes the same
PYTHONPATH on to the processes the script starts.

A real Horovod, when one is installed, wins unless the mode is "force"; the
bootstrap package then loads it in its own place.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

from hvdlite.common import config

__all__ = ["VARIABLE", "MODES", "BOOTSTRAP_DIR", "HorovodAliasFinder", "mode_from_environment",
           "target_name", "installed_horovod", "install", "child_environment"]

VARIABLE = config.declared("HVDLITE_HOROVOD_ALIAS").name
MODES = ("on", "force")
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap")
# Longest prefix first. horovod.runner is Horovod's launcher API, adapted
# onto hvdliterun (Note [Horovod runner adapters] in runner/__init__.py).
_PREFIXES = (("horovod.tensorflow.keras", "hvdlite.keras"),
             ("horovod.keras", "hvdlite.keras"),
             ("horovod.runner", "hvdlite.alias.runner"),
             ("horovod", "hvdlite"))

_announced = False


def mode_from_environment(environ=os.environ):
    """"on", "force" or None (off) from HVDLITE_HOROVOD_ALIAS."""
    return config.get(VARIABLE, environ)


def target_name(fullname):
    """The hvdlite module `fullname` (horovod or horovod.X) stands for, else None."""
    for alias, target in _PREFIXES:
        if fullname == alias or fullname.startswith(alias + "."):
            return target + fullname[len(alias):]
    return None


class HorovodAliasFinder(importlib.abc.MetaPathFinder):
    """Finds horovod and horovod.X as hvdlite's modules (Note [Horovod alias])."""

    def find_spec(self, fullname, path=None, target=None):
        name = target_name(fullname)
        if name is None:
            return None
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: horovod imports resolve to hvdlite here "
                f"({VARIABLE} / --horovod-alias), which has no {name}", name=fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(name))


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self._target = target
        self._target_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self._target)
        self._target_spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import system stamped the alias's spec on the module it got
        # from create_module; it stays hvdlite's module.
        module.__spec__ = self._target_spec


def installed_horovod():
    """The spec of a real Horovod this process would import without the
    alias (the bootstrap package does not count), or None."""
    search_path = [entry for entry in sys.path
                   if os.path.abspath(entry or os.curdir) != BOOTSTRAP_DIR]
    for finder in sys.meta_path:
        if isinstance(finder, HorovodAliasFinder) or not hasattr(finder, "find_spec"):
            continue
        is_path_finder = finder is importlib.machinery.PathFinder
        spec = finder.find_spec("horovod", search_path if is_path_finder else None)
        if spec is not None:
            return spec
    return None


def install(mode):
    """Makes horovod imports resolve to hvdlite in this process, unless a
    real Horovod is installed and mode is not "force". Says which on stderr
    (once, on rank 0). Returns True when they resolve to hvdlite."""
    if mode not in MODES:
        raise ValueError(f"horovod alias mode {mode!r}: use one of {', '.join(MODES)}")
    real = None if mode == "force" else installed_horovod()
    if real is not None:
        where = os.path.dirname(real.origin) if real.origin else ", ".join(
            real.submodule_search_locations or [])
        _announce(f"a real Horovod is installed at {where}; using it; pass "
                  f"--horovod-alias=force ({VARIABLE}=force) to use hvdlite")
        return False
    if not any(isinstance(finder, HorovodAliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, HorovodAliasFinder())
    from hvdlite.version import __version__
    _announce(f"horovod imports resolve to hvdlite {__version__} (horovod.torch is "
              f"hvdlite.torch, horovod.tensorflow.keras is hvdlite.keras, ...)")
    return True


def child_environment(mode, environ=os.environ):
    """HVDLITE_HOROVOD_ALIAS and PYTHONPATH for processes that should resolve
    horovod imports the same way (the bootstrap package first on their path)."""
    path = [BOOTSTRAP_DIR] + [entry for entry in environ.get("PYTHONPATH", "").split(os.pathsep)
                              if entry and entry != BOOTSTRAP_DIR]
    return {VARIABLE: mode, "PYTHONPATH": os.pathsep.join(path)}


def import_for_bootstrap():
    """What `import horovod` gives when the bootstrap package is found first:
    hvdlite, or the real Horovod (loaded here in its own place), or the usual
    ModuleNotFoundError when the alias is off and there is none."""
    mode = mode_from_environment()
    if mode is not None and install(mode):
        return importlib.import_module("hvdlite")
    real = installed_horovod()
    if real is None:
        raise ModuleNotFoundError("No module named 'horovod'", name="horovod")
    module = importlib.util.module_from_spec(real)
    sys.modules["horovod"] = module
    real.loader.exec_module(module)
    return module


def _announce(message):
    global _announced
    if _announced or not _is_first_rank(os.environ):
        return
    _announced = True
    from hvdlite.common import logs  # only now: this module loads at interpreter start
    logs.get("alias").warning(message)


def _is_first_rank(environ):
    found = config.lookup("HVDLITE_RANK", environ)
    if found is not None:
        return found[1] == "0"
    from hvdlite.common import environment
    job = environment.detect_foreign_job(environ)
    if job is not None:
        return config.get("HVDLITE_RANK", job.layout) == 0
    # An elastic worker before its first round: its id ends with its number.
    worker = config.get("HVDLITE_ELASTIC_WORKER_ID", environ)
    if worker:
        return worker.rsplit("/", 1)[-1] == "0"
    return True  # one process
