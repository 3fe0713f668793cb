"""Which calls whose cost hostile input decides the server can reach on its event loop or
in a database thread, read from the source (no import, no execution).

The rule it checks (docs/architecture.md, "work hostile input can make long"): a regular
expression built from data, a JSON Schema validation, a parser of files or documents, a
network call and a bounded child waited on in the calling thread (`run_child_blocking`: it
holds the thread for the child's whole bound) run only inside one of the bounded wrappers
(`ALLOWED` in the test), never reached from

- an `async def` (the event loop), through the synchronous functions it calls; or
- a function handed to `run_db` (a database thread, holding a connection), through what it calls.

Handing a function to a thread or a child process (`run_db`, `run_hash`, `to_thread.run_sync`,
…) is not a call: the function becomes a root of its own kind (`run_db` → database thread;
the others → a plain thread, which the check does not follow).

Resolution is by name, as a reader would: bare names (nested, module-level, imported),
`self.`/`cls.` methods of the class and its bases, `module.function`, `Class.method`, and a
method name defined by exactly one class of the tree. A call it cannot name (a method of
an object of unknown type whose name several classes define) is not followed: the check
finds what the code says plainly, the attack tests find the rest.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Handing a function over to be run elsewhere; the value is the kind of root it becomes.
OFFLOADS: dict[str, str] = {
    "run_db": "database thread",
    "run_hash": "thread",
    "run_sync": "thread",  # anyio.to_thread.run_sync
    "to_thread": "thread",  # asyncio.to_thread
    "run_in_executor": "thread",
    "run_check": "thread",  # webui.validation: the checks' own threads, bounded in size and time
    "run_parse": "thread",  # webui.parse_threads: (size, fn, ...)
    "run_child": "child process",  # webui.bounded_child
}
RE_FUNCTIONS = frozenset(
    {"compile", "match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer"}
)
# Attribute calls that are JSON Schema validation whatever the receiver.
SCHEMA_METHODS = frozenset({"iter_errors", "is_valid", "check_schema", "descend"})
NETWORK_MODULES = ("httpx", "httpx2", "requests", "urllib.request", "http.client", "socket")
# The one reader of JSON from outside: what it reads is as long as its caller lets it be.
JSON_READERS = frozenset({"webui.strict_json.loads"})
SYNC_NETWORK = frozenset(
    {"get", "post", "put", "patch", "delete", "head", "options", "request", "stream", "Client", "urlopen"}
)
SOCKET_CALLS = frozenset({"create_connection", "getaddrinfo", "gethostbyname", "urlopen", "HTTPConnection"})
PARSER_MODULES = ("pypdf", "zipfile", "xml", "html.parser", "yaml", "tarfile")
# A bounded child waited on in the calling thread: bounded, but for as long as the child's
# bound (a draft's handler import, a crafted file's compile), so never on the loop or in a
# database thread: async code awaits `run_child` instead.
CHILD_WAITS = frozenset({"webui.bounded_child.run_child_blocking"})
# Method names too common to resolve to a single class by name alone.
COMMON = frozenset(
    {
        "get", "set", "run", "close", "start", "stop", "send", "read", "write", "add", "remove",
        "update", "items", "keys", "values", "pop", "append", "extend", "copy", "clear", "open",
        "wait", "cancel", "result", "submit", "publish", "answer", "record", "check", "load", "dump",
        "__init__", "__call__", "__enter__", "__exit__", "__aenter__", "__aexit__", "encode", "decode",
        "format", "join", "split", "strip", "replace", "lower", "upper", "match", "search", "sub",
        "create", "delete", "list", "find", "feed", "validate", "parse", "loads", "dumps", "release",
        "acquire", "put", "observe", "inc", "dec", "labels", "spawn", "emit", "handle", "process",
    }
)  # fmt: skip


@dataclass
class Sink:
    kind: str  # regex from data, schema validation, parser, network, child process waited on
    what: str
    line: int


@dataclass
class Function:
    name: str  # module:Qual.name
    path: str
    line: int
    is_async: bool
    cls: str | None  # module:Class of a method
    calls: list[tuple[list[str], int]] = field(default_factory=list)  # candidate callees, line
    sinks: list[Sink] = field(default_factory=list)
    offloaded: list[tuple[str, str]] = field(default_factory=list)  # (function, root kind)


@dataclass
class Tree:
    package: str = "webui"
    functions: dict[str, Function] = field(default_factory=dict)
    classes: dict[str, list[str]] = field(default_factory=dict)  # module:Class -> base names (resolved)
    methods_by_name: dict[str, list[str]] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)  # every method, known before the bodies are read


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)


class _Module:
    """One module's names: its imports, its top-level functions and classes."""

    def __init__(self, name: str, tree: ast.Module) -> None:
        self.name = name
        self.imports: dict[str, str] = {}  # alias -> "pkg.mod" or "pkg.mod:attr"
        self.top: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.top.add(node.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    parts = name.split(".")[: -node.level]
                    base = ".".join([*parts, node.module])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{base}:{alias.name}"

    def origin(self, dotted: str) -> str:
        """`dotted` with its first name replaced by what it was imported as (re.compile → re.compile)."""
        head, _, rest = dotted.partition(".")
        target = self.imports.get(head)
        if target is None:
            return dotted
        target = target.replace(":", ".")
        return f"{target}.{rest}" if rest else target


class _Collector(ast.NodeVisitor):
    """Walks one function body, not the functions nested in it (each is a function of its own)."""

    def __init__(self, tree: Tree, module: _Module, path: str, fn: Function, scope: dict[str, str]) -> None:
        self.tree, self.module, self.path, self.fn = tree, module, path, fn
        self.scope = dict(scope)  # local nested function name -> qualified name

    def body(self, nodes: Iterable[ast.stmt]) -> None:
        nodes = list(nodes)
        for node in nodes:  # nested defs are visible to the whole body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.scope[node.name] = f"{self.fn.name}.{node.name}"
        for node in nodes:
            self.visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        _function(
            self.tree, self.module, self.path, node, f"{self.fn.name}.{node.name}", self.fn.cls, self.scope
        )

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        return  # classes defined inside functions: not followed

    def visit_Lambda(self, node: ast.Lambda) -> None:
        name = f"{self.fn.name}.<lambda@{node.lineno}>"
        fn = Function(name, self.path, node.lineno, False, self.fn.cls)
        self.tree.functions[name] = fn
        inner = _Collector(self.tree, self.module, self.path, fn, self.scope)
        inner.visit(node.body)
        # A lambda is called where it is written unless it is handed over (see visit_Call).
        self.fn.calls.append(([name], node.lineno))

    def _offloaded(self, node: ast.Call, kind: str) -> None:
        """The first argument that is a function (a lambda, a `partial`, or a name of the tree:
        `run_parse(size, fn, ...)` names it second) becomes a root of `kind`; the others are
        visited as the expressions they are."""
        handed: ast.AST | None = None
        for arg in node.args:
            target = arg
            if isinstance(arg, ast.Call) and (_dotted(arg.func) or "").endswith("partial") and arg.args:
                target = arg.args[0]
            if handed is None and (isinstance(target, ast.Lambda) or self.resolve(target)):
                handed = arg
                if isinstance(target, ast.Lambda):
                    before = len(self.fn.calls)
                    self.visit_Lambda(target)
                    self.fn.offloaded.append((self.fn.calls.pop(before)[0][0], kind))
                else:
                    self.fn.offloaded.extend((callee, kind) for callee in self.resolve(target))
                if target is not arg:
                    for inner in arg.args[1:]:  # type: ignore[attr-defined]
                        self.visit(inner)
                continue
            self.visit(arg)
        for kw in node.keywords:
            self.visit(kw.value)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        last = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        )
        if last in OFFLOADS:
            self._offloaded(node, OFFLOADS[last])
            return
        self._sinks(node)
        self.fn.calls.append((self.resolve(func), node.lineno))
        self.generic_visit(node)

    def _sinks(self, node: ast.Call) -> None:
        dotted = _dotted(node.func)
        # Only names the module imported count as the library (a local variable `xml` is not).
        imported = bool(dotted) and dotted.split(".")[0] in self.module.imports
        origin = self.module.origin(dotted) if dotted and imported else ""
        line = node.lineno
        function = origin.rsplit(".", 1)[-1]
        if origin.startswith("re.") and function in RE_FUNCTIONS and node.args and not _literal(node.args[0]):
            self.fn.sinks.append(Sink("regex from data", origin, line))
        if isinstance(node.func, ast.Attribute) and node.func.attr in SCHEMA_METHODS:
            self.fn.sinks.append(Sink("schema validation", f".{node.func.attr}()", line))
        if origin == "jsonschema.validate":
            self.fn.sinks.append(Sink("schema validation", origin, line))
        if origin in JSON_READERS:
            self.fn.sinks.append(Sink("parser", origin, line))
        if origin in CHILD_WAITS:
            self.fn.sinks.append(Sink("child process waited on", origin, line))
        for mod in PARSER_MODULES:
            if origin == mod or origin.startswith(mod + "."):
                self.fn.sinks.append(Sink("parser", origin, line))
        for mod in NETWORK_MODULES:
            if origin.startswith(mod + "."):
                attr = origin.rsplit(".", 1)[-1]
                if attr in SYNC_NETWORK or attr in SOCKET_CALLS:
                    self.fn.sinks.append(Sink("network", origin, line))

    def resolve(self, func: ast.AST) -> list[str]:
        if isinstance(func, ast.Name):
            return self._name(func.id)
        if not isinstance(func, ast.Attribute):
            return []
        value, attr = func.value, func.attr
        if isinstance(value, ast.Name) and value.id in {"self", "cls"} and self.fn.cls:
            return self._method(self.fn.cls, attr)
        dotted = _dotted(value)
        if dotted:
            origin = self.module.origin(dotted)
            if origin in self.tree.modules:  # module.function
                return [f"{origin}:{attr}"]
            owner = self._name(dotted) if "." not in dotted else []
            for cls in owner:
                if cls in self.tree.classes:
                    return self._method(cls, attr)
        if attr not in COMMON and not attr.startswith("__"):
            found = self.tree.methods_by_name.get(attr, [])
            if len(found) == 1:
                return found
        return []

    def _name(self, name: str) -> list[str]:
        if name in self.scope:
            return [self.scope[name]]
        if name in self.module.top:
            qual = f"{self.module.name}:{name}"
            return [f"{qual}.__init__"] if qual in self.tree.classes else [qual]
        target = self.module.imports.get(name)
        if target and target.startswith(self.tree.package) and ":" in target:
            return [f"{target}.__init__"] if target in self.tree.classes else [target]
        return []

    def _method(self, cls: str, attr: str) -> list[str]:
        seen: set[str] = set()
        todo = [cls]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if f"{current}.{attr}" in self.tree.declared:
                return [f"{current}.{attr}"]
            todo.extend(self.tree.classes.get(current, []))
        return [f"{cls}.{attr}"]


