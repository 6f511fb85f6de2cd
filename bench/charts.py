#!/usr/bin/env python3
"""bench/charts.py RUN_DIR [OUT_DIR] - PNG charts from a bench/run result.

Reads RUN_DIR/summary.csv (a run directory) or RUN_DIR/results.csv (the
committed copy bench/run --publish writes to docs/bench/), and
RUN_DIR/run.json for the caption (commit, date, mode), and writes
OUT_DIR/*.png (default RUN_DIR/charts) with matplotlib (Debian:
python3-matplotlib).  Bars and points are medians; the thin lines on
them span the runs' minimum to maximum.  bench/run calls it; run it by
hand to redraw.
"""
import csv
import json
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

PLAIN = FuncFormatter(lambda y, _: "%g" % y)
CAPTION = ""                    # set by main from run.json

COLORS = {"shoal": "#1f77b4", "shoal+prefault": "#17becf", "glibc": "#7f7f7f",
          "jemalloc": "#d62728", "tcmalloc": "#2ca02c", "mimalloc": "#ff7f0e"}
ORDER = ["shoal", "shoal+prefault", "glibc", "jemalloc", "tcmalloc", "mimalloc"]


def load(run_dir):
    rows = []
    name = "summary.csv" if os.path.exists(os.path.join(run_dir, "summary.csv")) else "results.csv"
    with open(os.path.join(run_dir, name)) as f:
        for r in csv.DictReader(f):
            for k in ("median", "min", "max"):
                r[k] = float(r[k]) if r.get(k) not in (None, "") else float("nan")
            rows.append(r)
    return rows


def caption(run_dir):
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return ""
    return "shoal %s, %s, %s run, median of %s (lines: min to max); %s" % (
        info.get("commit", "?"), info.get("date", "?"), info.get("mode", "?"),
        info.get("reps", "?"), info.get("cpu", ""))


def get(rows, workload, metric, threads=None, spread=False):
    """{allocator: median} for one figure; with spread, {allocator:
    (median, min, max)}."""
    out = {}
    for r in rows:
        if r["workload"] == workload and r["metric"] == metric and (
                threads is None or r["threads"] == threads):
            out[r["allocator"]] = (r["median"], r["min"], r["max"]) if spread else r["median"]
    return out


