"""summary.json for tests/gpu/device_check.sh, rewritten after every step so
that a check stopped half-way still leaves what it had found. Standard
library only, and quick: the script calls it between cases.

    device_check_summary.py start SUMMARY KEY=VALUE...      a new summary ("result": "running")
    device_check_summary.py env SUMMARY KEY VALUE|@FILE     environment[KEY] (JSON if it parses)
    device_check_summary.py case SUMMARY NAME STATUS SECONDS OUTPUT [NOTE]
    device_check_summary.py finish SUMMARY RESULT [MESSAGE]
    device_check_summary.py table SUMMARY                   one line per case, for the console
                                                            (its numbers, or why it has none)

A case's numbers are the `DEVICE_CHECK_RESULT {json}` lines its output holds
(tests/gpu/workers/device_cases.py prints them), per rank where the
launcher prefixed them `[rank]<stdout>:`; a case that did not pass also
keeps the last lines of its output.
"""
import json
import os
import re
import sys

MARK = "DEVICE_CHECK_RESULT "
RANK_PREFIX = re.compile(r"^\[(\d+)\]<std(?:out|err)>:")
TAIL_LINES = 40


def load(path):
    with open(path) as f:
        return json.load(f)


def save(path, summary):
    temporary = f"{path}.tmp"
    with open(temporary, "w") as f:
        json.dump(summary, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(temporary, path)


def parse_value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def numbers_of(lines):
    """{...} for one rank, {"rank0": {...}, ...} for several."""
    per_rank = {}
    for line in lines:
        found = RANK_PREFIX.match(line)
        rank = int(found.group(1)) if found else 0
        body = line[found.end():] if found else line
        if not body.startswith(MARK):
            continue
        try:
            values = json.loads(body[len(MARK):])
        except ValueError:
            values = {"unparsed": body[len(MARK):]}
        per_rank.setdefault(rank, {}).update(values)
    if len(per_rank) == 1:
        return next(iter(per_rank.values()))
    return {f"rank{rank}": values for rank, values in sorted(per_rank.items())}


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError as error:
        return [f"(no output: {error})"]


def command_start(path, *pairs):
    summary = {"result": "running", "message": None}
    for pair in pairs:
        key, _, value = pair.partition("=")
        summary[key] = parse_value(value)
    summary.update(environment={}, cases={})
    save(path, summary)


def command_env(path, key, value):
    summary = load(path)
    if value.startswith("@"):
        with open(value[1:], errors="replace") as f:
            value = f.read().strip()
    summary["environment"][key] = parse_value(value)
    save(path, summary)


def command_case(path, name, status, seconds, output, note=""):
    summary = load(path)
    lines = read_lines(output)
    record = {"status": status, "seconds": float(seconds), "numbers": numbers_of(lines)}
    if note:
        record["note"] = note
    if status != "pass":
        record["tail"] = lines[-TAIL_LINES:]
    summary["cases"][name] = record
    if name == "report" and isinstance(record["numbers"], dict):
        summary["environment"].update(record["numbers"])
    save(path, summary)


def command_finish(path, result, message=""):
    summary = load(path)
    summary["result"] = result
    summary["message"] = message or None
    save(path, summary)


def command_table(path):
    summary = load(path)
    for name, case in summary["cases"].items():
        numbers = case["numbers"]
        # A case with no numbers (skipped, or failed early) shows why instead.
        shown = json.dumps(numbers, sort_keys=True, default=str) if numbers or not case.get("note") \
            else case["note"]
        if len(shown) > 300:
            shown = shown[:297] + "..."
        print(f"{name:14s} {case['status']:8s} {case['seconds']:7.1f} s  {shown}")
    print(f"result: {summary['result']}" + (f" ({summary['message']})" if summary.get("message") else ""))


COMMANDS = {"start": command_start, "env": command_env, "case": command_case,
            "finish": command_finish, "table": command_table}

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in COMMANDS:
        raise SystemExit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
