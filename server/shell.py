"""What every `keytrail` verb shares: settings from flags, opening the store, printing."""

import argparse
import io
import ipaddress
import json
import os
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

from keytrail.core import InvalidInput, Settings, Store, StoreError, require_log, to_dict
from keytrail.core.config import parse_toolsets
from keytrail.core.queries import clipped
from keytrail.core.validation import (
    BIDI_CONTROLS,
    PATH_CHARS,
    floating,
    integer,
    os_error_text,
    quoted,
)
from keytrail.core.validation import counted as counted  # the verbs' count wording, from core

from .progress import end_open_line

#: Help of the paging flags; the limit is the store's (KEYTRAIL_MAX_PAGE), checked by core.
PAGE_RANGE = "(default {default}, or KEYTRAIL_MAX_PAGE if lower; at most KEYTRAIL_MAX_PAGE, 200)"
PAGE_HELP = "how many to show " + PAGE_RANGE
OFFSET_HELP = "how many to skip first (default 0)"
TOP_K_HELP = (
    "how many to return (default 10, or KEYTRAIL_MAX_TOP_K if lower; "
    "at most KEYTRAIL_MAX_TOP_K, 100)"
)


T = TypeVar("T")


def integer_flag(raw: str) -> int:
    """The value of a flag that takes an integer (its argparse `type`): ASCII digits, as a
    KEYTRAIL_* variable's (see validation.integer); argparse names the flag."""
    return _flag_value(integer, raw)


def float_flag(raw: str) -> float:
    """The value of a flag that takes a decimal number (its argparse `type`): ASCII digits, a
    point and an exponent, as a KEYTRAIL_* variable's (see validation.floating)."""
    return _flag_value(floating, raw)


def _flag_value(parse: Callable[[str, str], T], raw: str) -> T:
    try:
        return parse("value", raw)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(exc.message.removeprefix("value: ")) from None


@dataclass(frozen=True)
class AsTyped:
    """The argparse `type` of a setting's flag: `parse` (integer_flag, float_flag) checks the
    value, which is kept as typed, for the flag sets its KEYTRAIL_* variable to it: an error
    then quotes what was typed (`1000`), not what Python writes of the number (`1000.0`)."""

    parse: Callable[[str], object]

    def __call__(self, raw: str) -> str:
        self.parse(raw)
        return raw


#: The exit status of a verb stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports it.
EXIT_INTERRUPTED = 130


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 bracketed or not) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: The verbs a person runs for a long embedding job and waits on: unless KEYTRAIL_EMBED_THREADS
#: says otherwise, their model runs on every core (every other verb, `serve` included, on one).
BULK_EMBED_VERBS = ("rebuild", "reembed", "import")


def settings_from(args: argparse.Namespace) -> Settings:
    """KEYTRAIL_* variables, overridden by the flags that were given."""
    bulk = getattr(args, "command", None) in BULK_EMBED_VERBS
    settings = Settings.from_env(
        embed_threads=0 if bulk and not os.environ.get("KEYTRAIL_EMBED_THREADS") else None,
        home=args.home,
        embedder=args.embedder,
        model=args.model,
        model_path=args.model_path,
        default_namespace=args.namespace,
        # An empty --toolsets is refused like an empty --namespace, not taken as no flag.
        toolsets=(
            parse_toolsets(args.toolsets, "--toolsets")
            if getattr(args, "toolsets", None) is not None
            else None
        ),
        kg_namespace=getattr(args, "kg_namespace", None),
    )
    path = settings.model_path
    if settings.embedder == "fastembed" and path and not Path(path).expanduser().is_dir():
        # Else the store was made and serve started, to fail every call at the model's load.
        raise InvalidInput(
            "--model-path" if args.model_path else "KEYTRAIL_EMBED_MODEL_PATH",
            f"{quoted(path, PATH_CHARS)} is no directory (the local copy of the embedding model)",
        )
    return settings


#: The verbs that make a store when their home holds none: each can do its job on an empty
#: store. Every other verb needs an existing one and refuses a home without it (NoStore), so a
#: mistyped --home or KEYTRAIL_HOME is an error, not an empty store made there and answered from.
CREATING_VERBS = ("serve", "remember", "import")


def creates_store(args: argparse.Namespace) -> bool:
    return getattr(args, "command", None) in CREATING_VERBS


def existing_home(args: argparse.Namespace) -> Path:
    """The home of a verb that reads the log directly; NoStore if it holds no store."""
    return require_log(Settings.from_env(home=args.home).home)


#: The verbs that read vectors: opening the store for one first brings the embedding
#: projection up to the log, with a bar (the others never load the model, so `keytrail stats`
#: after a switch of model neither waits for a build nor needs the model at hand).
VECTOR_VERBS = ("remember", "correct", "recall", "recall-memories", "import", "rebuild")