def log_axis(axis):
    """A log axis whose ticks read as plain numbers at 1, 2 and 5 of each
    decade."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(PLAIN)
    axis.set_minor_formatter(NullFormatter())


def allocs_in(rows, workload=None):
    have = {r["allocator"] for r in rows if workload is None or r["workload"] == workload}
    return [a for a in ORDER if a in have]


def size_label(n):
    for unit, s in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << s:
            return "%d%s" % (n >> s, unit)
    return str(n)


def grouped_bars(ax, groups, allocs, values, ylabel, title, log=False, ref=None):
    """values[(group, alloc)] -> number, or (median, min, max): a bar with
    its spread."""
    n = len(allocs)
    width = 0.8 / max(n, 1)
    for i, a in enumerate(allocs):
        xs, ys, lo, hi = [], [], [], []
        for g, grp in enumerate(groups):
            v = values.get((grp, a))
            m, vmin, vmax = v if isinstance(v, tuple) else (v, v, v)
            if m is not None and m == m:
                xs.append(g - 0.4 + width * (i + 0.5))
                ys.append(m)
                lo.append(m - vmin if vmin == vmin else 0)
                hi.append(vmax - m if vmax == vmax else 0)
        ax.bar(xs, ys, width, label=a, color=COLORS.get(a),
               yerr=[lo, hi] if any(lo) or any(hi) else None,
               error_kw=dict(elinewidth=0.8, capsize=1.5, ecolor="black"))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
        log_axis(ax.yaxis)
    if ref is not None:
        ax.axhline(ref, color="black", linewidth=0.8, linestyle="--")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def save(fig, out, name):
    """Write the figure as out/name.png, with the run's caption, and free
    it."""
    if CAPTION:
        fig.text(0.995, 0.003, CAPTION, ha="right", va="bottom", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.025, 1, 1) if CAPTION else None)
    fig.savefig(os.path.join(out, name + ".png"), dpi=110)
    plt.close(fig)


def chart_single_block(rows, out):
    pts = {}
    for r in rows:
        if r["workload"] == "single_block" and r["metric"].startswith("pair_ns."):
            pts.setdefault(r["allocator"], []).append(
                (int(r["metric"].split(".")[1]), r["median"], r["min"], r["max"]))
    if not pts:
        return
    fig, ax = plt.subplots(figsize=(10, 5.5))
    sizes = set()
    for a in [a for a in ORDER if a in pts]:
        xs, ys, lo, hi = zip(*sorted(pts[a]))
        sizes.update(xs)
        ax.errorbar(xs, ys, yerr=[[y - v for y, v in zip(ys, lo)], [v - y for y, v in zip(ys, hi)]],
                    marker="o", markersize=3, label=a, color=COLORS.get(a),
                    linewidth=2.2 if a == "shoal" else 1.2, elinewidth=0.7, capsize=1.5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    log_axis(ax.yaxis)
    s = sorted(sizes)
    ax.set_xticks(s[::2])
    ax.set_xticklabels([size_label(x) for x in s[::2]], rotation=45)
    ax.set_xlabel("block size (bytes)")
    ax.set_ylabel("ns per malloc+free pair (log)")
    ax.set_title("1. one block live at a time: malloc + first-byte write + free")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    save(fig, out, "single_block")


def chart_calloc(rows, out):
    allocs = allocs_in(rows, "calloc_malloc")
    if not allocs:
        return
    sizes = sorted({int(r["metric"].split(".")[1]) for r in rows
                    if r["workload"] == "calloc_malloc" and r["metric"].startswith("calloc_ns.")})
    groups = ["%d B" % s for s in sizes]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.8))
    v1, v2 = {}, {}
    for s, g in zip(sizes, groups):
        for a, v in get(rows, "calloc_malloc", "calloc_ns.%d" % s, spread=True).items():
            v1[(g, a)] = v
        for a, v in get(rows, "calloc_malloc", "calloc_over_malloc.%d" % s, spread=True).items():
            v2[(g, a)] = v
    grouped_bars(a1, groups, allocs, v1, "ns per calloc + write + free (log)",
                 "2. calloc cost", log=True)
    grouped_bars(a2, groups, allocs, v2, "calloc time / malloc time",
                 "2. calloc over malloc (dashed: target 1.10)", ref=1.10)
    save(fig, out, "calloc_malloc")


# The time figure of each multi-threaded / many-object workload.
TIME_FIGURES = [("json_tree", "total_s"), ("larson", "op_ns"), ("prodcons", "item_ns"),
                ("xmalloc", "item_ns"), ("false_sharing", "thrash_s"), ("false_sharing", "scratch_s"),
                ("thread_churn", "thread_us"), ("generations", "gen_ms"),
                ("footprint", "step_ns"), ("kv_cache", "step_ns")]


def chart_relative(rows, out):
    groups, tv = [], {}
    rgroups, rv = [], {}
    threads = sorted({r["threads"] for r in rows if r["threads"]}, key=int)

    def relative(d, inverse=False):
        """(median, min, max) over shoal's median (inverse: shoal's over
        them, for figures where higher is better)."""
        base = d["shoal"][0]
        if inverse:
            return {a: (base / m, base / hi, base / lo) for a, (m, lo, hi) in d.items()}
        return {a: (m / base, lo / base, hi / base) for a, (m, lo, hi) in d.items()}

    def add_rss(w, t, label):
        rss = get(rows, w, "peak_rss_mb", t, spread=True)
        if "shoal" in rss and rss["shoal"][0] and label not in rgroups:
            rgroups.append(label)
            for a, v in relative(rss).items():
                rv[(label, a)] = v

    for w, m in TIME_FIGURES:
        for t in ([None] if w in ("json_tree", "footprint", "kv_cache") else threads):
            d = get(rows, w, m, t, spread=True)
            if not d or "shoal" not in d or not d["shoal"][0]:
                continue
            tl = " T=%s" % t if t else ""
            g = "%s %s%s" % (w, m.rsplit("_", 1)[0], tl)
            groups.append(g)
            for a, v in relative(d).items():
                tv[(g, a)] = v
            add_rss(w, t, w + tl)
    for test in ("set", "get", "lpush", "lrange_100"):
        d = get(rows, "redis", "rps." + test, spread=True)
        if "shoal" in d and d["shoal"][0]:
            g = "redis %s (1/rps)" % test
            groups.append(g)
            for a, v in relative(d, inverse=True).items():
                tv[(g, a)] = v
    add_rss("redis", None, "redis")
    add_rss("footprint", None, "footprint")
    if not groups:
        return
    allocs = [a for a in allocs_in(rows) if a != "shoal+prefault"]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(max(10, len(groups) * 1.3), 9))
    grouped_bars(a1, groups, allocs, tv, "relative to shoal (log; lower is better)",
                 "3-7, 9-11: time relative to shoal", log=True, ref=1.0)
    grouped_bars(a2, rgroups, allocs, rv, "relative to shoal (lower is better)",
                 "3-7, 9-11: peak RSS relative to shoal", ref=1.0)
    save(fig, out, "workloads")


# The time figure of each threaded workload, a panel each in scaling.png,
# with its label; false_sharing last, so that the free panel under its
# second figure (one RSS for both phases) can hold the legend.
SCALING_FIGURES = [("larson", "op_ns", "4. larson: ns a step, per thread"),
                   ("prodcons", "item_ns", "5. prodcons: ns an item"),
                   ("xmalloc", "item_ns", "12. xmalloc: ns an item"),
                   ("thread_churn", "thread_us", "7. thread_churn: us a thread"),
                   ("false_sharing", "thrash_s", "6. false_sharing: thrash (s)"),
                   ("false_sharing", "scratch_s", "6. false_sharing: scratch (s)")]


def thread_counts(rows, workload):
    return sorted({int(r["threads"]) for r in rows if r["workload"] == workload and r["threads"]})


def curves(ax, rows, workload, metric, title):
    """One line per allocator over the thread counts: medians, with bars
    from the runs' minimum to maximum.  Each allocator's points sit a
    little apart in x, so that bars at the same count do not hide each
    other."""
    counts = thread_counts(rows, workload)
    allocs = [a for a in allocs_in(rows, workload) if a != "shoal+prefault"]
    by_count = {t: get(rows, workload, metric, str(t), spread=True) for t in counts}
    for i, a in enumerate(allocs):
        pts = [(t,) + by_count[t][a] for t in counts if a in by_count[t]]
        if not pts:
            continue
        ts, ys, lo, hi = zip(*pts)
        shift = 2 ** (0.04 * (i - (len(allocs) - 1) / 2))
        ax.errorbar([t * shift for t in ts], ys,
                    yerr=[[y - v for y, v in zip(ys, lo)], [v - y for y, v in zip(ys, hi)]],
                    marker="o", markersize=3, label=a, color=COLORS.get(a),
                    linewidth=2.2 if a == "shoal" else 1.2, elinewidth=0.7, capsize=1.5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts)
    ax.set_xticklabels([str(t) for t in counts])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yscale("log")
    log_axis(ax.yaxis)
    ax.set_xlabel("threads")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")


def chart_scaling(rows, out):
    """Time and peak RSS of each threaded workload against the thread
    count, where the run has more than one count: the curves show how an
    allocator scales, which the bars of workloads.png, one group a
    count, do not."""
    figs = [f for f in SCALING_FIGURES if len(thread_counts(rows, f[0])) > 1
            and get(rows, f[0], f[1])]
    if not figs:
        return
    fig, axes = plt.subplots(2, len(figs), figsize=(3.4 * len(figs) + 1, 8), squeeze=False)
    rss_done = set()
    for col, (w, m, title) in enumerate(figs):
        curves(axes[0][col], rows, w, m, title)
        axes[0][col].set_ylabel("median (log; lower is better)" if col == 0 else "")
        if w in rss_done:
            axes[1][col].axis("off")
            continue
        rss_done.add(w)
        curves(axes[1][col], rows, w, "peak_rss_mb", "%s: peak RSS (MiB)" % title.split(":")[0])
        axes[1][col].set_ylabel("MiB (log)" if col == 0 else "")
    handles, labels = axes[0][0].get_legend_handles_labels()
    spare = [ax for ax in axes[1] if not ax.axison]
    if spare:
        spare[0].legend(handles, labels, loc="center", fontsize=10)
    else:
        axes[0][0].legend(fontsize=8)
    fig.suptitle("4-7, 12: the threaded workloads at each thread count (points: medians; bars: min to max)")
    save(fig, out, "scaling")


def chart_page_faults(rows, out):
    allocs = allocs_in(rows, "page_faults")
    if not allocs:
        return
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.3))
    for ax, (m, label) in zip(axes, (("total_s", "seconds (excluding pauses)"),
                                     ("minflt", "minor page faults"),
                                     ("peak_rss_mb", "peak RSS (MiB)"))):
        d = get(rows, "page_faults", m, spread=True)
        xs = [a for a in allocs if a in d]
        ax.bar(range(len(xs)), [d[a][0] for a in xs], color=[COLORS.get(a) for a in xs],
               yerr=[[d[a][0] - d[a][1] for a in xs], [d[a][2] - d[a][0] for a in xs]],
               error_kw=dict(elinewidth=0.8, capsize=2, ecolor="black"))
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels(xs, rotation=30, ha="right")
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("8. page-fault-heavy load: shoal with prefault off / on, and the peers")
    save(fig, out, "page_faults")


def chart_generations(rows, out):
    """RSS over the run of workload 10, one line per allocator."""
    marks = sorted({r["metric"] for r in rows
                    if r["workload"] == "generations" and r["metric"].startswith("rss_mb.g")})
    if not marks:
        return
    threads = sorted({r["threads"] for r in rows if r["workload"] == "generations"}, key=int)
    fig, axes = plt.subplots(1, len(threads), figsize=(7 * len(threads), 4.5), squeeze=False)
    xs = [int(m[len("rss_mb.g"):]) for m in marks]
    for ax, t in zip(axes[0], threads):
        for a in allocs_in(rows, "generations"):
            ys = [get(rows, "generations", m, t).get(a) for m in marks]
            if all(y is not None for y in ys):
                ax.plot(xs, ys, marker="o", label=a, color=COLORS.get(a))
        ax.set_xlabel("generations of %s threads so far" % t)
        ax.set_ylabel("RSS (MiB)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("10. generations: RSS over the run (median of the runs)")
    save(fig, out, "generations")


def chart_redis(rows, out):
    allocs = allocs_in(rows, "redis")
    if not allocs:
        return
    def order(t):
        first = ["set", "get", "lpush"]
        if t in first:
            return (first.index(t), 0)
        return (len(first), int(t.split("_")[1]) if t.split("_")[-1].isdigit() else 0)
    tests = sorted({r["metric"][4:] for r in rows
                    if r["workload"] == "redis" and r["metric"].startswith("rps.")}, key=order)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 4.8))
    v = {}
    for t in tests:
        for a, x in get(rows, "redis", "rps." + t, spread=True).items():
            v[(t, a)] = x
    grouped_bars(a1, tests, allocs, v, "requests per second (log; higher is better)",
                 "9. redis-benchmark -P 16", log=True)
    groups = ["peak", "loaded", "loaded, idle", "after FLUSHALL"]
    v = {}
    for g, m in zip(groups, ("peak_rss_mb", "rss_loaded_mb", "rss_loaded_settled_mb",
                             "rss_after_flush_mb")):
        for a, x in get(rows, "redis", m, spread=True).items():
            v[(g, a)] = x
    grouped_bars(a2, groups, allocs, v, "RSS (MiB)", "9. redis-server RSS")
    save(fig, out, "redis")


def main():
    global CAPTION
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: charts.py RUN_DIR [OUT_DIR]")
    run_dir = sys.argv[1]
    rows = load(run_dir)
    CAPTION = caption(run_dir)
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(run_dir, "charts")
    os.makedirs(out, exist_ok=True)
    for fn in (chart_single_block, chart_calloc, chart_relative, chart_scaling, chart_page_faults,
               chart_redis, chart_generations):
        try:
            fn(rows, out)
        except Exception as e:  # noqa: BLE001 - one bad chart should not stop the rest
            print("charts: %s failed: %s" % (fn.__name__, e), file=sys.stderr)
    made = sorted(f for f in os.listdir(out) if f.endswith(".png"))
    print("charts: %s" % ", ".join(os.path.join(os.path.relpath(out), f) for f in made))
    return 0


if __name__ == "__main__":
    sys.exit(main())
