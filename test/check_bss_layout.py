#!/usr/bin/env python3
"""Check the .bss layout of libshoal.so: the sparse tables (objects of
1 MiB or more: the chunk map, the superpage tables) come last, after
every smaller variable, so that the variables every process touches
share a few pages instead of lying one to a page between the tables
(src/os/os.h, CMakeLists.txt).  Exits non-zero naming the first small
variable found after a table.

  check_bss_layout.py LIBRARY
"""
import subprocess
import sys

TABLE = 1 << 20


def main():
    out = subprocess.run(["nm", "-S", "-n", sys.argv[1]], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    bss = []                    # (address, size, name) of .bss objects, by address
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in ("b", "B"):
            bss.append((int(f[0], 16), int(f[1], 16), f[3]))
    tables = [s for s in bss if s[1] >= TABLE]
    if not tables:
        sys.exit("no .bss object of 1 MiB or more in %s: is it libshoal.so?" % sys.argv[1])
    first = min(t[0] for t in tables)
    after = [s for s in bss if s[0] > first and s[1] < TABLE]
    if after:
        addr, size, name = after[0]
        sys.exit("%s (%d bytes at %#x) lies after the table at %#x: %d small variables "
                 "among the sparse tables" % (name, size, addr, first, len(after)))
    print("ok: %d .bss objects, %d tables last" % (len(bss), len(tables)))


if __name__ == "__main__":
    main()
