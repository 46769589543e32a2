#!/bin/sh
# Host discovery for an elastic hvdliterun job: prints one `host:slots` line
# per usable host. This one reads them from a file (default: hosts.txt next
# to this script), so you can add or remove hosts while the job runs:
#
#   echo 127.0.0.2:1 >> examples/elastic/hosts.txt     # the job grows
#
# On a cluster, ask the scheduler instead (e.g. list the nodes of a SLURM
# allocation, or the running instances of a cloud group); hvdliterun starts
# the workers of other hosts over ssh (README, "Elastic training"). 127.0.0.x
# addresses are slot groups on this machine, handy for trying it out.
HOSTS_FILE="${HOSTS_FILE:-$(dirname "$0")/hosts.txt}"
if [ -f "$HOSTS_FILE" ]; then
    cat "$HOSTS_FILE"
else
    echo "localhost:2"
fi
