"""bench/multihost.py's records as a picture: busbw against size, one panel
per link rate and layout, one line per library, and what the link allows as
horizontal lines. Needs matplotlib (make bench-multihost installs it).

    .venv/bin/python bench/multihost_plot.py bench/results/multihost.json
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from multihost_records import LIBRARIES, group, two_level_bound  # noqa: E402
from result_files import redraw, save_figure  # noqa: E402


COLORS = {"hvdlite-flat": "tab:blue", "hvdlite-two-level": "tab:orange", "gloo": "tab:green",
          "mpi": "tab:purple", "horovod": "tab:brown"}


def plot(records, path):
    groups = group(records)
    columns = min(len(groups), 3)
    rows = -(-len(groups) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    for ax, ((gbit, hosts, per_host), found) in zip(axes.flat, sorted(groups.items())):
        for library in LIBRARIES:
            points = sorted((r["bytes"], r["busbw_gbs"]) for r in found if r["library"] == library)
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, label=library,
                        color=COLORS[library])
        ax.axhline(gbit, color="black", linestyle="--", linewidth=0.8, label="link rate")
        if per_host > 1:
            ax.axhline(gbit * two_level_bound(hosts, per_host), color="gray", linestyle=":",
                       linewidth=1, label="two-level bound")
        stream = found[0]["one_stream_gbit"]
        ax.axhline(stream, color="tab:red", linestyle="-.", linewidth=0.8,
                   label="one TCP stream alone")
        # Buffers that fit tbf's bucket pass faster than the rate: cut them off.
        ax.set_ylim(0, 1.2 * max(stream, gbit * (two_level_bound(hosts, per_host)
                                                  if per_host > 1 else 1)))
        ax.set_xscale("log", base=2)
        ax.set_title(f"{hosts} hosts x {per_host} rank(s), {gbit:g} Gbit/s", fontsize=9)
        ax.set_xlabel("bytes", fontsize=8)
        ax.set_ylabel("busbw Gbit/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat[1:len(groups)]:  # libraries that only some panels have
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
    figure.suptitle("allreduce float32 across namespace hosts on tbf-shaped links", fontsize=10)
    figure.tight_layout(rect=(0, 0.09, 1, 1))
    save_figure(figure, path)


if __name__ == "__main__":  # JSON [PNG]: the picture again, from a run's JSON
    redraw(plot)
