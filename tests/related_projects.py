"""Two workflow projects that name each other (`main` and `helper`), and a third that
does not name `main` back (`stranger`), written into a test's folder. `main` runs
`helper` through `ctx.related`; `helper` asks a question, writes its KV and values, and
reads its own configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAIN = "a1b2c3d4-0000-4000-8000-00000000000a"
HELPER = "a1b2c3d4-0000-4000-8000-00000000000b"
STRANGER = "a1b2c3d4-0000-4000-8000-00000000000c"
GHOST = "a1b2c3d4-0000-4000-8000-00000000000d"  # named, never written anywhere

MAIN_PY = """
def delegate(ctx):
    helper = ctx.related["helper"]
    before = helper.kv.get("last", "nobody")
    out = helper.run("greet", name=ctx.params["name"])
    return {
        "helperId": helper.id,
        "before": before,
        "child": out,
        "kv": helper.kv.get("last"),
        "value": helper.values.get("count"),
        "aliases": sorted(ctx.related),
    }


def probe(ctx):
    case = ctx.params["case"]
    related = ctx.related
    try:
        if case == "alias":
            related["nope"]
        elif case == "entrypoint":
            related["helper"].run("missing")
        elif case == "params":
            related["helper"].run("greet", name=3)
        elif case == "fails":
            related["helper"].run("fail")
        elif case == "stranger":
            related["stranger"].run("hi")
        elif case == "ghost":
            related["ghost"].run("hi")
        elif case == "kv":
            return {"error": None, "kv": related["helper"].kv.get("last", "unset")}
        elif case == "write":
            related["helper"].kv.set("x", 1)
        else:
            return {"error": None}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None}


def bounce(ctx):
    try:
        return {"main": ctx.run_id, "next": ctx.related["helper"].run("bounce")}
    except Exception as exc:
        return {"main": ctx.run_id, "stopped": str(exc)}
"""

HELPER_PY = """
def greet(ctx):
    answer = ctx.ask("Confirm the greeting", [{"name": "greeting", "type": "string", "required": True}])
    ctx.kv.set("last", ctx.params["name"])
    ctx.values.set("count", (ctx.values.get("count") or 0) + 1)
    return {
        "text": f"{answer['greeting']}, {ctx.params['name']}",
        "run": ctx.run_id,
        "salutation": ctx.config.get("salutation"),
    }


def fail(ctx):
    ctx.fail(7, "the helper refuses")


def bounce(ctx):
    try:
        return {"helper": ctx.run_id, "next": ctx.related["main"].run("bounce")}
    except Exception as exc:
        return {"helper": ctx.run_id, "stopped": str(exc)}
"""

STRANGER_PY = """
def hi(ctx):
    return {"hi": True}
"""

CASE_PARAM = {"name": "case", "type": "string", "required": True}


def _write(folder: Path, doc: dict[str, Any], code: str, handler_file: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    (folder / handler_file).write_text(code, encoding="utf-8")
    return folder


def write_projects(base: Path, *, main_related: list[dict[str, str]] | None = None) -> dict[str, Path]:
    """`base/main`, `base/helper`, `base/stranger`. `main_related` replaces main's
    relatedProjects (default: helper, stranger and ghost)."""
    if main_related is None:
        main_related = [
            {"alias": "helper", "id": HELPER},
            {"alias": "stranger", "id": STRANGER},
            {"alias": "ghost", "id": GHOST},
        ]
    main = {
        "id": MAIN,
        "name": "related-main",
        "version": "1.0.0",
        "projectType": "workflow",
        "relatedProjects": main_related,
        "entrypoints": [
            {
                "id": "delegate",
                "handler": "main.py:delegate",
                "timeoutSeconds": 60,
                "params": [{"name": "name", "type": "string", "required": True}],
            },
            {"id": "probe", "handler": "main.py:probe", "timeoutSeconds": 60, "params": [CASE_PARAM]},
            {"id": "bounce", "handler": "main.py:bounce", "timeoutSeconds": 60, "params": []},
        ],
    }
    helper = {
        "id": HELPER,
        "name": "related-helper",
        "version": "1.0.0",
        "projectType": "workflow",
        "relatedProjects": [{"alias": "main", "id": MAIN}],
        "configuration": {"fields": [{"name": "salutation", "type": "string", "default": "Dear"}]},
        "entrypoints": [
            {
                "id": "greet",
                "handler": "helper.py:greet",
                "timeoutSeconds": 60,
                "params": [{"name": "name", "type": "string", "required": True}],
            },
            {"id": "fail", "handler": "helper.py:fail", "params": []},
            {"id": "bounce", "handler": "helper.py:bounce", "timeoutSeconds": 60, "params": []},
        ],
    }
    stranger = {
        "id": STRANGER,
        "name": "related-stranger",
        "version": "1.0.0",
        "projectType": "workflow",
        "entrypoints": [{"id": "hi", "handler": "stranger.py:hi", "params": []}],
    }
    return {
        "main": _write(base / "main", main, MAIN_PY, "main.py"),
        "helper": _write(base / "helper", helper, HELPER_PY, "helper.py"),
        "stranger": _write(base / "stranger", stranger, STRANGER_PY, "stranger.py"),
    }