def reads_vectors(args: argparse.Namespace) -> bool:
    command = getattr(args, "command", None)
    return command in VECTOR_VERBS or (command == "read-key" and bool(args.query))


def open_store(
    args: argparse.Namespace, *, build_projection: bool | None = None, **kwargs: Any
) -> Store:
    """Open the store (made first only for CREATING_VERBS) and, for a verb that reads vectors
    (or when told to), bring its embedding projection up to the log."""
    if build_projection is None:
        build_projection = reads_vectors(args)
    settings = settings_from(args)
    try:
        store = Store(settings, create=creates_store(args), **kwargs)
    except OSError as exc:
        where = quoted(str(settings.home), PATH_CHARS)
        raise StoreError(f"cannot open store at {where}: {os_error_text(exc)}") from exc
    if build_projection:
        from .embed_cli import ensure_projection  # it builds on this module

        try:
            ensure_projection(store)
        except BaseException:
            store.close()
            raise
    return store


def set_up_stdout(machine_output: bool) -> None:
    """Make stdout fit what a verb prints on it, whatever the locale's encoding (a legacy
    locale, or Windows, where output redirected to a file is in the ANSI code page).

    JSON and an export are UTF-8 (RFC 8259; `keytrail import` reads UTF-8): in the locale's
    encoding, `export > backup` wrote a backup import refuses, or stopped on the first
    character the encoding lacks with a traceback. Text for a person stays in the terminal's
    encoding, with what it cannot show escaped (`\\u2615`) rather than a traceback.
    """
    stdout = sys.stdout
    if not isinstance(stdout, io.TextIOWrapper):  # replaced (a test's capture): leave it
        return
    if machine_output:
        stdout.reconfigure(encoding="utf-8", errors="strict")
    else:
        stdout.reconfigure(errors="backslashreplace")


def emit_json(value: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(to_dict(value), ensure_ascii=False, indent=2) + "\n")


def note_namespace_never_told(store: Store, args: argparse.Namespace) -> None:
    """On text output, one note on stderr when a read's --namespace names a namespace no memory
    was ever told in (a typo answers empty, as a namespace emptied does; export refuses it).
    The answer stands: an empty namespace is a valid question, and --json says nothing more."""
    if args.namespace is None or getattr(args, "json", False):
        return
    # The memories of the state, forgotten ones too, hold every namespace ever told; scanned
    # once, and only for a read given --namespace.
    told = {m.namespace for m in store.state.memories.values()}
    if args.namespace in told:
        return
    try:
        end_open_line(sys.stderr)  # after a bar drawn in place (`changes` scanning the log)
        print(
            f"note: no memory was ever told in namespace {args.namespace!r} "
            f"(namespaces: {', '.join(sorted(told)) or 'none'})",
            file=sys.stderr,
        )
    except OSError:
        pass  # said before the answer: a stderr no one reads must not cost the answer


def memories(count: int) -> str:
    """ "1 memory", "2 memories"."""
    return counted(count, "memory", "memories")


def short_time(at: datetime | str | None) -> str:
    if at is None:
        return "-"
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    # Not strftime("%Y"): the C library prints year 1 as "1", not "0001" (a valid_from or an
    # imported created_at may be that early).
    return f"{at.year:04d}-{at:%m-%d %H:%M:%S}"


#: Format characters, not control ones, yet printed raw they make the terminal show a line
#: other than the one stored (an override reverses what follows it): escaped as controls are.
_BIDI = frozenset(BIDI_CONTROLS)


def _escaped(text: str, keep: str = "") -> str:
    """`text` with its control characters (a terminal escape, a bell: a memory holds whatever
    an agent was told) and bidirectional controls shown escaped (`\\x1b`, `\\u202e`), not sent
    to the terminal to act on; those in `keep` stay as they are."""
    if text.isprintable():  # neither a control nor a format character in it
        return text
    return "".join(
        c.encode("unicode_escape").decode()
        if c not in keep and (unicodedata.category(c) == "Cc" or c in _BIDI)
        else c
        for c in text
    )


def shown_text(text: str) -> str:
    """A whole text for the terminal: its control characters escaped as in `preview`, but its
    line breaks and tabs kept, so a memory of several lines still reads as several lines."""
    return _escaped(text, keep="\n\t")


def shown_label(label: str) -> str:
    """A key label, alias or entity name for the terminal, escaped as a text is."""
    return _escaped(label)


def preview(text: str, width: int = 60, *, escape: bool = True) -> str:
    """`text` on one line of at most `width` characters. A control character left (a terminal
    escape, a bell: a memory holds whatever an agent was told) is shown escaped (`\\x1b`),
    not sent to the terminal to act on; `escape=False` for a caller that repr()s the preview."""
    flat = " ".join(text.split())
    if escape:
        flat = _escaped(flat)
    return clipped(flat, width)
