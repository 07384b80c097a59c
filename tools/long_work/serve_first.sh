#!/bin/bash
# usage: serve_first.sh STORE CHECKOUT missing|current CALLS_JSON [serve flags...]
# Drives `keytrail serve` (tools/long_work/mcp_drive.py) on a fresh copy of STORE, with its
# embedding projection deleted (missing) or as it is (current: run `keytrail reembed` on STORE
# first), running the server from CHECKOUT: `python -m` puts the working directory first on
# sys.path, so a checkout of an older commit measures "before" (PYTHONPATH does not).
# DRIVE_EMBEDDER=fastembed DRIVE_KEYTRAIL_EMBED_MODEL_PATH=... picks the real model.
store=$1; checkout=$2; kind=$3; calls=$(realpath "$4"); shift 4
here=$(cd "$(dirname "$0")/../.." && pwd)
copy=$(mktemp -d)/store
cp -a "$store" "$copy"
[ "$kind" = missing ] && rm -rf "$copy/cache/vectors"
echo "== $checkout $kind, load $(cut -d' ' -f1 /proc/loadavg)"
(cd "$checkout" && "$here/.venv/bin/python" "$here/tools/long_work/mcp_drive.py" "$copy" "$calls" "$@")
rm -rf "$(dirname "$copy")"
