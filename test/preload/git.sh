#!/usr/bin/env bash
# git.sh - git under shoal on a generated repository: init, add many
# files, several commits, log, diff, grep, blame, gc (multi-threaded
# pack-objects), fsck, archive.  Dates and names are fixed, so commit
# ids are the same in both runs; the whole output must match.
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
need git awk tar

# Files: 40 directories, 2000 text files of 100 B to 40 KiB, generated once.
awk -v root="$work/src" 'BEGIN {
    srand(7);
    for (d = 0; d < 40; d++) system("mkdir -p " root "/dir" d);
    for (i = 0; i < 2000; i++) {
        f = root "/dir" (i % 40) "/file" i ".txt";
        n = int(rand() * rand() * 800) + 2;
        for (l = 0; l < n; l++)
            printf "line %d of file %d: %08x %s\n", l, i, int(rand() * 2147483647), \
                   (l % 7 == 0 ? "needle" : "hay") > f;
        close(f);
    }
}'

run_both git 90 "$here/git_workload.sh" "$work/src" "$work/repo"
shoal_was_loaded 20
