"""Elastic jobs: the driver keeps a job running at between min_np and
max_np workers while hosts come and go and workers fail, for every way
workers start (hvdliterun's processes, RayExecutor's actors, Spark tasks).

    source.py          the worker-source interface the driver runs on
    driver.py          the driver: rounds, discovery, re-forms, limits, the job's end
    failures.py        what a failure excludes and when the job stops (Note [Failure rules])
    planner.py         which workers form the next round
    exclusion.py       hosts left out after failures, for a cooldown or for good
    settings.py        the numbers a job runs by, and how each front-end spells them
    discovery.py       which hosts (and slots) exist now: a script or a fixed list
    process_source.py  hvdliterun's workers: processes here or over ssh
    launch.py          `hvdliterun --min-np ...`: the job's set-up, then the driver

hvdlite/ray/elastic.py and hvdlite/spark/elastic.py are the other two
sources. The rounds the driver publishes (who is rank what) and their keys
in the store are in hvdlite/store/rounds.py, shared with the workers' side
(hvdlite/common/membership.py, late_joiners.py).
"""
