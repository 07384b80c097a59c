"""What every `keytrail` verb shares: settings from flags, opening the store, printing."""

import argparse
import json
import sys
from datetime import datetime
from typing import Any, TextIO

from keytrail.core import Settings, Store, StoreError, to_dict
from keytrail.core.config import parse_toolsets


def settings_from(args: argparse.Namespace) -> Settings:
    """KEYTRAIL_* variables, overridden by the flags that were given."""
    return Settings.from_env(
        home=args.home,
        embedder=args.embedder,
        model=args.model,
        model_path=args.model_path,
        default_namespace=args.namespace,
        toolsets=parse_toolsets(args.toolsets) if getattr(args, "toolsets", None) else None,
        kg_namespace=getattr(args, "kg_namespace", None),
    )


def open_store(args: argparse.Namespace, *, build_projection: bool = True, **kwargs: Any) -> Store:
    """Open the store; unless told not to, bring its embedding projection up to the log."""
    settings = settings_from(args)
    try:
        store = Store(settings, **kwargs)
    except OSError as exc:
        raise StoreError(f"cannot open store at {settings.home}: {exc}") from exc
    if build_projection:
        from .embed_cli import ensure_projection  # it builds on this module

        try:
            ensure_projection(store)
        except BaseException:
            store.close()
            raise
    return store


def emit_json(value: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(to_dict(value), ensure_ascii=False, indent=2) + "\n")


def short_time(at: datetime | str | None) -> str:
    if at is None:
        return "-"
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at.strftime("%Y-%m-%d %H:%M:%S")


def preview(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
