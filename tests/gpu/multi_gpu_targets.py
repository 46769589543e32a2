"""The targets of tests/gpu/multi_gpu_check.sh, from its summary.json: bus
bandwidth at the largest size against torch.distributed's in the same run,
the fused step against DDP's, ResNet-50 scaling efficiency against DDP's.
Prints them as JSON (the script stores them as environment.targets) and one
line each for the console. Standard library only.

    multi_gpu_targets.py SUMMARY
"""
import json
import sys

BUSBW_RATIO = 0.95  # hvdlite's bus bandwidth at 1 GiB over torch.distributed's


def numbers(summary, case):
    record = summary["cases"].get(case) or {}
    found = record.get("numbers") or {}
    return found.get("rank0", found) if isinstance(found, dict) else {}


def largest(summary, backend):
    sizes = numbers(summary, f"busbw_{backend}").get("sizes") or []
    return max(sizes, key=lambda s: s["bytes"]) if sizes else None


def scaling(summary, backend):
    """{ranks: images/s} and the efficiency at the most ranks: ips(N) / (N ips(1))."""
    rates = {}
    for name, record in summary["cases"].items():
        if name.startswith(f"resnet50_{backend}_") and record.get("status") == "pass":
            found = numbers(summary, name)
            if "img_per_sec" in found:
                rates[int(found["ranks"])] = found["img_per_sec"]
    if 1 not in rates or len(rates) < 2:
        return rates, None
    most = max(rates)
    return rates, round(rates[most] / (most * rates[1]), 3)


def targets(summary):
    out = {}
    mine, theirs = largest(summary, "hvdlite"), largest(summary, "torch")
    if mine and theirs and mine["bytes"] == theirs["bytes"] and theirs["busbw_gbs"] > 0:
        ratio = round(mine["busbw_gbs"] / theirs["busbw_gbs"], 3)
        out["busbw_largest"] = {"bytes": mine["bytes"], "hvdlite_gbs": mine["busbw_gbs"],
                                "torch_gbs": theirs["busbw_gbs"], "ratio": ratio,
                                "target": f">= {BUSBW_RATIO}", "met": ratio >= BUSBW_RATIO}
    fused = numbers(summary, "fused_step")
    if "hvdlite_ms" in fused:
        out["fused_step"] = {k: fused[k] for k in ("hvdlite_ms", "ddp_ms", "target", "met")}
    ours, ddp = scaling(summary, "hvdlite"), scaling(summary, "ddp")
    if ours[1] is not None and ddp[1] is not None:
        out["resnet50_scaling"] = {"hvdlite_img_per_sec": ours[0], "ddp_img_per_sec": ddp[0],
                                   "hvdlite_efficiency": ours[1], "ddp_efficiency": ddp[1],
                                   "target": "hvdlite_efficiency >= ddp_efficiency", "met": ours[1] >= ddp[1]}
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        found = targets(json.load(f))
    print(json.dumps(found))
    for name, values in found.items():
        print(f"target {name}: {'met' if values['met'] else 'NOT met'} {json.dumps(values)}", file=sys.stderr)
