"""A live run's state has owners (webui/runs/live.py): each part of a `LiveRun` is changed by
the one module that owns it, and its outcome only through `LiveRun.conclude` (the first
conclusion holds). Read from the source: a change anywhere else fails here."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields
from pathlib import Path

from webui.runs.live import Budget, CallFollowing, LiveRun, QuestionState, SlotPlace
from webui.runs.types import RunStatus

WEBUI = Path(__file__).resolve().parents[2] / "webui"
# LiveRun part -> the modules that may change it (webui/-relative).
OWNERS = {
    "place": {"runs/admission.py"},
    "asks": {"runs/questions.py", "runs/resuming.py"},
    "budget": {"runs/budget.py"},
    "call": {"runs/handle.py"},
}
MUTATORS = {"pop", "clear", "add", "discard", "update", "append", "setdefault", "remove", "extend"}


def _chain(node: ast.expr) -> list[str]:
    """`live.asks.pending[k]` -> ["live", "asks", "pending"] (subscripts skipped)."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Name):
            names.append(node.id)
            return names[::-1]
        else:
            return names[::-1]


def _written(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """Every attribute chain the module assigns to, or calls a mutating method of."""
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
        ):
            targets = [node.func.value]
        for target in targets:
            for part in ast.walk(target) if isinstance(target, ast.Tuple) else [target]:
                if isinstance(part, ast.Attribute | ast.Subscript):
                    found.append((getattr(node, "lineno", 0), _chain(part)))
    return found


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound to a part (`asks = live.asks`): name -> part."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr in OWNERS
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = node.value.attr
    return bound


def _writes_elsewhere() -> list[str]:
    wrong: list[str] = []
    for path in sorted(WEBUI.rglob("*.py")):
        where = path.relative_to(WEBUI).as_posix()
        text = path.read_text(encoding="utf-8")
        if "LiveRun" not in text:
            continue  # a module that never sees a live run (a `.call` there is another thing)
        tree = ast.parse(text)
        aliases = _aliases(tree)
        for line, chain in _written(tree):
            parts = {aliases[chain[0]]} if chain and chain[0] in aliases and len(chain) > 1 else set()
            # `x.place.held = …` (a part's field) or `x.place = …` (the whole part).
            parts |= {name for name in chain[1:] if name in OWNERS}
            for part in parts:
                if where not in OWNERS[part]:
                    wrong.append(f"webui/{where}:{line} changes LiveRun.{part} ({'.'.join(chain)})")
            if chain[-1:] == ["_conclusion"] and where != "runs/live.py":
                wrong.append(f"webui/{where}:{line} sets a run's conclusion outside LiveRun.conclude")
    return wrong


def test_each_part_of_a_live_run_is_changed_by_its_owner_only() -> None:
    assert {f.name: f.type for f in fields(LiveRun) if f.name in OWNERS} == {
        "place": "SlotPlace",
        "asks": "QuestionState",
        "budget": "Budget",
        "call": "CallFollowing",
    }
    assert _writes_elsewhere() == []


def test_the_check_sees_a_write_outside_the_owner(tmp_path: Path) -> None:
    """The check itself: a part's field written through the run, through an alias, or by a
    mutating call, and a conclusion set directly, are each found."""
    source = (
        "live.place.held = True\n"
        "asks = live.asks\n"
        "asks.asking += 1\n"
        "live.asks.pending.pop('q')\n"
        "live._conclusion = None\n"
    )
    tree = ast.parse(source)
    aliases = _aliases(tree)
    chains = [chain for _, chain in _written(tree)]
    assert ["live", "place", "held"] in chains and ["live", "asks", "pending"] in chains
    assert aliases == {"asks": "asks"} and ["asks", "asking"] in chains
    assert ["live", "_conclusion"] in chains


def test_the_first_conclusion_holds() -> None:
    live = LiveRun.__new__(LiveRun)
    live._conclusion = None  # pyright: ignore[reportPrivateUsage]
    assert live.conclude(RunStatus.SUCCESS, {"output": 1})
    assert not live.conclude(RunStatus.TIMEOUT, {"code": "timeout"})
    assert live.concluded and live.conclusion == (RunStatus.SUCCESS, {"output": 1})
    assert not SlotPlace().held and not QuestionState().pending  # each part starts empty
    assert Budget().timer is None and not CallFollowing().as_task


def test_the_run_service_knows_no_echo_and_a_binding_holds_no_preflight_callable() -> None:
    """stdio's echo is its own (an output tap), and a call's limits are read by one function
    from what the binding resolved (ProjectLimits.limits_for), not by a callback it carries."""
    from webui.mcp.binding import Binding
    from webui.runs.service import RunService

    assert "echo" not in inspect.signature(RunService).parameters
    names = {f.name for f in fields(Binding)}
    assert "preflight" not in names and "resolved" in names
