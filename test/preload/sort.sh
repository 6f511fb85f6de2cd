#!/usr/bin/env bash
# sort.sh - coreutils sort and a shell pipeline under shoal, on generated
# data: sort | uniq -c | sort -n, sort by fields, unique sort, and a
# parallel sort with a small buffer (temporary files and merge threads).
# Every output must match the run without shoal byte for byte.
. "$(dirname "$0")/lib.sh"
need sort uniq awk cut tr sha256sum

# 300,000 lines: a word from a skewed vocabulary, numbers, some padding.
awk 'BEGIN {
    srand(11);
    for (i = 0; i < 300000; i++) {
        w = int(rand() * rand() * 5000);
        printf "w%05d %d %.3f %s\n", w, int(rand() * 1000000), rand() * 1000, \
               substr("abcdefghijklmnopqrstuvwxyz0123456789", 1, 1 + int(rand() * 36));
    }
}' >"$work/data"

cat >"$work/pipeline.sh" <<'PIPE'
set -euo pipefail
data=$1 tmp=$2
export LC_ALL=C
echo "== sort | uniq -c | sort -n"
cut -d' ' -f1 "$data" | sort | uniq -c | sort -n | sha256sum
cut -d' ' -f1 "$data" | sort | uniq -c | sort -n | tail -3
echo "== sort -k2,2n -k1,1"
sort -k2,2n -k1,1 "$data" | sha256sum
echo "== sort -u -k1,1"
sort -u -k1,1 "$data" | wc -l
echo "== sort -g -k3 --parallel=2 -S 1M (temporary files, threads)"
sort -g -k3,3 -k1,1 --parallel=2 -S 1M -T "$tmp" "$data" | sha256sum
echo "== sort -R with a fixed source, then sort back"
sort -R --random-source="$data" "$data" | sort | sha256sum
echo "== tr | sort | uniq -d"
tr 'a-z' 'A-Z' <"$data" | sort -t' ' -k4,4 -s | cut -d' ' -f4 | uniq -d | wc -l
PIPE

mkdir -p "$work/tmp"
run_both pipeline 60 bash "$work/pipeline.sh" "$work/data" "$work/tmp"
shoal_was_loaded 10
