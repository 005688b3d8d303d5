#!/bin/sh
# spool-backup.sh SPOOL DEST: a copy of a live spool, correct while jobs run (docs/operations.md).
#
# A job is one file that moves between folders by rename, forward and back (a failed attempt goes
# leased/ -> pending/, a requeue dead/ -> pending/), so a copy that walks the folders while the
# spool's processes run can miss a job that moves behind it. The processes are frozen for the
# copy instead (the cgroup freezer: nothing is stopped, nothing is released, no try is spent; a
# frozen coordinator gives every lease a fresh term when it thaws), and the copy is what a power
# cut at that moment would leave, which spool survives by design. The ledger is copied with
# SQLite's online backup (a consistent snapshot even if a frozen writer was mid-transaction);
# without it `spool fsck --repair` rebuilds it from the files, losing only its history.
#
# Producers (`spool submit`, a drop into pending/) may keep writing: they only create, and a
# keyed submit caught half way is repaired by `fsck --repair` on the restored copy. Do not run
# cancel, requeue or purge (they move jobs) while it copies: the purge timer's unit is frozen too.
#
# Environment: SPOOL_FREEZE / SPOOL_THAW (the commands that freeze and thaw every process that
# moves jobs in SPOOL; default: the units of examples/systemd), SPOOL_PYTHON (a python3 with
# sqlite3; default spool's venv). Exit 0: DEST holds the copy (written as DEST.partial, renamed
# when whole). Restore: see docs/operations.md (copy back, `spool fsck --repair`, start).
set -eu

if [ $# -ne 2 ]; then
    echo "usage: spool-backup.sh SPOOL DEST" >&2
    exit 2
fi
SPOOL=$1
DEST=$2
UNITS="spool-run.service spool-serve.service spool-purge.service"
FREEZE=${SPOOL_FREEZE:-"systemctl freeze $UNITS"}
THAW=${SPOOL_THAW:-"systemctl thaw $UNITS"}
PYTHON=${SPOOL_PYTHON:-/opt/spool/venv/bin/python}

if [ ! -f "$SPOOL/.spool" ]; then
    echo "spool-backup.sh: $SPOOL: not a spool (no .spool marker)" >&2
    exit 1
fi
if [ -e "$DEST" ] || [ -e "$DEST.partial" ]; then
    echo "spool-backup.sh: $DEST or $DEST.partial exists; refusing to write over it" >&2
    exit 1
fi
mkdir -m 0700 "$DEST.partial"

$FREEZE
trap '$THAW' EXIT
# Every file but the ledger, with modes and owners; the runner's dot-files come along.
tar -C "$SPOOL" --exclude='./ledger.sqlite3*' -cf - . | tar -C "$DEST.partial" -xpf -
"$PYTHON" - "$SPOOL/ledger.sqlite3" "$DEST.partial/ledger.sqlite3" <<'EOF' || echo "spool-backup.sh: ledger not copied; spool fsck --repair rebuilds it" >&2
import os, sqlite3, sys
source, target = sys.argv[1], sys.argv[2]
if os.path.exists(source):
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=5)
    dst = sqlite3.connect(target)
    src.backup(dst)
    dst.close()
    src.close()
EOF
$THAW
trap - EXIT

sync -f "$DEST.partial" 2>/dev/null || sync
mv "$DEST.partial" "$DEST"
echo "spool-backup.sh: $SPOOL copied to $DEST"
