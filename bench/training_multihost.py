"""Training across hosts on shaped links: hvdlite (flat ring, two levels, fp16,
PowerSGD) against PyTorch DDP over gloo (plain, and with DDP's PowerSGD hook),
training a ResNet-18 and a transformer block stack on synthetic data
(bench/training_models.py), on hosts made of network namespaces with tbf-shaped
links (bench/multihost_net.py, as bench/multihost.py uses them). Needs root.

    .venv/bin/python bench/training_multihost.py [--models resnet18,transformer]
        [--layouts 2x1,2x2,3x1] [--rates 1,10] [--variants ...] [--steps 6]

Every model also runs once on one rank of plain PyTorch (the 1 x 1
reference), and once per layout as N ranks that never exchange gradients
("alone": what the machine's shared cores allow N ranks; the ranks of every
"host" share this machine's CPUs). Scaling efficiency = samples/s at N ranks /
(N x the reference's samples/s). A rate of 0 leaves the links unshaped.
Prints one table per model and link rate (markdown), the issue's targets at
2 x 2 and 1 Gbit/s, and writes bench/results/training_multihost.json and, where
matplotlib is installed, training_multihost.png.
"""
import argparse
import itertools
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from multihost import launch_command
from multihost_net import (HOSTS, kill_strays, one_stream_gbit, round_trip_us, shape,
                           started_cluster, stop_on_sigterm)
from result_files import draw_beside, write_json
from training_models import MODELS
from training_multihost_worker import VARIANTS, powersgd_missing

HERE = Path(__file__).resolve().parent
UNCOMPRESSED = ("hvdlite-flat", "hvdlite-two-level", "ddp")
LABELS = {"reference": "1 rank, plain PyTorch", "alone": "N ranks, no communication",
          "hvdlite-flat": "hvdlite flat ring", "hvdlite-two-level": "hvdlite two levels",
          "hvdlite-fp16": "hvdlite fp16", "hvdlite-powersgd": "hvdlite PowerSGD",
          "ddp": "DDP gloo", "ddp-powersgd": "DDP gloo + PowerSGD hook"}
# gloo's store: a fresh port per run of a job (the worker counts up from the
# job's base, one per model and variant: fewer than 64), none in TIME_WAIT.
_ports = itertools.count(29711, 64)


class Jobs:
    """Starts one worker job at a time on the namespace hosts (every model and
    variant of one layout and link rate, one after the other), turning each
    run into a record, or into one that says why it has no number."""

    def __init__(self, cluster, args):
        self.cluster, self.args = cluster, args
        self.missing = {}
        if "hvdlite-powersgd" in args.variants and (reason := powersgd_missing()):
            self.missing["hvdlite-powersgd"] = reason

    def run(self, variants, hosts, per_host, gbit):
        where = {"hosts": hosts, "ranks_per_host": per_host, "link_gbit": gbit}
        records = [{**where, "model": m, "variant": v, "unavailable": self.missing[v]}
                   for m in self.args.models for v in variants if v in self.missing]
        variants = [v for v in variants if v not in self.missing]
        if not variants:
            return records
        hosts_arg = ",".join(f"{h}:{per_host}" for h in list(HOSTS)[:hosts])
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.jsonl"
            env = {"OMP_NUM_THREADS": "1", "BENCH_GLOO_PORT": next(_ports),
                   "BENCH_GLOO_ADDR": HOSTS["hostA"], "GLOO_SOCKET_IFNAME": "eth0"}
            line = [*launch_command("hvdlite", hosts_arg, hosts * per_host),
                    HERE / "training_multihost_worker.py", "--variants", ",".join(variants),
                    "--models", ",".join(self.args.models), "--steps", self.args.steps,
                    "--warmup", self.args.warmup, "--powersgd-rank", self.args.powersgd_rank,
                    "--json", out]
            command = self.cluster.launcher_command(
                "env", *[f"{k}={v}" for k, v in env.items()], *line)
            print(f"$ {' '.join(map(str, line[:-2]))}   (load {os.getloadavg()[0]:.1f})",
                  flush=True)
            try:
                code = subprocess.run(command, timeout=self.args.timeout, cwd=str(HERE)).returncode
            except subprocess.TimeoutExpired:
                code = f"timeout after {self.args.timeout} s"
            done = [json.loads(text) for text in out.read_text().splitlines()] \
                if out.exists() else []
        if code != 0:
            print(f"  failed (exit {code})", flush=True)
            kill_strays(self.cluster)
        for m in self.args.models:
            for v in variants:
                found = [r for r in done if (r["model"], r["variant"]) == (m, v)]
                records.append({**where, "model": m, "variant": v,
                                **(found[0] if found else {"failed": f"exit {code}"})})
        return records


