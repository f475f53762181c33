#!/usr/bin/python3
"""Draws the allreduce benchmark's CSV: bus bandwidth against message size, detcoll beside its peer.

    scripts/plot_bench.py CSV OUTDIR

CSV is what detcoll_allreduce_perf -C writes (scripts/bench.sh with CSV=path,
scripts/bench_sweep.sh). One figure per mode, op and world size,
OUTDIR/allreduce_<mode>_<op>_np<P>.png, with a panel per dtype: detcoll's busbw and its peer's
(MPI_Allreduce, or detcoll's native mode for the 16-bit floats MPI lacks) against the message
size on a log2 axis, and their ratio on the right-hand axis. Rows of the same configuration and
size from several runs are reduced to their median (the ratio: the median of each run's own
ratio). A panel whose runs counted wrong elements says so in red.
"""

import collections
import csv
import math
import os
import statistics
import sys

COLUMNS = ("dtype", "op", "mode", "ranks", "bytes", "ours_busbw", "wrong", "peer_name",
           "peer_busbw", "ratio")
DTYPE_ORDER = ("float32", "float64", "float16", "bfloat16", "int32", "int64")
MODE_ORDER = ("ordered", "invariant", "native")


def fail(message):
    sys.exit(f"plot_bench.py: {message}")


def read(path):
    """{(mode, op, ranks): {dtype: {"peer": set, "wrong": int, "sizes": {bytes: [rows]}}}}"""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                fail(f"{path} is not detcoll_allreduce_perf's CSV: no column "
                     f"{', '.join(missing)}")
            rows = list(reader)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if not rows:
        fail(f"{path} has no rows")
    figures = collections.defaultdict(dict)
    for line, row in enumerate(rows, start=2):
        try:
            key = (row["mode"], row["op"], int(row["ranks"]))
            size = int(row["bytes"])
            values = (float(row["ours_busbw"]), float(row["peer_busbw"]), float(row["ratio"]))
            wrong = int(row["wrong"])
        except (TypeError, ValueError):
            fail(f"{path}:{line}: not a row of numbers where numbers belong: {row}")
        panel = figures[key].setdefault(row["dtype"], {"peer": set(), "wrong": 0,
                                                       "sizes": collections.defaultdict(list)})
        panel["peer"].add(row["peer_name"])
        panel["wrong"] += max(wrong, 0)  # -1: not checked (-c 0)
        panel["sizes"][size].append(values)
    return figures


def size_label(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def order(value, known):
    return (known.index(value), value) if value in known else (len(known), value)


def draw(key, panels, outdir, plt, ticker, Image):
    mode, op, ranks = key
    dtypes = sorted(panels, key=lambda d: order(d, DTYPE_ORDER))
    cols = 1 if len(dtypes) == 1 else 2
    rows = math.ceil(len(dtypes) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.4 * cols, 3.3 * rows), squeeze=False)
    runs = 1
    for ax, dtype in zip(axes.flat, dtypes):
        panel = panels[dtype]
        sizes = sorted(panel["sizes"])
        med = [[statistics.median(v[i] for v in panel["sizes"][s]) for s in sizes]
               for i in range(3)]
        runs = max(runs, max(len(panel["sizes"][s]) for s in sizes))
        peer = " / ".join(sorted(panel["peer"]))
        ours_line, = ax.plot(sizes, med[0], "o-", color="tab:blue", ms=4, label=f"detcoll {mode}")
        peer_line, = ax.plot(sizes, med[1], "s--", color="tab:orange", ms=4, label=peer)
        ax.set_xscale("log", base=2)
        step = max(1, math.ceil(len(sizes) / 9))
        ax.set_xticks(sizes[::step])
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: size_label(x)))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.tick_params(axis="x", labelsize=7, labelrotation=30)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="major", alpha=0.3)
        title = f"{dtype}: detcoll vs {peer}"
        if panel["wrong"]:
            title += f"  ({panel['wrong']} WRONG)"
        ax.set_title(title, fontsize=9, color="red" if panel["wrong"] else "black")
        twin = ax.twinx()
        ratio_line, = twin.plot(sizes, med[2], ":", color="tab:gray", marker=".",
                                label="ratio (right)")
        twin.axhline(1.0, color="tab:gray", lw=0.6, alpha=0.5)
        # A log2 axis even about 1 (at least 1/4 to 4): 2x faster and 2x slower look alike.
        reach = max([2] + [math.ceil(abs(math.log2(r))) for r in med[2] if r > 0])
        twin.set_yscale("log", base=2)
        twin.set_ylim(2.0**-reach, 2.0**reach)
        twin.yaxis.set_major_formatter(
            ticker.FuncFormatter(lambda y, _: f"{y:g}x" if y >= 1 else f"1/{1 / y:g}x"))
        twin.yaxis.set_minor_locator(ticker.NullLocator())
        twin.set_ylabel("detcoll / peer", fontsize=8, color="tab:gray")
        twin.tick_params(axis="y", labelsize=7, colors="tab:gray")
        ax.legend(handles=[ours_line, peer_line, ratio_line], fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(dtypes):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("message size")
    median = f", median of {runs} runs" if runs > 1 else ""
    fig.suptitle(f"detcoll allreduce, {mode} mode, {op}, np {ranks}: bus bandwidth{median}",
                 fontsize=10)
    fig.tight_layout()
    path = os.path.join(outdir, f"allreduce_{mode}_{op}_np{ranks}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    # A palette of 128 colours: a third of the bytes (committed plots stay small), the same picture.
    with Image.open(path) as image:
        palette = image.convert("RGB").quantize(colors=128)
    palette.save(path, optimize=True)
    return path


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        fail(f"usage: plot_bench.py CSV OUTDIR\n{__doc__}")
    figures = read(argv[1])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
        from PIL import Image  # a dependency of matplotlib
    except ImportError as e:
        fail(f"matplotlib is missing ({e}): install Debian's python3-matplotlib "
             f"(apt-get install python3-matplotlib, or scripts/setup.sh)")
    os.makedirs(argv[2], exist_ok=True)
    for key in sorted(figures, key=lambda k: (order(k[0], MODE_ORDER), k[1], k[2])):
        print(draw(key, figures[key], argv[2], plt, ticker, Image))


if __name__ == "__main__":
    main(sys.argv)
