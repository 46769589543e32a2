"""What the elastic tests share: reading the workers' final reports and
writing a discovery script whose hosts a test (or a worker) can edit."""
import json


def finals(result, workers):
    """{worker: its last "final <json>" report}, for the workers that printed one."""
    reports = {}
    for worker in workers:
        lines = [line for line in result.lines(worker) if line.startswith("final ")]
        if lines:
            reports[worker] = json.loads(lines[-1][len("final "):])
    return reports


def discovery_script(tmp_path, hosts):
    """(script, hosts file): the script prints the file, which starts with `hosts`."""
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("\n".join(hosts) + "\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    script.chmod(0o755)
    return script, hosts_file
