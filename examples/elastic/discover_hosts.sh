#!/bin/sh
# Host discovery for an elastic hvdliterun job: prints one `host:slots` line
# per usable host. This one prints the file $HOSTS_FILE (keep it in a
# temporary folder), so you can add or remove hosts while the job runs:
#
#   export HOSTS_FILE=$(mktemp -d)/hosts.txt; echo 127.0.0.1:1 > $HOSTS_FILE
#   echo 127.0.0.2:1 >> $HOSTS_FILE     # later: the job grows
#
# Without HOSTS_FILE, or while it does not exist, it prints `localhost:2`.
# On a cluster, ask the scheduler instead (e.g. list the nodes of a SLURM
# allocation, or the running instances of a cloud group); hvdliterun starts
# the workers of other hosts over ssh (docs/elastic.md). 127.0.0.x
# addresses are slot groups on this machine, handy for trying it out.
if [ -n "$HOSTS_FILE" ] && [ -f "$HOSTS_FILE" ]; then
    cat "$HOSTS_FILE"
else
    echo "localhost:2"
fi
