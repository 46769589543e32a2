"""horovod.runner.util (Note [Horovod runner adapters] in hvdlite/alias/runner/__init__.py)."""
