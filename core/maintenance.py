"""Looking after a store: verify it line by line, rebuild its derived state from the log."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from keytrail.events import CorruptLog, EventLog
from keytrail.events.redact import redacted_ids
from keytrail.projections import GraphState, apply

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    events: int
    segments: int
    problems: list[str] = field(default_factory=list)
    torn_files: list[str] = field(default_factory=list)
    #: Memories whose content was removed from the log by forget (each must be forgotten).
    redacted: list[str] = field(default_factory=list)


def verify(home: Path | str, progress: Progress | None = None) -> VerifyReport:
    """Decode every line (checksum, gap-free seq, ordered time), and fold every event.

    A fold that fails means an event refers to something that never existed: the log is
    inconsistent even though each line is well formed.
    """
    log = EventLog(Path(home))
    segments = log.segments()
    total = sum((log.dir / s).stat().st_size for s in segments) or 1
    problems: list[str] = []
    state = GraphState()
    count = 0
    redacted: list[str] = []
    try:
        for event in log.iter_new():
            redacted += redacted_ids(event)
            try:
                apply(state, event)
            except (KeyError, IndexError, TypeError) as exc:
                problems.append(
                    f"seq {event.seq} ({type(event).__name__}) cannot be applied: "
                    f"refers to missing {exc}"
                )
                break
            count += 1
            if progress is not None and count % 10_000 == 0:
                progress(_consumed(log), total)
    except CorruptLog as exc:
        problems.append(exc.message)
    if not problems and count and state.store_id == "":
        problems.append("the log does not start with store.created")
    if not problems:
        # Only forget redacts, and it appends memory.forgotten first: a redacted memory that is
        # not forgotten means the log was edited by something else.
        problems += [
            f"memory {m}: content redacted but the memory was never forgotten"
            for m in redacted
            if state.memories[m].status != "forgotten"
        ]
    # Bytes after the last newline of the last segment: a torn tail the next appender will cut.
    if segments and not problems:
        last = log.dir / segments[-1]
        if last.stat().st_size != log.position.offset and log.position.segment == segments[-1]:
            problems.append(
                f"{segments[-1]}: torn last line ({last.stat().st_size - log.position.offset} "
                "bytes after the last complete line; the next write cuts it)"
            )
    torn_dir = log.dir / "torn"
    torn = sorted(p.name for p in torn_dir.iterdir()) if torn_dir.exists() else []
    if progress is not None:
        progress(total, total)
    return VerifyReport(
        ok=not problems,
        events=count,
        segments=len(segments),
        problems=problems,
        torn_files=torn,
        redacted=redacted,
    )


def _consumed(log: EventLog) -> int:
    pos = log.position
    done = 0
    for name in log.segments():
        if name == pos.segment:
            return done + pos.offset
        done += (log.dir / name).stat().st_size
    return done


def drop_cache(home: Path | str) -> None:
    """Delete everything derived (snapshots, indexes, vectors). The log alone is the store."""
    cache = Path(home) / "cache"
    if cache.exists():
        shutil.rmtree(cache)