def measure(cluster, args):
    jobs = Jobs(cluster, args)
    records = []
    for index, gbit in enumerate(args.rates):
        if gbit > 0:  # 0: the veths unshaped
            shape(cluster, gbit)
        link = {"rtt_us": round_trip_us(cluster),
                "one_stream_gbit": one_stream_gbit(cluster, args.stream_seconds)}
        print(f"\n{gbit:g} Gbit/s links: TCP round trip {link['rtt_us']:.0f} us, one TCP stream "
              f"alone {link['one_stream_gbit']:.2f} Gbit/s", flush=True)
        if index == 0:  # sends no gradients: the link does not matter
            records += jobs.run(["reference"], 1, 1, None)
        for hosts, per_host in args.layouts:
            variants = [v for v in args.variants
                        if not (v == "hvdlite-two-level" and per_host == 1)  # = the flat ring
                        and (v != "alone" or index == 0)]  # alone: once per layout
            for record in jobs.run(variants, hosts, per_host, gbit):
                if record["variant"] == "alone":
                    records.append({**record, "link_gbit": None})
                else:
                    records.append({**record, **link})
    return records


# ----------------------------------------------------------------- report --

def find(records, model, variant, hosts, per_host, gbit):
    return next((r for r in records if (r["model"], r["variant"], r["hosts"], r["ranks_per_host"])
                 == (model, variant, hosts, per_host)
                 and r["link_gbit"] in (gbit, None)), None)


def add_efficiency(records):
    """Scaling efficiency against the model's 1 x 1 reference, and the share
    of an uncompressed step that is not the same layout's compute (alone)."""
    for r in records:
        if "samples_per_s" not in r:
            continue
        ranks = r["hosts"] * r["ranks_per_host"]
        reference = find(records, r["model"], "reference", 1, 1, None)
        if reference and "samples_per_s" in reference:
            r["efficiency"] = r["samples_per_s"] / (ranks * reference["samples_per_s"])
        alone = find(records, r["model"], "alone", r["hosts"], r["ranks_per_host"], None)
        if alone and "step_s" in alone and r["variant"] in UNCOMPRESSED:
            r["communication_share"] = max(0.0, 1 - alone["step_s"] / r["step_s"])


def cell(record):
    if record is None:
        return "-"
    if "unavailable" in record:
        return record["unavailable"]
    if "failed" in record:
        return f"failed ({record['failed']})"
    text = f"{record['samples_per_s']:.1f} ({record.get('efficiency', float('nan')):.2f})"
    if "communication_share" in record:
        text += f", comm {100 * record['communication_share']:.0f}%"
    return text


def print_tables(records, args):
    print("\nsamples/s (scaling efficiency vs N x the 1-rank reference); for uncompressed "
          "variants, the share of a step that is not compute (1 - alone's step / its step)")
    for model in args.models:
        spec = MODELS[model]
        reference = find(records, model, "reference", 1, 1, None)
        one = (f"{reference['samples_per_s']:.1f} samples/s, {1e3 * reference['step_s']:.0f} ms "
               f"a step" if reference and "step_s" in reference else cell(reference))
        params = next((r["params"] for r in records if r["model"] == model and "params" in r), 0)
        for gbit in args.rates:
            layouts = [f"{h} x {p}" for h, p in args.layouts]
            print(f"\n{model} ({params / 1e6:.2f} M parameters, {4 * params / 1e6:.0f} MB of "
                  f"float32 gradients), batch {spec['batch']} per rank of {spec['input']}, "
                  f"{gbit:g} Gbit/s links; 1 x 1 reference: {one}\n")
            print("| variant | " + " | ".join(layouts) + " |")
            print("| --- |" + " --- |" * len(layouts))
            for variant in args.variants:
                cells = [cell(find(records, model, variant, h, p, gbit)) for h, p in args.layouts]
                print(f"| {LABELS[variant]} | " + " | ".join(cells) + " |")
            alone = [find(records, model, "alone", h, p, None) for h, p in args.layouts]
            if all(a and "step_s" in a for a in alone):
                print("| (compute a step, alone) | " +
                      " | ".join(f"{1e3 * a['step_s']:.0f} ms" for a in alone) + " |")


