#!/usr/bin/env bash
# git_workload.sh SRC REPO_BASE - the git session of git.sh.  Makes a
# fresh repository (REPO_BASE.N for the first free N) from the files in
# SRC and prints everything that should not depend on the allocator.
set -euo pipefail
src=$1
n=0
while [ -e "$2.$n" ]; do n=$((n + 1)); done
repo=$2.$n
export HOME="$repo.home" GIT_CONFIG_NOSYSTEM=1 LC_ALL=C TZ=UTC
export GIT_AUTHOR_NAME=Shoal GIT_AUTHOR_EMAIL=shoal@example.invalid
export GIT_COMMITTER_NAME=Shoal GIT_COMMITTER_EMAIL=shoal@example.invalid
mkdir -p "$HOME"
git config --global init.defaultBranch main
git config --global core.autocrlf false
git config --global gc.auto 0
git config --global pack.threads 2

commit() {
    export GIT_AUTHOR_DATE="2024-01-0$1T12:00:00Z" GIT_COMMITTER_DATE="2024-01-0$1T12:00:00Z"
    git commit -q -m "$2"
}

git init -q "$repo"
cp -r "$src/." "$repo/"
cd "$repo"
git add -A
commit 1 "initial: $(git ls-files | wc -l) files"

# Edits: rewrite some files, delete some, add some, rename some.
for round in 2 3 4 5; do
    git ls-files | awk -v r=$round 'NR % (7 * r) == 1' | xargs sed -i "s/hay/straw$round/; 3d"
    git ls-files | awk -v r=$round 'NR % (97 + r) == 5' | xargs git rm -q -f
    for i in $(seq 1 $((round * 10))); do
        seq "$i" $((i * round * 20)) >"dir$((i % 40))/new-$round-$i.txt"
    done
    f=$(git ls-files "dir$round" | grep '/file' | sed -n 1p)
    git mv "$f" "${f%.txt}-renamed.txt"
    git add -A
    commit "$round" "round $round"
done

git log --format='%H %an %ad %s' --date=iso
git log --stat --format='commit %h' -3 | tail -50
git diff --stat HEAD~4 HEAD | tail -3
git diff HEAD~4 HEAD | sha256sum
git diff -M --name-status HEAD~4 HEAD | sort | sha256sum
git grep -c needle HEAD -- dir1 dir2 | sort
git grep -n needle | wc -l
git blame --line-porcelain dir3/file3.txt 2>/dev/null | grep -c '^author ' || true
git blame -s dir10/file10.txt | sed -n 1,5p
git gc -q
git count-objects -v | grep -E '^(count|in-pack|packs|garbage):'
git fsck --no-progress --full 2>&1
git rev-list --all --objects | wc -l
git cat-file --batch-check --batch-all-objects | awk '{print $2}' | sort | uniq -c
git archive --format=tar HEAD | tar -tf - | sort | sha256sum
git ls-tree -r HEAD | sha256sum
git show --format='%H' -s HEAD~2
