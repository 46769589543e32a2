"""horovod.runner.gloo_run (Note [Horovod runner adapters])."""


def _get_min_start_hosts(settings):
    """How many hosts an elastic job waits for before its first round,
    besides --min-np slots (ElasticSettings.min_start_hosts). Horovod waits
    for 2 without --network-interface, to find interfaces common to two
    hosts; hvdlite finds its addresses per round without that, so 1. A test
    may patch this, as Horovod's do; _run_elastic asks it every time."""
    return 1
