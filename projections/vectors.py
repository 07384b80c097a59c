"""Embedding matrices: a content-addressed vector cache per model fingerprint.

Vectors are keyed by the hash of the text they embed, so the same text is never embedded twice
by the same model, a replay into a new model embeds each distinct text once, and switching back
to an earlier model costs nothing. On disk, per fingerprint::

    cache/vectors/<fingerprint>/vectors.f32   rows of float32, appended
    cache/vectors/<fingerprint>/hashes.txt    one text hash per row, appended
    cache/vectors/<fingerprint>/manifest.json the seq up to which every key label and memory
                                              content of the log has a row (written atomically)

Only the holder of the store lock appends, so processes never interleave rows. A crash can leave
the two files at different lengths; the shorter one decides how many rows are valid.

A process maps the rows on disk (`mmap`) rather than reading them: a server that never needs
most content vectors (recall reads label rows; dedup reads up to 200 content rows) does not hold
them in memory, and servers on one store share the pages. Rows are only ever appended or
overwritten in place (a purge's zeros, which the mapping sees), and a writer cuts the file only
past the rows every reader knows, so a mapped row stays readable (why: `flush`).
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from keytrail.events.durable import outdate

Matrix = npt.NDArray[np.float32]


_HASH_LINE = 33  # 32 hex digits and a newline
#: rows this process saved and still holds in memory before it maps them instead
REMAP_ROWS = 1024
#: Where the caches live, relative to a store's directory.
VECTORS_DIR = Path("cache") / "vectors"
#: `record` writes the manifest here first, then renames it over manifest.json
MANIFEST_TEMP = "manifest.tmp"
#: `_dropped`'s row for a text dropped before the files were made anew (`_start_over`), until
#: the new files are first read or written (`_bound_dropped`)
_UNTIL_READ = 2**62
#: a hash line a forget's purge erased (see `VectorCache.purge`)
_ERASED_LINE = "-" * (_HASH_LINE - 1)
#: erased rows a purge reads at a time to find those still holding a vector
_CHECK_ROWS = 4096


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _safe(fingerprint: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", fingerprint)


def folder_name(fingerprint: str) -> str:
    """The name of the folder under VECTORS_DIR that holds `fingerprint`'s cache."""
    return _safe(fingerprint)


@dataclass(frozen=True)
class Manifest:
    """What a fingerprint's cache covers: every label and content of events up to `seq`."""

    fingerprint: str
    dim: int
    store_id: str
    seq: int


