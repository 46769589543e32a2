"""Every default that more than one part of hvdlite relies on, each once, by
what it is for: the launchers (hvdliterun, hvdlite.run, RayExecutor,
hvdlite.spark), the elastic driver and the workers read them from here.

Each launcher still lets HVDLITE_*/HOROVOD_* variables and its own
arguments override them, as its documentation says.
"""

# How long hvdliterun waits to reach every host (ssh) and for the ranks to
# find each other: horovodrun's --start-timeout default. Also RayExecutor's
# settings (timeout_s) and what a worker of a launcher-started job falls
# back on when HVDLITE_START_TIMEOUT is missing.
START_TIMEOUT_S = 30.0

# A rank's own start timeout when no launcher set one (mpirun, srun,
# torchrun): csrc/core/config.h's start_timeout_s, which the core uses for
# the same wait, so the Python rendezvous and the core agree.
RANK_START_TIMEOUT_S = 60.0

# hvdlite.spark's start_timeout: every task must start and register within
# it. Spark may have to wait for executors first; horovod.spark's default.
SPARK_START_TIMEOUT_S = 600.0

# How long an elastic job waits for --min-np usable slots before it stops:
# horovodrun's --elastic-timeout, RayExecutor's and run_elastic's too.
ELASTIC_TIMEOUT_S = 600.0

# Seconds between two looks for hosts (the discovery script, Ray's nodes).
DISCOVERY_INTERVAL_S = 1.0

# How often an elastic job re-forms at most before it stops (--reset-limit,
# reset_limit=). horovodrun has no limit by default; hvdlite has one, so
# that a failure that repeats can never keep a job re-forming forever
# (docs/elastic.md).
RESET_LIMIT = 100
