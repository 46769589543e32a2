"""bench/sharded_memory.py's JSON as a picture: per rank, model-state bytes
(left) and peak resident memory (right) against the number of ranks, one
line per method (the largest over a job's ranks), with fp32 Adam's formulas
(16, 8 + 8/N and 4 + 12/N bytes a parameter) as thin dashed lines on the
left. Needs matplotlib (make bench-sharded installs it). Reads only the JSON.

    .venv/bin/python bench/sharded_memory_plot.py bench/results/sharded_memory.json [out.png]
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from result_files import redraw, save_figure  # noqa: E402

COLORS = {"hvdlite": "tab:blue", "hvdlite-stage1": "tab:orange", "hvdlite-stage2": "tab:red",
          "zero": "tab:green", "fsdp2": "tab:purple"}
# Bytes a parameter for fp32 Adam (4 parameter + 4 gradient + 8 state), N ranks.
FORMULAS = {"hvdlite": lambda n: 16, "hvdlite-stage1": lambda n: 8 + 8 / n,
            "hvdlite-stage2": lambda n: 4 + 12 / n}


def largest(record, keys):
    per_rank = record["per_rank"]
    return max(sum(per_rank[k][r] for k in keys) for r in range(record["ranks"]))


def plot(result, path):
    records = [r for r in result["records"] if "per_rank" in r]
    params = next((r["params"] for r in records), 0)
    figure, (state_ax, rss_ax) = plt.subplots(1, 2, figsize=(10, 4.2))
    for method, color in COLORS.items():
        mine = sorted((r for r in records if r["method"] == method), key=lambda r: r["ranks"])
        if not mine:
            continue
        ranks = [r["ranks"] for r in mine]
        label = result["labels"][method]
        state_ax.plot(ranks, [largest(r, ("parameters", "gradients", "optimizer_state")) / 1e6
                              for r in mine], "o-", color=color, label=label)
        rss_ax.plot(ranks, [largest(r, ("peak_rss",)) / 1e6 for r in mine], "o-", color=color,
                    label=label)
        if method in FORMULAS:
            state_ax.plot(ranks, [FORMULAS[method](n) * params / 1e6 for n in ranks], "--",
                          color=color, linewidth=0.8, alpha=0.6)
    for ax, title in ((state_ax, "model state per rank (params + grads + Adam state)"),
                      (rss_ax, "peak resident memory per rank (ru_maxrss)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["ranks"] for r in records}),
                      [str(n) for n in sorted({r["ranks"] for r in records})])
        ax.set_xlabel("ranks")
        ax.set_ylabel("MB")
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    state_ax.legend(fontsize=7, title="dashed: 16, 8 + 8/N, 4 + 12/N bytes a parameter",
                    title_fontsize=7)
    figure.suptitle(f"{params / 1e6:.1f} M-parameter transformer, fp32 Adam, CPU "
                    f"({result['date']}, load {result['load_start'][0]:.0f} to "
                    f"{result['load_end'][0]:.0f} on {result['cpus']} cores)", fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)


if __name__ == "__main__":  # JSON [PNG]: the picture again, from a run's JSON
    redraw(plot)