class VectorCache:
    """text hash -> unit vector, for one model fingerprint."""

    def __init__(self, directory: Path | None, fingerprint: str, dim: int) -> None:
        self.fingerprint = fingerprint
        self.dim = dim
        self.dir = directory / _safe(fingerprint) if directory is not None else None
        # As strings: built once, not per write (pathlib joins cost more than the syscalls).
        self._hashes_path = "" if self.dir is None else os.path.join(self.dir, "hashes.txt")
        self._vectors_path = "" if self.dir is None else os.path.join(self.dir, "vectors.f32")
        #: digest -> row, built on the first lookup (`_rows`): a command that never looks a
        #: row up (`embed status`, a key-graph query) does not pay ~30 ms per 100,000 rows for it
        self._index: dict[str, int] | None = None
        #: the hash lines of rows [0, _persisted) while `_index` is not built yet
        self._lines: list[str] = []
        #: rows [0, _mapped): the vectors file, mapped read-only
        self._disk: Matrix = np.zeros((0, dim), dtype=np.float32)
        self._mapped = 0
        #: rows [_mapped, _count): in memory, unsaved ones (`_pending`) last
        self._mem: Matrix = np.zeros((0, dim), dtype=np.float32)
        self._count = 0
        self._persisted = 0  # rows already on disk
        self._pending: list[str] = []
        #: digest -> highest saved row `forget_saved` dropped: a refresh re-reading the hash
        #: lines before the forget's purge dashes them must not index those rows again
        self._dropped: dict[str, int] = {}
        #: (device, inode) of the vectors file our persisted rows are in, and the hash line of
        #: the last of them: a cache deleted (and maybe made anew) under us shows in either
        self._file: tuple[int, int] | None = None
        self._last_line = ""
        self.refresh()

    def __len__(self) -> int:
        return self._count

    def __contains__(self, digest: str) -> bool:
        return digest in self._rows

    @property
    def _rows(self) -> dict[str, int]:
        """digest -> row of every row held (saved or not), indexed on first use."""
        index = self._index
        if index is None:
            # As a refresh at a time would have left it: a later row of a text wins, and a
            # text `forget_saved` dropped is not read from the rows it had (see `refresh`).
            index = dict(zip(self._lines, range(len(self._lines)), strict=True))
            self._unread_dropped(index)
            self._index, self._lines = index, []
        return index

    def _bound_dropped(self, known: int) -> None:
        """Bound the drops `_start_over` left unbounded by the `known` rows the new files hold
        when first read or written: a row of the text among them may be one a purge has yet
        to erase, but one added after is of the text told again, by a process that folded the
        forget. Left unbounded, the text was embedded again, and another row of it saved, at
        every write of this process after it read another's rows."""
        if _UNTIL_READ in self._dropped.values():
            self._dropped = {
                digest: known - 1 if row == _UNTIL_READ else row
                for digest, row in self._dropped.items()
                if row != _UNTIL_READ or known
            }

    def _unread_dropped(self, rows: dict[str, int]) -> None:
        """Take out of `rows` each text `forget_saved` dropped where its row is one it had."""
        for digest, dropped in self._dropped.items():
            if rows.get(digest, -1) <= dropped:
                rows.pop(digest, None)

    def refresh(self) -> None:
        """Load rows other processes appended since the last look."""
        if self.dir is None:
            return
        row_bytes = 4 * self.dim
        try:
            # One stat answers the usual question (nobody appended) without opening both files.
            st = os.stat(self._vectors_path)
        except FileNotFoundError:
            st = None
        if self._persisted and (
            st is None
            or (st.st_dev, st.st_ino) != self._file
            or st.st_size < self._persisted * row_bytes
        ):
            self._start_over()
        if st is None or st.st_size // row_bytes <= self._persisted:
            return
        try:
            with open(self._hashes_path, "rb") as hf, open(self._vectors_path, "rb") as vf:
                hst, vst = os.fstat(hf.fileno()), os.fstat(vf.fileno())
                if not (_named(hst, self._hashes_path) and _named(vst, self._vectors_path)):
                    # Deleted and made anew between the two opens (unlocked): the old hash
                    # lines would vouch for new rows, which a writer may cut (a SIGBUS when
                    # touched). Both still named so, held open: one pair. The next look loads.
                    return
                rows_on_disk = vst.st_size // row_bytes
                # Only the lines past ours, from our last one on (lines are of one length): it
                # must still be ours, or the files were made anew. Re-reading every line made
                # each row another process added cost a read of the whole file (57 ms at
                # 100,000 rows) for this one's next write or embed.
                first = max(self._persisted - 1, 0)
                hf.seek(first * _HASH_LINE)
                hashes = _lines(hf.read(max(hst.st_size - first * _HASH_LINE, 0)))
                if self._persisted:
                    if hashes and self._still_ours(hashes[0]):
                        first, hashes = self._persisted, hashes[1:]
                    else:
                        self._start_over()  # same inode number, other rows: made anew
                        first = 0
                        hf.seek(0)
                        hashes = _lines(hf.read(hst.st_size))
                if rows_on_disk <= self._persisted:
                    return
                valid = min(first + len(hashes), rows_on_disk)
                if valid <= self._persisted:
                    return
                # Rows another process added after our own unsaved ones would shift indexes:
                # re-base (the unsaved ones are copied out before the mapping changes).
                pending = [(h, self._row(self._rows[h]).copy()) for h in self._pending]
                self._map(vf, valid)
        except FileNotFoundError:
            return
        self._count = self._persisted = valid
        self._bound_dropped(valid)
        self._file, self._last_line = (vst.st_dev, vst.st_ino), hashes[valid - first - 1]
        if self._index is None:  # nothing looked up yet, so nothing unsaved: index on a lookup
            self._lines += hashes[: valid - first]
            return
        rows = self._index
        for digest in self._pending:
            rows.pop(digest, None)
        rows.update(zip(hashes[: valid - first], range(first, valid), strict=True))
        self._unread_dropped(rows)
        self._pending = []
        for digest, vector in pending:
            if digest not in rows:
                self._put(digest, vector)

    def _same_files(self) -> bool:
        """Whether the hash line of our last persisted row is still ours (under the lock)."""
        try:
            fd = os.open(self._hashes_path, os.O_RDONLY)  # no file object: this runs every write
        except FileNotFoundError:
            return False
        try:
            line = os.pread(fd, _HASH_LINE - 1, (self._persisted - 1) * _HASH_LINE)
        finally:
            os.close(fd)
        return self._still_ours(line.decode("latin-1"))

    def _still_ours(self, line: str) -> bool:
        """Whether `line`, read where the hash line of our last persisted row is, shows these
        are still the files we read: it is that line, or dashes where a forget we folded
        purged it (taken for files made anew, the next look read every hash line again, 57 ms
        at 100,000 rows, and the texts we dropped went unbounded)."""
        return line == self._last_line or (
            line == _ERASED_LINE and self._dropped.get(self._last_line, -1) >= self._persisted - 1
        )

    def _map(self, vectors_file: BinaryIO, rows: int) -> None:
        """Rows [0, rows) become the first `rows` rows of `vectors_file`, mapped; no row is held
        in memory after them."""
        self._disk = (
            np.memmap(vectors_file, dtype=np.float32, mode="r", shape=(rows, self.dim))
            if rows
            else np.zeros((0, self.dim), dtype=np.float32)
        )
        self._mapped = rows
        self._mem = np.zeros((0, self.dim), dtype=np.float32)

    def _remap(self) -> None:
        """Map every saved row (under the store lock, after a flush), so the rows this process
        wrote stop taking memory; unsaved rows stay in memory."""
        try:
            with open(self._vectors_path, "rb") as vf:
                st = os.fstat(vf.fileno())
                if (st.st_dev, st.st_ino) != self._file:
                    return
                held = [(h, self._row(self._rows[h]).copy()) for h in self._pending]
                self._map(vf, self._persisted)
        except FileNotFoundError:
            return
        self._count = self._persisted
        for digest, vector in held:
            self._count += 1
            self._store_row(self._rows[digest], vector)

    def _row(self, row: int) -> npt.NDArray[np.float32]:
        mapped = self._mapped
        vector: npt.NDArray[np.float32] = (
            self._disk[row] if row < mapped else self._mem[row - mapped]
        )
        return vector

    def _take(self, rows: list[int]) -> Matrix:
        """The vectors of `rows`, as one new matrix."""
        mapped = self._mapped
        if not rows or max(rows) < mapped:
            return np.asarray(self._disk[rows])
        if min(rows) >= mapped:
            return self._mem[[r - mapped for r in rows]]
        index = np.asarray(rows)
        out = np.empty((len(index), self.dim), dtype=np.float32)
        low = index < mapped
        out[low] = self._disk[index[low]]
        out[~low] = self._mem[index[~low] - mapped]
        return out

    def _store_row(self, row: int, vector: npt.NDArray[np.float32]) -> None:
        """Put `vector` at row `row` (at or past `_mapped`), growing the memory part."""
        at = row - self._mapped
        if at >= len(self._mem):
            grown = np.zeros((max(64, 2 * len(self._mem), at + 1), self.dim), dtype=np.float32)
            grown[: len(self._mem)] = self._mem
            self._mem = grown
        self._mem[at] = vector

    def _start_over(self) -> None:
        """The files our persisted rows were in are gone, cut or made anew (the cache was
        deleted; another process may have started it again): their row numbers mean nothing
        now. Keep only our unsaved rows, to be written after whatever the files hold; the
        vectors we had saved are embedded again when next needed."""
        held = [(d, self._row(self._rows[d]).copy()) for d in self._pending]
        self._index, self._lines, self._pending = {}, [], []
        self._file, self._last_line = None, ""
        # Row numbers in new files say nothing: every row of a dropped text they hold when
        # first read stays unread (see `_bound_dropped`).
        self._dropped = dict.fromkeys(self._dropped, _UNTIL_READ)
        self._disk = self._mem = np.zeros((0, self.dim), dtype=np.float32)
        self._mapped = self._count = self._persisted = 0
        for digest, vector in held:
            self._put(digest, vector)

    def _put(self, digest: str, vector: npt.NDArray[np.float32]) -> None:
        self._store_row(self._count, vector)
        self._rows[digest] = self._count
        self._count += 1
        self._pending.append(digest)

    def get(self, digest: str) -> npt.NDArray[np.float32] | None:
        row = self._rows.get(digest)
        return None if row is None else self._row(row)

    def put_many(self, digests: list[str], vectors: Matrix) -> None:
        for digest, vector in zip(digests, vectors, strict=True):
            if digest not in self._rows:
                self._put(digest, vector)

    def missing(self, digests: list[str]) -> list[int]:
        """Positions in `digests` of those without a row."""
        rows = self._rows
        return [i for i, d in enumerate(digests) if d not in rows]

    def rows_if_all(self, digests: list[str]) -> Matrix | None:
        """The vectors of `digests` as one matrix, or None if any has no row: one pass over
        them where `missing` then `rows` take two (a hub's read_key with a query asks for
        100,000 at a time)."""
        try:
            # itemgetter looks them all up in C; one digest comes back bare, not as a tuple.
            found = operator.itemgetter(*digests)(self._rows)
        except KeyError:
            return None
        return self._take(list(found) if len(digests) > 1 else [found])

    def rows(self, digests: list[str]) -> Matrix:
        """The vectors of `digests` (all must be present), as one matrix."""
        rows = self._rows
        return self._take([rows[d] for d in digests])

    @property
    def manifest_path(self) -> Path | None:
        return None if self.dir is None else self.dir / "manifest.json"

    def manifest(self) -> Manifest | None:
        """The coverage last recorded, or None (never built, from another store, or damaged)."""
        path = self.manifest_path
        if path is None:
            return None
        try:
            found = Manifest(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None
        if found.fingerprint != self.fingerprint or found.dim != self.dim:
            return None
        return found

    def record(self, store_id: str, seq: int) -> None:
        """Record that every label and content up to `seq` has a row (rows flushed first)."""
        path = self.manifest_path
        if path is None:
            return
        self.flush()
        current = self.manifest()
        if current is not None and current.store_id == store_id and current.seq >= seq:
            # Another builder, done after this one started, already recorded more: rows only
            # grow, so its claim holds, and writing ours over it would make the next open
            # check a stretch of log for nothing.
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        manifest = Manifest(fingerprint=self.fingerprint, dim=self.dim, store_id=store_id, seq=seq)
        tmp = path.with_name(MANIFEST_TEMP)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(asdict(manifest), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @property
    def unsaved(self) -> int:
        """How many rows are held in memory only, for `flush` to append."""
        return len(self._pending) if self.dir is not None else 0

    def flush(self) -> None:
        """Append unsaved rows to disk. Call only holding the store lock."""
        if self.dir is None or not self._pending:
            return
        # Rows other processes appended since our last look go first: writing at a stale
        # `_persisted` would truncate them away and shift every later row onto the wrong text.
        self.refresh()
        if self._persisted and not self._same_files():
            self._start_over()
            self.refresh()
        if not self._pending:
            return
        self._bound_dropped(self._persisted)
        rows = self._mem[self._persisted - self._mapped : self._count - self._mapped]
        # Anything past our rows is a torn row or line left by a crash: written over. No reader
        # maps it (touching a page past the file's end would be a SIGBUS): under the lock,
        # `_persisted` is now exactly the rows with a vector and a whole hash line (refresh takes
        # at least those; its size and last-line checks at most). Hash lines go after their rows,
        # so they never outnumber them, and this cut (to the lines) never shrinks that count;
        # a reader maps at most that count of one pair of files, so nothing it maps is cut. A
        # write that fails or is killed (ENOSPC, EIO, kill -9) only adds rows or a torn line no
        # one counts; a purge writes in place; deleting the cache (a drop, `rm -r`) unlinks the
        # files, whose old inodes a mapping keeps; a reembed writes another model's folder.
        self._file = _write_at(
            self.dir,
            self._vectors_path,
            self._persisted * 4 * self.dim,
            np.ascontiguousarray(rows, dtype=np.float32).tobytes(),
        )
        _write_at(
            self.dir,
            self._hashes_path,
            self._persisted * _HASH_LINE,
            "".join(f"{d}\n" for d in self._pending).encode(),
        )
        self._last_line = self._pending[-1]
        self._persisted = self._count
        self._pending = []
        if self._count - self._mapped >= REMAP_ROWS:
            self._remap()

    def forget_saved(self, digest: str) -> None:
        """Stop reading the saved row of `digest`, whose text a forget (maybe another
        process's) is erasing: its purge writes zeros there, which a mapped row would show. A
        memory still holding the same text has it embedded again when next needed. An unsaved
        row stays, for `discard_unsaved`."""
        # Not looked up yet (no index): nothing unsaved, and the index drops it when built (a
        # store that ever forgot must not build it at open for this).
        if self._index is not None:
            row = self._rows.get(digest)
            if row is not None and row < self._persisted:
                del self._rows[digest]
        # Every row the files hold now, not only those we read: another process may have
        # saved one since our last look, which a refresh before the purge dashes its line
        # would read. The forget's purge erases them all (its process holds the lock from its
        # log line to the purge's end: nothing is appended between); a row added after is of
        # the text told again, and read.
        held = max(self._persisted, self._rows_on_disk())
        if held:
            self._dropped[digest] = max(held - 1, self._dropped.get(digest, -1))

    def _rows_on_disk(self) -> int:
        """How many whole rows (a vector and its hash line) the files hold now."""
        if self.dir is None:
            return 0
        try:
            lines = os.stat(self._hashes_path).st_size // _HASH_LINE
            return min(lines, os.stat(self._vectors_path).st_size // (4 * self.dim))
        except FileNotFoundError:
            return 0

    def discard_unsaved(self, digests: set[str]) -> None:
        """Drop the unsaved rows of `digests` (texts forgotten meanwhile): never written, they
        need no erasing."""
        if not any(d in digests for d in self._pending):
            return
        kept = [(d, self._row(self._rows[d]).copy()) for d in self._pending if d not in digests]
        for digest in self._pending:
            del self._rows[digest]
        self._count, self._pending = self._persisted, []
        for digest, vector in kept:
            self._put(digest, vector)

    def purge(self, digests: set[str]) -> int:
        """Erase the rows of `digests` from disk (forgetting). Call only holding the store lock.

        Rows are overwritten in place, never removed: a hash line becomes dashes (no text hashes
        to that) and its vector zeros, so row numbers other processes hold stay right. Hashes go
        first, so a crash between leaves an orphaned vector no text maps to; a later purge zeroes
        the vector of every dashed row, finishing the job. Returns the rows erased.
        """
        if self.dir is None:
            return 0
        self.flush()  # our unsaved rows get row numbers first, then are erased like the rest
        hashes_path, vectors_path = self.dir / "hashes.txt", self.dir / "vectors.f32"
        try:
            hashes = hashes_path.read_bytes()
            vf = open(vectors_path, "r+b")  # noqa: SIM115
        except FileNotFoundError:
            return 0
        erased = _ERASED_LINE.encode()
        complete = len(hashes) // _HASH_LINE  # a torn last line is not a row

        def rows_of(line: bytes) -> set[int]:
            found, at = set(), hashes.find(line)
            while at >= 0:
                if at % _HASH_LINE == 0 and at // _HASH_LINE < complete:
                    found.add(at // _HASH_LINE)
                at = hashes.find(line, at + 1)
            return found

        with vf, open(hashes_path, "r+b") as hf:
            rows = set().union(*(rows_of(d.encode() + b"\n") for d in digests))
            # Same sizes after: each file rewritten gets a later mtime (see `outdate`).
            hashes_mtime = os.fstat(hf.fileno()).st_mtime_ns
            for row in sorted(rows):
                hf.seek(row * _HASH_LINE)
                hf.write(erased)
            hf.flush()
            if rows:
                outdate(hf.fileno(), hashes_mtime)
            os.fsync(hf.fileno())
            row_bytes = 4 * self.dim
            vst = os.fstat(vf.fileno())
            rows_on_disk = vst.st_size // row_bytes
            # This forget's rows, and those an earlier purge dashed (killed before it zeroed
            # them, maybe): found and checked in numpy. A read and a compare per erased row
            # made every forget slower the more had been forgotten (137-187 ms at 30,000 to
            # 50,000 erased rows of 384 dimensions, all under the lock).
            lines = np.frombuffer(hashes, np.uint8, complete * _HASH_LINE).reshape(-1, _HASH_LINE)
            dashed = np.flatnonzero((lines[:, :-1] == erased[0]).all(axis=1))
            check = np.union1d(dashed, np.fromiter(rows, np.int64, len(rows)))
            check = check[check < rows_on_disk]
            zeros = bytes(row_bytes)
            zeroed = False
            if len(check):
                # Bits, not floats: a -0.0 is not a zero row.
                held = np.memmap(vf, dtype=np.uint32, mode="r", shape=(rows_on_disk, self.dim))
                for start in range(0, len(check), _CHECK_ROWS):
                    part = check[start : start + _CHECK_ROWS]
                    for row in part[held[part].any(axis=1)].tolist():
                        vf.seek(row * row_bytes)
                        vf.write(zeros)
                        zeroed = True
                del held
            vf.flush()
            if zeroed:
                outdate(vf.fileno(), vst.st_mtime_ns)
            os.fsync(vf.fileno())
        for digest in digests:
            self._dropped.pop(digest, None)  # every row of it on disk is erased now
            if digest in self._rows:
                row = self._rows.pop(digest)
                if row >= self._mapped:  # a mapped row reads the zeros just written
                    self._mem[row - self._mapped] = 0.0
        return len(rows)


def _lines(data: bytes) -> list[str]:
    """The whole hash lines of `data` (a torn last one left out), as strings: decoded at once,
    not line by line (which took ~12 of the ~60 ms of indexing 100,000 rows). Latin-1 decodes
    any byte, so a damaged line (which `verify` reports) is a key no digest matches, not an
    error that stops every read of a vector."""
    return data.decode("latin-1").split("\n")[:-1]


def _named(st: os.stat_result, path: str) -> bool:
    """Whether `path` names the file `st` was taken of."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _write_at(directory: Path, path: str, offset: int, data: bytes) -> tuple[int, int]:
    """Make file `path` (in `directory`) exactly its first `offset` bytes followed by `data`.
    Returns the file's (device, inode)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        st = os.fstat(fd)
        if st.st_size != offset:
            os.ftruncate(fd, offset)
        view, written = memoryview(data), 0
        while written < len(data):
            written += os.pwrite(fd, view[written:], offset + written)
    except OSError as exc:
        if exc.filename is None:  # a write through the descriptor names no file: say which
            exc.filename = path
        raise
    finally:
        os.close(fd)
    return st.st_dev, st.st_ino


def cached_fingerprints(directory: Path) -> list[tuple[str, int, int | None]]:
    """(fingerprint, rows, recorded seq) of every cache under `directory`, by name.

    Rows are those holding a vector: a forget's erased rows (dashed hash lines) are not counted.
    A cache that was never recorded (or whose manifest is damaged) shows its folder name and no
    seq.
    """
    found: list[tuple[str, int, int | None]] = []
    if not directory.is_dir():
        return found
    erased = _ERASED_LINE.encode() + b"\n"
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        try:
            hashes = (sub / "hashes.txt").read_bytes()
        except OSError:
            hashes = b""
        complete = hashes[: len(hashes) // _HASH_LINE * _HASH_LINE]  # a torn last line: no row
        rows = len(complete) // _HASH_LINE - complete.count(erased)
        try:
            raw = json.loads((sub / "manifest.json").read_text(encoding="utf-8"))
            found.append((str(raw["fingerprint"]), rows, int(raw["seq"])))
        except (OSError, ValueError, KeyError, TypeError):
            found.append((sub.name, rows, None))
    return found


@dataclass(frozen=True)
class CacheCheck:
    """What one fingerprint's cache holds on disk, as `check_cache` found it."""

    manifest: Manifest | None
    #: the text hash of every valid row (erased rows left out)
    digests: set[str]
    rows: int
    erased: int
    problems: list[str]
    #: erased rows whose vector is not zeroed yet, said as a problem: what a purge killed
    #: between its two steps leaves (the next purge zeroes them), so not a problem while a
    #: forget's purge is pending
    unzeroed: list[str] = field(default_factory=list)


_HEX_HASH = re.compile(rb"[0-9a-f]{32}")


def check_cache(folder: Path) -> CacheCheck | None:
    """Read one fingerprint's cache without changing it and check each row against what it
    should be: a hash line of 32 hex digits with a unit (or zero) vector, or an erased line
    (dashes, a forgotten text) with a zero vector. None when the row size cannot be told (no
    manifest and no `_<dim>` at the end of the folder name)."""
    manifest: Manifest | None
    try:
        manifest = Manifest(**json.loads((folder / "manifest.json").read_text(encoding="utf-8")))
    except FileNotFoundError:
        manifest = None
    except (OSError, ValueError, TypeError):
        return CacheCheck(None, set(), 0, 0, ["manifest.json is damaged"])
    suffix = folder.name.rsplit("_", 1)[-1]
    dim = manifest.dim if manifest is not None else int(suffix) if suffix.isdigit() else 0
    if dim <= 0:
        return None
    try:
        hashes = (folder / "hashes.txt").read_bytes()
    except FileNotFoundError:
        hashes = b""
    try:
        data = np.fromfile(folder / "vectors.f32", dtype=np.float32)
    except FileNotFoundError:
        data = np.zeros(0, dtype=np.float32)
    # A crash can leave either file longer than the other: the shorter decides (as on load).
    rows = min(len(hashes) // _HASH_LINE, len(data) // dim)
    lines = hashes[: rows * _HASH_LINE].split(b"\n")[:rows]
    norms = np.linalg.norm(data[: rows * dim].reshape(rows, dim), axis=1)
    erased_line = _ERASED_LINE.encode()
    digests: set[str] = set()
    malformed, not_unit, not_zero, erased = [], [], [], 0
    for row, line in enumerate(lines):
        if line == erased_line:
            erased += 1
            if norms[row] != 0.0:
                not_zero.append(row)
        elif _HEX_HASH.fullmatch(line) is None:
            malformed.append(row)
        else:
            digests.add(line.decode())
            norm = float(norms[row])
            # Zero is a text with nothing to embed (hashing "!!!"); NaN fails both tests.
            if not (norm == 0.0 or abs(norm - 1.0) <= 1e-3):
                not_unit.append(row)
    problems, unzeroed = [
        [
            f"{len(found)} {what[len(found) > 1]} (row{'s' * (len(found) > 1)} "
            f"{', '.join(map(str, found[:3]))}{', ...' * (len(found) > 3)})"
            for found, what in kinds
            if found
        ]
        for kinds in (  # each (one, more)
            (
                (malformed, ("malformed hash line", "malformed hash lines")),
                (not_unit, ("row that is not a unit vector", "rows that are not unit vectors")),
            ),
            (
                (
                    not_zero,
                    (
                        "erased row (a forgotten text) whose vector was not zeroed",
                        "erased rows (forgotten texts) whose vector was not zeroed",
                    ),
                ),
            ),
        )
    ]
    return CacheCheck(manifest, digests, rows, erased, problems, unzeroed)


class VectorSet:
    """An in-memory matrix of rows labelled by an id (several rows may share one id)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: list[str] = []
        self._matrix: Matrix = np.zeros((0, dim), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def matrix(self) -> Matrix:
        return self._matrix[: len(self.ids)]

    def add(self, ids: list[str], vectors: Matrix) -> None:
        if not ids:
            return
        need = len(self.ids) + len(ids)
        if need > len(self._matrix):
            grown = np.zeros((max(need, 2 * len(self._matrix), 64), self.dim), dtype=np.float32)
            grown[: len(self.ids)] = self.matrix
            self._matrix = grown
        self._matrix[len(self.ids) : need] = vectors
        self.ids.extend(ids)

    def zero(self, row_id: str) -> None:
        """Zero the rows of `row_id`, keeping them in place."""
        rows = [i for i, each in enumerate(self.ids) if each == row_id]
        if rows:
            self._matrix[rows] = 0.0

    def drop(self, ids: Collection[str]) -> int:
        """Remove the rows of `ids`, the others keeping their order. How many went."""
        keep = [i for i, row_id in enumerate(self.ids) if row_id not in ids]
        dropped = len(self.ids) - len(keep)
        if dropped:
            self._matrix = self.matrix[keep]
            self.ids = [self.ids[i] for i in keep]
        return dropped

    def scores(self, query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Cosine of every row with a unit `query` (rows are unit vectors)."""
        result: npt.NDArray[np.float32] = self.matrix @ query
        return result
