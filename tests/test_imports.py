"""Imports point one way: server -> core -> projections -> events; only server imports mcp."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("events", "projections", "core", "server")
#: layer -> the keytrail layers it may import
ALLOWED: dict[str, set[str]] = {
    "events": {"events"},
    "projections": {"events", "projections"},
    "core": {"events", "projections", "core"},
    "server": {"events", "projections", "core", "server"},
}


def module_name(layer: str, path: Path) -> str:
    parts = ["keytrail", layer, *path.with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) for every import anywhere in the file, relative ones resolved."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
                if not node.module:  # from . import x, y: each name may be a module
                    out += [(node.lineno, f"{prefix}.{a.name}") for a in node.names]
                    continue
            else:
                target = node.module or ""
            out.append((node.lineno, target))
    return out


def violations(layer: str, source: str, module: str, is_package: bool = False) -> list[str]:
    problems = []
    for line, target in imported_modules(source, module, is_package):
        top = target.split(".")[0]
        parts = target.split(".")
        if top in LAYERS:
            problems.append(f"line {line}: bare `{target}` (import keytrail.{target})")
        elif top == "keytrail":
            if len(parts) == 1:
                # the package root (version string): fine above events, events needs nothing
                if layer == "events":
                    problems.append(f"line {line}: events imports keytrail")
            elif parts[1] not in ALLOWED[layer]:
                problems.append(f"line {line}: {layer} imports {target}")
        elif top == "mcp" and layer != "server":
            problems.append(f"line {line}: {layer} imports mcp")
    return problems


def source_files() -> list[tuple[str, Path]]:
    files = [(layer, p) for layer in LAYERS for p in sorted((REPO / layer).rglob("*.py"))]
    assert files, "no source found"
    return files


@pytest.mark.parametrize(
    "layer, path", source_files(), ids=[str(p.relative_to(REPO)) for _, p in source_files()]
)
def test_imports_point_one_way(layer: str, path: Path) -> None:
    rel = path.relative_to(REPO / layer)
    module = module_name(layer, rel)
    problems = violations(
        layer, path.read_text(encoding="utf-8"), module, rel.name == "__init__.py"
    )
    assert not problems, f"{path.relative_to(REPO)}: " + "; ".join(problems)


def test_every_layer_has_code() -> None:
    for layer in ("events", "projections", "core"):
        assert list((REPO / layer).glob("*.py")), layer


@pytest.mark.parametrize(
    "layer, module, code, bad",
    [
        ("events", "keytrail.events.log", "from keytrail.projections import fold", True),
        ("events", "keytrail.events.log", "from ..core import Store", True),
        ("events", "keytrail.events.log", "from .codec import encode_line", False),
        ("events", "keytrail.events.log", "import keytrail", True),
        ("events", "keytrail.events.log", "def f():\n    import keytrail.core.store", True),
        (
            "projections",
            "keytrail.projections.keygraph",
            "from keytrail.events import Event",
            False,
        ),
        ("projections", "keytrail.projections.keygraph", "from keytrail.core import config", True),
        ("projections", "keytrail.projections.keygraph", "from .. import server", True),
        ("projections", "keytrail.projections", "from .keygraph import fold", False),
        ("projections", "keytrail.projections", "from ..core import x", True),
        ("core", "keytrail.core.store", "from ..projections import fold", False),
        ("core", "keytrail.core.store", "from ..server.cli import main", True),
        (
            "core",
            "keytrail.core.store",
            "if TYPE_CHECKING:\n    from keytrail.server import x",
            True,
        ),
        ("core", "keytrail.core.store", "import mcp.server.fastmcp", True),
        ("core", "keytrail.core.store", "from mcp import types", True),
        ("core", "keytrail.core.store", "import events.log", True),
        ("server", "keytrail.server.cli", "from mcp.server.fastmcp import FastMCP", False),
        ("server", "keytrail.server.cli", "from ..core import Store\nimport keytrail", False),
    ],
)
def test_the_checker_catches_wrong_arrows(layer: str, module: str, code: str, bad: bool) -> None:
    assert bool(violations(layer, code, module, module.count(".") == 1)) is bad


#: Modules only some verbs use, which every command paid to import before it could even print
#: its help: the MCP SDK and the embedding libraries (serve, a real model) and the core modules
#: behind import/export, verify/rebuild and history/changes.
NOT_FOR_HELP = (
    "mcp",
    "fastembed",
    "openai",
    "keytrail.core.importers",
    "keytrail.core.exporters",
    "keytrail.core.maintenance",
    "keytrail.core.history",
)


@pytest.mark.parametrize("argv", [["--help"], ["stats", "--help"], ["remember", "--help"]])
def test_help_does_not_import_what_only_some_verbs_use(argv: list[str]) -> None:
    run_help = (
        "import sys\n"
        "from keytrail.server.entry import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {NOT_FOR_HELP!r} if m in sys.modules), file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", run_help], capture_output=True, text=True, env=env, timeout=120
    )
    assert "usage: keytrail" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
