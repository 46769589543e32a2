"""bench/training_multihost.py's JSON as a picture: samples/s per layout, one
panel per model and link rate, one bar per variant, and N x the 1-rank
reference (perfect scaling) as a black tick over each layout. Needs
matplotlib (make bench-training-multihost installs it). Reads only the JSON,
so it imports nothing from the benchmark.

    .venv/bin/python bench/training_multihost_plot.py \
        bench/results/training_multihost.json [out.png]
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from result_files import redraw, save_figure  # noqa: E402

COLORS = {"alone": "lightgray", "hvdlite-flat": "tab:blue", "hvdlite-two-level": "tab:orange",
          "hvdlite-fp16": "tab:cyan", "hvdlite-powersgd": "tab:red", "ddp": "tab:green",
          "ddp-powersgd": "tab:olive"}


def plot(result, path):
    records = [r for r in result["records"] if "samples_per_s" in r]
    reference = {r["model"]: r["samples_per_s"] for r in records if r["variant"] == "reference"}
    rest = [r for r in records if r["variant"] != "reference"]
    layouts = sorted({(r["hosts"], r["ranks_per_host"]) for r in rest})
    variants = [v for v in COLORS if any(r["variant"] == v for r in rest)]
    panels = sorted({(r["model"], r["link_gbit"]) for r in rest if r["link_gbit"] is not None})
    columns = len({gbit for _, gbit in panels})  # one row per model, one column per rate
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.2 * rows + 0.8),
                                squeeze=False)
    width = 0.8 / max(len(variants), 1)
    for ax, (model, gbit) in zip(axes.flat, panels):
        for index, variant in enumerate(variants):
            for x, (hosts, per_host) in enumerate(layouts):
                found = [r for r in rest if (r["model"], r["variant"], r["hosts"],
                                             r["ranks_per_host"]) == (model, variant, hosts,
                                                                      per_host)
                         and r["link_gbit"] in (gbit, None)]
                if found:  # one legend entry per variant and panel
                    labelled = variant in ax.get_legend_handles_labels()[1]
                    ax.bar(x - 0.4 + (index + 0.5) * width, found[0]["samples_per_s"], width,
                           color=COLORS[variant], label=None if labelled else variant)
        if model in reference:
            for x, (hosts, per_host) in enumerate(layouts):
                ax.hlines(hosts * per_host * reference[model], x - 0.45, x + 0.45,
                          color="black", linewidth=1.2)
        ax.set_xticks(range(len(layouts)), [f"{h} x {p}" for h, p in layouts], fontsize=8)
        ax.set_title(f"{model}, {gbit:g} Gbit/s links", fontsize=9)
        ax.set_ylabel("samples/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    handles = {}
    for ax in axes.flat:  # variants that only some panels have
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    handles["N x 1-rank reference"] = plt.Line2D([], [], color="black", linewidth=1.2)
    figure.legend(handles.values(), handles.keys(), loc="lower center",
                  ncol=min(len(handles), 4), fontsize=8)
    figure.suptitle(f"training across namespace hosts on tbf-shaped links\n({result['date']}, "
                    f"load {result['load_start'][0]:.0f} to {result['load_end'][0]:.0f} on 2 "
                    f"cores)", fontsize=10)
    figure.tight_layout(rect=(0, 0.9 / (3.2 * rows + 0.8), 1, 1))
    save_figure(figure, path)


if __name__ == "__main__":  # JSON [PNG]: the picture again, from a run's JSON
    redraw(plot)
