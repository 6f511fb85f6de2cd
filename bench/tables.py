#!/usr/bin/env python3
"""bench/tables.py - the tables of docs/benchmarks.md from a run's
results.csv (bench/run writes it; --publish into docs/bench/): the
programs' time and peak RSS with each peer's ratio to shoal, the one
block pairs at the sizes the page shows, calloc against malloc, and a
line on the pairs at every size (where shoal is the fastest, where not).

  bench/tables.py [docs/bench/results.csv]
"""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1] if len(sys.argv) > 1 else "docs/bench/results.csv")))
med = {(r["workload"], r["metric"], r["allocator"]): float(r["median"]) for r in rows}
A = ["shoal", "glibc", "jemalloc", "tcmalloc", "mimalloc"]


def fmt(v):
    """Three significant figures or so, as the page prints them."""
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    if v >= 1:
        return "%.2f" % v
    return "%.3g" % v


def rate(v):
    return "%.0fk" % (v / 1000)


def prog_row(label, w, m, higher, ratefmt):
    """shoal's median in bold, each peer's with its ratio, read so that
    above 1 shoal is better."""
    s = med.get((w, m, "shoal"))
    if s is None:
        return None
    f = rate if ratefmt else fmt
    cells = ["**%s**" % f(s)]
    for a in A[1:]:
        v = med.get((w, m, a))
        if v is None:
            cells.append("")
            continue
        ratio = (s / v) if higher else (v / s)
        cells.append("%s (%.2f)" % (f(v), ratio))
    return "| %s | %s |" % (label, " | ".join(cells))


progs = [
    ("3. json_tree (s)", "json_tree", "total_s", False, False),
    ("3. json_tree peak RSS (MiB)", "json_tree", "peak_rss_mb", False, False),
    ("4. larson (ns a step)", "larson", "op_ns", False, False),
    ("4. larson peak RSS (MiB)", "larson", "peak_rss_mb", False, False),
    ("5. prodcons (ns an item)", "prodcons", "item_ns", False, False),
    ("5. prodcons peak RSS (MiB)", "prodcons", "peak_rss_mb", False, False),
    ("6. false_sharing thrash (s)", "false_sharing", "thrash_s", False, False),
    ("6. false_sharing scratch (s)", "false_sharing", "scratch_s", False, False),
    ("6. false_sharing peak RSS (MiB)", "false_sharing", "peak_rss_mb", False, False),
    ("7. thread_churn (us a thread)", "thread_churn", "thread_us", False, False),
    ("7. thread_churn peak RSS (MiB)", "thread_churn", "peak_rss_mb", False, False),
    ("10. generations (ms a generation)", "generations", "gen_ms", False, False),
    ("10. generations peak RSS (MiB)", "generations", "peak_rss_mb", False, False),
    ("10. generations RSS 2.5 s after the last free (MiB)", "generations", "rss_idle_mb", False, False),
    ("11. footprint (ns a replacement)", "footprint", "step_ns", False, False),
    ("11. footprint peak RSS (MiB)", "footprint", "peak_rss_mb", False, False),
    ("15. kv_cache (ns a replacement)", "kv_cache", "step_ns", False, False),
    ("15. kv_cache peak RSS (MiB)", "kv_cache", "peak_rss_mb", False, False),
    ("12. xmalloc (ns an item)", "xmalloc", "item_ns", False, False),
    ("12. xmalloc peak RSS (MiB)", "xmalloc", "peak_rss_mb", False, False),
    ("9. redis SET (req/s)", "redis", "rps.set", True, True),
    ("9. redis GET (req/s)", "redis", "rps.get", True, True),
    ("9. redis peak RSS (MiB)", "redis", "peak_rss_mb", False, False),
    ("9. redis RSS 5 s after the load (MiB)", "redis", "rss_loaded_settled_mb", False, False),
    ("9. redis RSS after FLUSHALL (MiB)", "redis", "rss_after_flush_mb", False, False),
    ("8. page_faults (s)", "page_faults", "total_s", False, False),
]
print("| workload (figure) | shoal | glibc | jemalloc | tcmalloc | mimalloc |")
print("|---|---:|---:|---:|---:|---:|")
for p in progs:
    r = prog_row(*p)
    if r:
        print(r)
pf = med.get(("page_faults", "total_s", "shoal+prefault"))
if pf is not None:
    print("| 8. page_faults, SHOAL_PREFAULT=1 (s) | %s | | | | |" % fmt(pf))
print()
sizes = [("1 B", 1), ("32 B", 32), ("1 KiB", 1024), ("4 KiB", 4096), ("64 KiB", 65536),
         ("256 KiB", 262144), ("2 MiB", 2 << 20), ("8 MiB", 8 << 20), ("64 MiB", 64 << 20),
         ("1 GiB", 1 << 30), ("4 GiB", 4 << 30)]
print("| size | shoal | glibc | jemalloc | tcmalloc | mimalloc |")
print("|---|---:|---:|---:|---:|---:|")
for label, n in sizes:
    m = "pair_ns.%d" % n
    cells = []
    for a in A:
        v = med.get(("single_block", m, a))
        cells.append(("**%s**" if a == "shoal" else "%s") % (fmt(v) if v is not None else ""))
    print("| %s | %s |" % (label, " | ".join(cells)))
print()
print("| size | shoal recycled | fresh memory | calloc/malloc, recycled: shoal, peers | fresh: shoal, peers |")
print("|---|---:|---:|---|---|")
for n in (5, 20, 100, 500, 2000, 8000):
    r = med[("calloc_malloc", "calloc_ns.%d" % n, "shoal")]
    f = med[("calloc_malloc", "fresh_calloc_ns.%d" % n, "shoal")]
    ro = [med[("calloc_malloc", "calloc_over_malloc.%d" % n, a)] for a in A]
    fo = [med[("calloc_malloc", "fresh_calloc_over_malloc.%d" % n, a)] for a in A]
    print("| %d B | %s | %s | %.2f; %.2f-%.2f | %.2f; %.2f-%.2f |" % (
        n, fmt(r), fmt(f), ro[0], min(ro[1:]), max(ro[1:]), fo[0], min(fo[1:]), max(fo[1:])))
# Every power of two: where shoal is the fastest, its range, the gaps.
print()
mine, behind = [], []
for k in range(33):
    s = med.get(("single_block", "pair_ns.%d" % (1 << k), "shoal"))
    if s is None:
        continue
    mine.append(s)
    best = min(med.get(("single_block", "pair_ns.%d" % (1 << k), a), float("inf")) for a in A[1:])
    if s > best:
        behind.append((s - best, 1 << k, s, best))
print("single_block: shoal the fastest at %d of %d sizes, %.2f-%.2f ns at every size"
      % (len(mine) - len(behind), len(mine), min(mine), max(mine)))
for gap, n, s, best in sorted(behind, reverse=True):
    print("  %d B: %.2f ns behind (%.2f vs %.2f)" % (n, gap, s, best))
