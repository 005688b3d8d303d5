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
# keyed submit caught half way is repaired by `fsck --repair` on the restored copy. A purge may
# run too: a job it removes is in the copy or not, and fsck --repair removes what it left. Do not
# run `spool cancel` or `spool requeue` by hand while it copies: they move jobs (the API's are
# held by the frozen server).
#
# Environment: SPOOL_UNITS (the active ones are frozen; default spool-run.service and
# spool-serve.service: add any unit running `spool worker`, `spool coordinator` or `spool serve`
# on SPOOL), or SPOOL_FREEZE / SPOOL_THAW (commands that freeze and thaw every process that moves
# jobs in SPOOL, for a host without systemd), SPOOL_PYTHON (a python3 with sqlite3; default
# spool's venv). Exit 0: DEST holds the copy (written as DEST.partial, renamed
# when whole). Restore: see docs/operations.md (copy back, `spool fsck --repair`, start).
set -eu

if [ $# -ne 2 ]; then
    echo "usage: spool-backup.sh SPOOL DEST" >&2
    exit 2
fi
SPOOL=$1
DEST=$2
UNITS=${SPOOL_UNITS:-"spool-run.service spool-serve.service"}
FROZEN=""
freeze_units() {  # systemd 246 or later: the cgroup freezer stops every process of a unit at once
    for unit in $UNITS; do
        if systemctl --quiet is-active "$unit"; then
            systemctl freeze "$unit"
            FROZEN="$FROZEN $unit"
        fi
    done
}
thaw_units() {
    for unit in $FROZEN; do
        systemctl thaw "$unit"
    done
    FROZEN=""
}
FREEZE=${SPOOL_FREEZE:-freeze_units}
THAW=${SPOOL_THAW:-thaw_units}
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

trap '$THAW' EXIT  # set first: a freeze that fails half way thaws what it froze
$FREEZE
# Every file but the ledger, with modes and owners; the runner's dot-files come along. A file a
# producer adds or removes (its tmp/ file) as tar reads is tar's exit 1: not an error here.
{
    STATUS=0  # set -e holds in this subshell too: keep tar's status from ending it
    tar -C "$SPOOL" --exclude='./ledger.sqlite3*' --warning=no-file-changed --warning=no-file-removed \
        --ignore-failed-read -cf - . || STATUS=$?
    echo "$STATUS" >"$DEST.partial.status"
} | tar -C "$DEST.partial" -xpf -
read -r STATUS <"$DEST.partial.status"
rm -f "$DEST.partial.status"
if [ "$STATUS" -gt 1 ]; then
    echo "spool-backup.sh: tar failed reading $SPOOL (exit $STATUS)" >&2
    exit 1
fi
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
