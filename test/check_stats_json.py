#!/usr/bin/env python3
"""Check shoal's JSON statistics reports: every line of the file given is
one JSON document with the documented fields, types and relations
(docs/stats.md).  Exits non-zero with a message on the first mismatch."""
import json
import sys

MEMORY = ["allocated", "active", "resident", "mapped", "committed"]
TOP = {"shoal": str, "version": int, "pid": int, "elapsed_ms": int,
       **{key: int for m in MEMORY for key in (m, m + "_peak")},
       "purged": int, "metadata": int, "fragmentation": dict,
       "pool": dict, "large": dict, "huge": dict, "threads": dict,
       "faults": dict, "dumps": int, "dumps_skipped": int, "options": dict,
       "classes": list}
NESTED = {
    "pool": ["superpages", "slots_used", "slots_used_peak", "slots_dirty",
             "slots_dirty_peak", "claims", "releases"],
    "large": ["requests", "live", "live_bytes", "live_peak", "live_bytes_peak"],
    "huge": ["requests", "live", "live_bytes", "live_peak", "live_bytes_peak", "cached",
             "cached_bytes", "cached_peak", "cached_bytes_peak"],
    "threads": ["heaps_live", "heaps_live_peak", "heaps_created", "heaps_exited",
                "abandoned_pages", "abandoned_pages_peak", "pages_adopted", "remote_frees",
                "remote_in_flight", "remote_atomics"],
    "faults": ["minor", "major"],
}
CLASS = ["class", "block_size", "requests", "live_blocks", "live_bytes", "pages",
         "capacity_blocks", "live_blocks_peak", "live_bytes_peak", "pages_peak"]
# Each current value and the field that holds its peak: KEY and KEY_peak.
PEAKS = [((m,), (m + "_peak",)) for m in MEMORY] + [
    ((group, key), (group, key + "_peak"))
    for group, keys in (("pool", ("slots_used", "slots_dirty")),
                        ("large", ("live", "live_bytes")),
                        ("huge", ("live", "live_bytes", "cached", "cached_bytes")),
                        ("threads", ("heaps_live", "abandoned_pages")))
    for key in keys]


def check(doc, where):
    def need(cond, what):
        if not cond:
            sys.exit(f"{where}: {what}")
    for key, kind in TOP.items():
        need(isinstance(doc.get(key), kind), f"field {key} missing or not {kind.__name__}")
    for group, keys in NESTED.items():
        for key in keys:
            v = doc[group].get(key)
            need(isinstance(v, int) and v >= 0, f"{group}.{key} missing or negative")
    for group in ("large", "huge"):
        bins = doc[group].get("bins")
        need(isinstance(bins, list), f"{group}.bins missing")
        for b in bins:
            need(b.get("up_to") is None or isinstance(b["up_to"], int), f"{group} bin up_to: {b}")
            for key in ("live", "live_bytes", "live_peak"):
                need(isinstance(b.get(key), int) and b[key] >= 0, f"{group} bin {key}: {b}")
            need(b["live_peak"] > 0, f"{group} bin listed that never held a block: {b}")
    due = doc["pool"].get("purge_due_ms")
    need(isinstance(due, int) and due >= -1, "pool.purge_due_ms missing or below -1")
    for key in ("active_allocated", "resident_active", "resident_allocated"):
        v = doc["fragmentation"].get(key, "missing")
        need(v is None or isinstance(v, (int, float)), f"fragmentation.{key} not a number")
    class_bytes = 0
    last = -1
    for c in doc["classes"]:
        for key in CLASS:
            need(isinstance(c.get(key), int) and c[key] >= 0, f"class field {key} bad: {c}")
        need(c["class"] > last, "classes out of order")
        last = c["class"]
        need(c["live_bytes"] == c["live_blocks"] * c["block_size"], f"live_bytes wrong: {c}")
        need(c["live_blocks"] <= c["requests"], f"more live than requested: {c}")
        for key in ("live_blocks", "live_bytes", "pages"):
            need(c[key + "_peak"] >= c[key], f"class {key} above its peak: {c}")
        need(c["live_bytes_peak"] == c["live_blocks_peak"] * c["block_size"],
             f"live_bytes_peak wrong: {c}")
        class_bytes += c["live_bytes"]
    need(doc["allocated"] == class_bytes + doc["large"]["live_bytes"] + doc["huge"]["live_bytes"],
         "allocated is not the sum of classes, large and huge")
    need(doc["mapped"] >= doc["active"], "active above mapped")
    need(doc["committed"] >= doc["active"], "committed below active")
    need(doc["committed"] <= doc["mapped"], "committed above mapped")
    for cur, peak in PEAKS:
        def value(path):
            v = doc
            for key in path:
                v = v[key]
            return v
        need(value(peak) >= value(cur), f"{'.'.join(cur)} above its peak {'.'.join(peak)}")


def main():
    lines = open(sys.argv[1], encoding="ascii").read().splitlines()
    if not lines:
        sys.exit("no reports in " + sys.argv[1])
    for i, line in enumerate(lines, 1):
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"line {i}: not JSON: {e}")
        check(doc, f"line {i}")
    print(f"{len(lines)} reports checked")


main()
