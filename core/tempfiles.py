"""Temp files a writer killed mid-write leaves in a store, found and removed.

A file the store replaces whole is written beside its name first and renamed over it once
whole: a forget's redacted segment (`log/.<segment>.redact.tmp`) and its scrubbed torn tails
(`log/torn/.<name>.<pid>.tmp`), the forget's pending record (`.forget.pending.<pid>.tmp`),
snapshots (`cache/snapshot/.<name>.<pid>.tmp`) and a vector cache's coverage
(`cache/vectors/<fingerprint>/manifest.tmp`). A process killed between the two leaves the temp
file, which nothing reads and which would stay for good, copied by every `cp -a` backup.

Each of these is written only by a process holding the appenders' lock (`EventLog.lock`), so
one found while holding that lock is nobody's write under way: a store's open removes them
then. Not covered: `import.partial/` (an import writes it before it takes the lock, and removes
it itself) and the text index's `index/text.new`/`text.old` (written under the index's own
lock; its next rebuild removes them).
"""

from __future__ import annotations

from pathlib import Path

from keytrail.events.redact import TEMP_SUFFIX as REDACT_SUFFIX
from keytrail.projections import snapshot as snapshots
from keytrail.projections.vectors import MANIFEST_TEMP, VECTORS_DIR

from .forgetting import PENDING_FILE

#: (folder under the store, glob) of each kind; `write_atomic` names `.<name>.<pid>.tmp`
_KINDS = (
    ("log", f".*{REDACT_SUFFIX}"),
    ("log/torn", f".*.*{snapshots.TEMP_SUFFIX}"),
    (".", f".{PENDING_FILE}.*{snapshots.TEMP_SUFFIX}"),
    ("cache/snapshot", f".*.*{snapshots.TEMP_SUFFIX}"),
    (f"{VECTORS_DIR}/*", MANIFEST_TEMP),
)


def leftovers(home: Path) -> list[Path]:
    """The store's temp files under `home`, by path. Without the appenders' lock held, one may
    be a write under way."""
    found = (p for folder, glob in _KINDS for p in home.glob(str(Path(folder) / glob)))
    return sorted(p for p in found if p.is_file())


def remove_leftovers(home: Path) -> list[Path]:
    """Remove the store's temp files. Hold the appenders' lock. Returns those removed."""
    removed = []
    for path in leftovers(home):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed
