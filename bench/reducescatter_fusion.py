"""Step time of many reducescatters submitted asynchronously and then waited
on, as a sharded optimizer's gradient step does: 200 x 16 KiB float32 at
2 ranks, fused (the default threshold) against unfused, in one run.

    python bench/reducescatter_fusion.py [--np 2] [--rounds 7]

Unfused is HVDLITE_FUSION_THRESHOLD=0: every reducescatter is then a batch of
its own and runs the per-tensor path that ran before reducescatters fused
(Note [Fused reducescatter] in csrc/core/fusion.cc). Rounds alternate the
order (fused, unfused; unfused, fused; ...) so that a loaded machine's drift
hits both alike. Each run prints its median; the end prints the medians over
runs. --worker is one run, under hvdliterun.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
COUNT, NBYTES = 200, 16 << 10


def worker():
    from backends import Hvdlite
    from timing import measure
    backend = Hvdlite()
    hvd = backend.hvd
    arrays = [np.ones(NBYTES // 4, np.float32) for _ in range(COUNT)]

    def step():
        handles = [hvd.reducescatter_async(a, op=hvd.Sum, name=f"rs.{i}") for i, a in enumerate(arrays)]
        for h in handles:
            hvd.synchronize(h)

    median, p90, iterations = measure(backend, step, min_iters=10, min_seconds=1.0)
    if backend.rank == 0:
        print("RESULT " + json.dumps({"median_ms": median * 1e3, "p90_ms": p90 * 1e3,
                                      "iterations": iterations}), flush=True)


def run_once(np_, fused):
    env = dict(os.environ)
    env.pop("HVDLITE_FUSION_THRESHOLD", None)
    if not fused:
        env["HVDLITE_FUSION_THRESHOLD"] = "0"
    out = subprocess.run([str(Path(sys.executable).parent / "hvdliterun"), "-np", str(np_), sys.executable,
                          str(Path(__file__).resolve()), "--worker"],
                         cwd=HERE, env=env, check=True, capture_output=True, text=True, timeout=300).stdout
    line = next(l for l in out.splitlines() if "RESULT " in l)
    return json.loads(line.split("RESULT ", 1)[1])["median_ms"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker()
    runs = {"unfused": [], "fused": []}
    for round_ in range(args.rounds):
        order = ["unfused", "fused"] if round_ % 2 == 0 else ["fused", "unfused"]
        for name in order:
            runs[name].append(run_once(args.np, name == "fused"))
            print(f"round {round_ + 1} {name}: {runs[name][-1]:.2f} ms", flush=True)
    before, after = statistics.median(runs["unfused"]), statistics.median(runs["fused"])
    print(f"\n| {COUNT} x {NBYTES >> 10} KiB reducescatter step, {args.np} ranks | unfused (threshold 0), "
          f"{args.rounds} runs | fused, {args.rounds} runs | median before -> after |")
    print("| --- | --- | --- | --- |")
    print(f"| median of run medians (ms) | {', '.join(f'{v:.2f}' for v in runs['unfused'])} | "
          f"{', '.join(f'{v:.2f}' for v in runs['fused'])} | {before:.2f} -> {after:.2f} ({before / after:.1f}x) |")


if __name__ == "__main__":
    main()
