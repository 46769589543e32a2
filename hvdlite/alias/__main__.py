"""python -m hvdlite.alias [--force] (script.py | -m module) [args ...]

Runs a script written for Horovod unchanged: `import horovod.torch as hvd`
and the other horovod imports resolve to hvdlite (unless a real Horovod is
installed; --force or HVDLITE_HOROVOD_ALIAS=force: even then). Processes
the script starts resolve them the same way. Works under any launcher:
`hvdliterun -np 2 python -m hvdlite.alias train.py`, mpirun, srun, torchrun.
"""
import os
import runpy
import sys

from hvdlite import alias

USAGE = "usage: python -m hvdlite.alias [--force] (script.py | -m module) [args ...]"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    force = argv[:1] == ["--force"]
    if force:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(__doc__ if argv[:1] in (["-h"], ["--help"]) else USAGE,
              file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    mode = "force" if force or alias.mode_from_environment() == "force" else "on"
    os.environ.update(alias.child_environment(mode))
    alias.install(mode)
    # sys.path[0] is the working directory, as `python -m` set it; a
    # script gets its own directory there instead, as `python script.py` does.
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
