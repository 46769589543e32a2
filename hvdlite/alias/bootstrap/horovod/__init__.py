"""Found first on PYTHONPATH in processes started by `hvdliterun
--horovod-alias` (or by a script run with `python -m hvdlite.alias`): the
first `import horovod` lands here and puts hvdlite, or a real Horovod, in
this package's place (Note [Horovod alias] in hvdlite/alias/__init__.py)."""
import sys

from hvdlite import alias

sys.modules[__name__] = alias.import_for_bootstrap()
