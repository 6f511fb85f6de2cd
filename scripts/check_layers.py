#!/usr/bin/env python3
"""check_layers.py - calls go down only: entry points -> thread -> core -> os.

Every #include "..." of a file under src/ must name a header of its own
layer or of a layer below it:

  src/os/        the OS calls            (layer 0)
  src/core/      pools, pages, options   (layer 1)
  src/thread/    heaps, remote frees     (layer 2)
  src/*.c, *.h   the entry points        (layer 3)

Where a lower layer must reach a higher one, the higher one registers a
hook (shoal_purge_set_waker, shoal_heap_set_hooks).  Exits 1 and names
every include that points up.

  check_layers.py [SRC_DIR]
"""
import os
import re
import sys

LAYERS = {"os": 0, "core": 1, "thread": 2, "": 3}


def layer_of(path, src):
    rel = os.path.relpath(path, src)
    top = rel.split(os.sep)[0] if os.sep in rel else ""
    return LAYERS.get(top)


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                          os.path.join(os.path.dirname(__file__), "..", "src"))
    bad = []
    checked = 0
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, name)
            mine = layer_of(path, src)
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m:
                        continue
                    target = os.path.normpath(os.path.join(root, m.group(1)))
                    if not target.startswith(src + os.sep):
                        continue            # include/shoal.h: the API, below everything
                    theirs = layer_of(target, src)
                    checked += 1
                    if theirs is None or mine is None or theirs > mine:
                        bad.append("%s:%d: includes %s, a layer above"
                                   % (os.path.relpath(path, src), n, m.group(1)))
    for b in bad:
        print(b)
    print("check_layers: %d includes, %d pointing up" % (checked, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
