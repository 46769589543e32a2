"""The one shape in which every launcher reports the failure that stopped a
job, "rank R (WHERE) WHAT" (Note [One failure rule] in
hvdlite/runner/failure_rule.py), for each launcher's tests to check against."""

# How each launcher says where a rank ran.
WHERE = {
    "process": r"host [^,()]+, pid \d+",  # hvdliterun, hvdlite.run
    "ray": r"Ray node [\d.]+ \(\w+\)",
    "spark": r"Spark executor host [^()\s]+",
}


def failure_pattern(rank, launcher, what):
    """A regular expression for rank `rank`'s failure as `launcher` reports
    it; `what` is a regular expression too ("raised KeyError: 'x'")."""
    return rf"rank {rank} \({WHERE[launcher]}\) {what}"
