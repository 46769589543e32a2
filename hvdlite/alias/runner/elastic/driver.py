"""horovod.runner.elastic.driver (Note [Horovod runner adapters]): the
constants Horovod's elastic tests patch. launch._run_elastic reads them
each time it starts a job, where no --discovery-interval or --elastic-timeout
(nor HVDLITE_ELASTIC_TIMEOUT / HOROVOD_ELASTIC_TIMEOUT) says otherwise."""
from hvdlite.common import defaults

# Seconds between runs of the discovery script.
DISCOVER_HOSTS_FREQUENCY_SECS = defaults.DISCOVERY_INTERVAL_S
# How long the job waits for --min-np slots.
ELASTIC_TIMEOUT_SECS = defaults.ELASTIC_TIMEOUT_S
