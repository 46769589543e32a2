"""Elastic jobs (`hvdliterun --min-np ... --host-discovery-script ...`): the
driver keeps a job running while hosts come and go and ranks fail.

    discovery.py   which hosts (and slots) exist now: a script or a fixed list
    exclusion.py   hosts left out after failures, for a cooldown or for good
    workers.py     the worker processes, one per slot: here, or over ssh on other hosts
    planner.py     which workers form the next round
    driver.py      the loop that ties them together

The rounds the driver publishes (who is rank what) and their keys in the
store are in hvdlite/store/rounds.py, shared with the workers' side
(hvdlite/common/membership.py).
"""
