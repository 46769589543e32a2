"""horovod.runner.elastic.constants (Note [Horovod runner adapters])."""

# What _run_elastic raises (RuntimeError) when the job stopped at --reset-limit.
RESET_LIMIT_EXCEEDED_MESSAGE = ("Horovod was shutdown because number of resets during elastic "
                                "job exceeded limit: {}")
