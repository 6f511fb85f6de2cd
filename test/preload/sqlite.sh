#!/usr/bin/env bash
# sqlite.sh - the sqlite3 shell under shoal: a file database in WAL mode
# and an in-memory one, 200,000 inserted rows, indexes, joins, grouping,
# window functions, JSON functions, updates, deletes, VACUUM and an
# integrity check.  The query results must match the run without shoal.
. "$(dirname "$0")/lib.sh"
need sqlite3

cat >"$work/work.sql" <<'SQL'
PRAGMA journal_mode=WAL;
PRAGMA cache_size=-4000;
CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, val REAL, payload BLOB);
CREATE TABLE tag(item_id INTEGER, tag TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO item SELECT x, 'name-' || (x * 7919 % 100003), x % 97, (x * 31 % 1000) / 7.0,
                        zeroblob(x % 700) FROM c;
INSERT INTO tag SELECT id, 'tag' || (id % 13) FROM item WHERE id % 3 = 0;
INSERT INTO tag SELECT id, 'tag' || (id % 17) FROM item WHERE id % 5 = 0;
COMMIT;
CREATE INDEX item_grp ON item(grp, val);
CREATE INDEX tag_tag ON tag(tag, item_id);
SELECT count(*), sum(length(payload)), round(sum(val), 3) FROM item;
SELECT grp, count(*), round(avg(val), 4), min(name), max(name) FROM item GROUP BY grp
  ORDER BY grp LIMIT 10;
SELECT t.tag, count(*), round(sum(i.val), 2) FROM tag t JOIN item i ON i.id = t.item_id
  GROUP BY t.tag ORDER BY 2 DESC, 1;
SELECT id, name, rank() OVER (PARTITION BY grp ORDER BY val DESC, id) AS r FROM item
  WHERE grp = 42 ORDER BY r, id LIMIT 8;
SELECT json_group_array(json_object('id', id, 'name', name)) FROM
  (SELECT id, name FROM item WHERE grp = 7 ORDER BY id LIMIT 5);
SELECT group_concat(name, ',') FROM (SELECT name FROM item ORDER BY name DESC LIMIT 20);
UPDATE item SET name = upper(name) || '-' || grp, val = val * 2 WHERE id % 11 = 0;
DELETE FROM item WHERE id % 4 = 1;
SELECT count(*), count(DISTINCT name), round(sum(val), 3) FROM item;
SELECT substr(name, 1, 8) AS p, count(*) FROM item GROUP BY p ORDER BY 2 DESC, 1 LIMIT 5;
VACUUM;
PRAGMA integrity_check;
SELECT count(*) FROM item;
SQL

cat >"$work/run.sh" <<'RUN'
set -euo pipefail
db=$1 sql=$2
rm -f "$db" "$db-wal" "$db-shm"
echo "== file database"
sqlite3 -batch -bail "$db" <"$sql"
echo "== reopened"
sqlite3 -batch -bail "$db" 'SELECT count(*), round(sum(val), 3) FROM item; PRAGMA quick_check;'
echo "== in memory"
grep -v 'journal_mode' "$sql" | sqlite3 -batch -bail :memory:
RUN

run_both sqlite 60 bash "$work/run.sh" "$work/test.db" "$work/work.sql"
shoal_was_loaded 3
