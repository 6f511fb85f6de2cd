#!/usr/bin/env python3
"""Check shoal's JSON statistics reports: every line of the file given is
one JSON document with the documented fields, types and relations
(docs/stats.md).  Exits non-zero with a message on the first mismatch."""
import json
import sys

TOP = {"shoal": str, "version": int, "pid": int, "elapsed_ms": int,
       "allocated": int, "active": int, "resident": int, "mapped": int,
       "committed": int, "purged": int, "peak": dict, "fragmentation": dict,
       "pool": dict, "large": dict, "huge": dict, "threads": dict,
       "faults": dict, "dumps": int, "dumps_skipped": int, "classes": list}
NESTED = {
    "peak": ["active", "resident", "mapped", "heaps"],
    "pool": ["superpages", "slots_used", "slots_dirty", "claims", "releases"],
    "large": ["requests", "live", "live_bytes"],
    "huge": ["requests", "live", "live_bytes", "cached", "cached_bytes"],
    "threads": ["heaps_live", "heaps_created", "heaps_exited", "abandoned_pages",
                "pages_adopted", "remote_frees"],
    "faults": ["minor", "major"],
}
CLASS = ["class", "block_size", "requests", "live_blocks", "live_bytes", "pages"]


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
        class_bytes += c["live_bytes"]
    need(doc["allocated"] == class_bytes + doc["large"]["live_bytes"] + doc["huge"]["live_bytes"],
         "allocated is not the sum of classes, large and huge")
    need(doc["mapped"] >= doc["active"], "active above mapped")
    need(doc["committed"] >= doc["active"], "committed below active")
    need(doc["peak"]["active"] >= doc["active"], "active above its peak")
    need(doc["peak"]["mapped"] >= doc["mapped"], "mapped above its peak")


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
