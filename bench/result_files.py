"""What the benchmarks that keep their results as a picture share: the run's
JSON, the picture drawn beside it by the benchmark's *_plot.py, and that
module's command line, which draws the picture again from a run's JSON.

A *_plot.py needs matplotlib and reads only the JSON; a benchmark imports it
only to draw, so a run on a machine without matplotlib still writes its
numbers and says why the picture is missing.
"""
import importlib
import json
import sys
from pathlib import Path


def write_json(out, data):
    """Writes `data` to the path `out` (its folder made if missing) and says so."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print(f"wrote {out}")


def draw_beside(out, plot_module, make_target):
    """Draws the JSON at `out` as out's .png with `plot_module`'s
    plot(result, path); without matplotlib, says which make target installs it."""
    out = Path(out)
    try:
        plot = importlib.import_module(plot_module).plot
    except ImportError as error:
        print(f"no plot: {error} (make {make_target} installs matplotlib)")
        return
    plot(json.loads(out.read_text()), out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.png')}")


def save_figure(figure, path):
    """Writes `figure` to `path` at the size every bench picture uses, and frees it."""
    import matplotlib.pyplot as plt
    figure.savefig(path, dpi=72)
    plt.close(figure)


def redraw(plot, argv=None):
    """The command line of a *_plot.py, `JSON [PNG]`: the picture again from a
    run's JSON, to PNG (default: the JSON's path with .png)."""
    argv = sys.argv[1:] if argv is None else argv
    source = Path(argv[0])
    target = Path(argv[1]) if len(argv) > 1 else source.with_suffix(".png")
    plot(json.loads(source.read_text()), target)
    print(f"wrote {target}")