def print_targets(records, args):
    """The issue's targets, at 2 x 2 and 1 Gbit/s: hvdlite's best uncompressed
    >= DDP gloo; hvdlite PowerSGD >= 1.5 x DDP gloo and >= DDP + PowerSGD."""
    if 1 not in args.rates or (2, 2) not in args.layouts:
        return
    print("\ntargets at 2 x 2, 1 Gbit/s (reported, not asserted):")

    def rate(model, variant):
        found = find(records, model, variant, 2, 2, 1)
        return found.get("samples_per_s") if found else None
    for model in args.models:
        best = max(filter(None, (rate(model, v) for v in ("hvdlite-flat", "hvdlite-two-level"))),
                   default=None)
        ddp, ddp_psgd, psgd = (rate(model, v) for v in ("ddp", "ddp-powersgd",
                                                        "hvdlite-powersgd"))
        if best and ddp:
            print(f"  {model}: hvdlite best uncompressed {best:.1f} vs DDP gloo {ddp:.1f} samples/s"
                  f" = {best / ddp:.2f}x (target >= 1)")
        if psgd and ddp:
            print(f"  {model}: hvdlite PowerSGD {psgd:.1f} = {psgd / ddp:.2f}x DDP gloo "
                  f"(target >= 1.5)" + (f", {psgd / ddp_psgd:.2f}x DDP + PowerSGD hook "
                                        f"{ddp_psgd:.1f} (target >= 1)" if ddp_psgd else ""))
        elif "hvdlite-powersgd" in args.variants:
            missing = cell(find(records, model, "hvdlite-powersgd", 2, 2, 1))
            print(f"  {model}: hvdlite PowerSGD: {missing}")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,transformer",
                        help="comma-separated subset of " + ",".join(MODELS))
    parser.add_argument("--layouts", default="2x1,2x2,3x1",
                        help="HOSTSxRANKS,... (3 hosts at most)")
    parser.add_argument("--rates", default="1,10", help="link Gbit/s, comma-separated; 0: unshaped")
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "reference"),
                        help="comma-separated subset of " + ",".join(VARIANTS[1:]) +
                             " (the 1 x 1 reference always runs)")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run")
    parser.add_argument("--stream-seconds", type=float, default=2.0,
                        help="how long the one-TCP-stream measure of each link rate runs")
    parser.add_argument("--out", default=str(HERE / "results" / "training_multihost.json"))
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    args.models = args.models.split(",")
    args.layouts = [tuple(map(int, layout.split("x"))) for layout in args.layouts.split(",")]
    args.rates = [float(rate) for rate in args.rates.split(",")]
    args.variants = args.variants.split(",")
    wrong = ([m for m in args.models if m not in MODELS] +
             [v for v in args.variants if v not in VARIANTS[1:]] +
             [f"{h}x{p}" for h, p in args.layouts if not 1 <= h <= len(HOSTS) or p < 1])
    if wrong:
        parser.error(f"unknown model, variant or layout: {', '.join(wrong)}")
    return args


def main():
    args = parse_args()
    load_start = os.getloadavg()
    print(f"load average at the start: {load_start}", flush=True)
    stop_on_sigterm()
    started = time.time()
    with started_cluster("training_multihost") as cluster:
        records = measure(cluster, args)
    load_end = os.getloadavg()
    print(f"load average at the end: {load_end}; {time.time() - started:.0f} s in all")
    add_efficiency(records)
    print_tables(records, args)
    print_targets(records, args)
    out = Path(args.out)
    write_json(out, {"load_start": load_start, "load_end": load_end,
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                     "models": {m: MODELS[m] for m in args.models}, "records": records})
    if not args.no_plot:
        draw_beside(out, "training_multihost_plot", "bench-training-multihost")


if __name__ == "__main__":
    main()