def _function(
    tree: Tree,
    module: _Module,
    path: str,
    node: ast.FunctionDef | ast.AsyncFunctionDef,
    name: str,
    cls: str | None,
    scope: dict[str, str],
) -> None:
    fn = Function(name, path, node.lineno, isinstance(node, ast.AsyncFunctionDef), cls)
    tree.functions[name] = fn
    for default in [*node.args.defaults, *node.args.kw_defaults]:
        if default is not None:
            _Collector(tree, module, path, fn, scope).visit(default)
    _Collector(tree, module, path, fn, scope).body(node.body)


def _modules(root: Path, package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def read_tree(root: Path, package: str = "webui") -> Tree:
    tree = Tree(package)
    parsed: list[tuple[_Module, Path, ast.Module]] = []
    for name, path in _modules(root, package):
        source = ast.parse(path.read_text(), filename=str(path))
        module = _Module(name, source)
        tree.modules.add(name)
        parsed.append((module, path, source))
        for node in source.body:
            if isinstance(node, ast.ClassDef):
                qual = f"{name}:{node.name}"
                tree.classes[qual] = [b for b in (_dotted(base) for base in node.bases) if b]
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        tree.declared.add(f"{qual}.{item.name}")
                        tree.methods_by_name.setdefault(item.name, []).append(f"{qual}.{item.name}")
    # Bases named as the module saw them, resolved to classes of the tree.
    by_module = {module.name: module for module, _, _ in parsed}
    for qual, bases in tree.classes.items():
        module = by_module[qual.split(":")[0]]
        resolved = []
        for base in bases:
            if base in module.top:
                resolved.append(f"{module.name}:{base}")
            elif base in module.imports and ":" in module.imports[base]:
                resolved.append(module.imports[base])
        tree.classes[qual] = resolved
    for module, path, source in parsed:
        rel = str(path.relative_to(root))
        for node in source.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                _function(tree, module, rel, node, f"{module.name}:{node.name}", None, {})
            elif isinstance(node, ast.ClassDef):
                qual = f"{module.name}:{node.name}"
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        _function(tree, module, rel, item, f"{qual}.{item.name}", qual, {})
    return tree


@dataclass(frozen=True)
class Finding:
    root_kind: str  # "event loop" or "database thread"
    chain: tuple[str, ...]  # root first, the function holding the sink last
    sink: str
    where: str  # path:line of the sink

    def __str__(self) -> str:
        return f"{self.where}: {self.sink} reached on the {self.root_kind}: {' -> '.join(self.chain)}"


def findings(tree: Tree, allowed: Iterable[str]) -> list[Finding]:
    """Every sink reachable from a root without passing through an allowed wrapper; one
    finding per (root kind, sink), with the shortest chain found from some root."""
    allowed = set(allowed)
    roots: list[tuple[str, str]] = [
        (name, "event loop") for name, fn in tree.functions.items() if fn.is_async
    ]
    for fn in tree.functions.values():
        for target, kind in fn.offloaded:
            if kind == "database thread":
                roots.append((target, kind))
    out: dict[tuple[str, str], Finding] = {}
    for kind in ("event loop", "database thread"):
        starts = [name for name, k in roots if k == kind]
        parent: dict[str, str | None] = {name: None for name in starts}
        queue = deque(starts)
        while queue:
            name = queue.popleft()
            fn = tree.functions.get(name)
            if fn is None or name in allowed:
                continue
            for sink in fn.sinks:
                chain = [name]
                while (up := parent[chain[-1]]) is not None:
                    chain.append(up)
                key = (kind, f"{fn.path}:{sink.line}")
                out.setdefault(
                    key, Finding(kind, tuple(reversed(chain)), f"{sink.kind} ({sink.what})", key[1])
                )
            for callees, _line in fn.calls:
                for callee in callees:
                    target = tree.functions.get(callee)
                    if target is None or callee in parent:
                        continue
                    if kind == "event loop" and target.is_async:
                        continue  # an async function is a root of its own
                    parent[callee] = name
                    queue.append(callee)
    return sorted(out.values(), key=str)
