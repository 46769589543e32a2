"""The records bench/multihost.py writes (one JSON object per library, link,
layout and size) and what both it and bench/multihost_plot.py read from them:
the libraries in table order, the grouping by link and layout, and the
bandwidth bound of two levels. A module of its own so that the plot script
and the benchmark need not import each other."""

LIBRARIES = ["hvdlite-flat", "hvdlite-two-level", "gloo", "mpi", "horovod"]


def two_level_bound(hosts, per_host):
    """busbw / link rate that two levels allow (see bench/multihost.py's docstring)."""
    n = hosts * per_host
    return ((n - 1) / n) / ((hosts - 1) / hosts)


def group(records):
    """{(link_gbit, hosts, ranks_per_host): records}, in that order."""
    groups = {}
    for r in records:
        groups.setdefault((r["link_gbit"], r["hosts"], r["ranks_per_host"]), []).append(r)
    return dict(sorted(groups.items()))


def key(record):
    return record["library"], record["link_gbit"], record["hosts"], record["ranks_per_host"]


def find(rows, library, size):
    return next((r for r in rows if r["library"] == library and r["bytes"] == size), None)
