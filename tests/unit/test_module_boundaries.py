"""The package's shape, checked from its source: no object reaches into another's private
attributes, no module imports another that (directly or not) imports it back, and imports run only
down the layers (``LAYERS``).

STYLE 7: two objects that read and write each other's private attributes are one object in
disguise; they talk through named methods or a small interface instead (``KeepaliveHost``,
``AsyncLink``). Import circles, ``TYPE_CHECKING`` and function-level imports included, make
the layering unreadable and drag modules into places they do not belong.
"""

from __future__ import annotations

import ast
from pathlib import Path

import safeconsumer

PACKAGE = Path(safeconsumer.__file__).resolve().parent

#: (module, enclosing function) -> why it may read another object's private attributes.
#: Keep it tiny: every entry is a design decision, not a convenience.
PRIVATE_ACCESS_ALLOWED: dict[tuple[str, str], str] = {
    # Empty: the integrations use a SafeConsumer through its port (consumer/_port.py), never its
    # private attributes. Keep it that way.
}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _names_bound_at_module_level(tree: ast.Module) -> set[str]:
    """Imported names and classes: ``Consumer._x``/``KafkaError._CODE`` are class members, not an object's state."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    names.update(node.name for node in tree.body if isinstance(node, ast.ClassDef))
    return names


def _private_accesses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = _names_bound_at_module_level(tree)
    found: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name if function is None else function
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
            owner = node.value
            own = isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in bound)
            allowed = (str(path.relative_to(PACKAGE)), function) in PRIVATE_ACCESS_ALLOWED
            if not own and not allowed:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, function if not isinstance(node, ast.Module) else None)

    visit(tree, None)
    return found


def test_no_object_reads_or_writes_another_objects_private_attributes() -> None:
    found = [hit for path in _sources() for hit in _private_accesses(path)]
    assert not found, "private attributes of another object (add a named method or interface):\n" + "\n".join(found)


def test_the_private_access_allow_list_is_still_needed() -> None:
    """An entry whose function no longer reads private attributes must go."""
    for module, function in PRIVATE_ACCESS_ALLOWED:
        tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
        reads = [
            n
            for n in ast.walk(body)
            if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.endswith("__")
        ]
        assert reads, f"{module}:{function} reads no private attribute: drop it from the allow-list"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere (TYPE_CHECKING and function bodies too)."""
    modules = {_module_name(path): path for path in _sources()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                candidates = [module] + [f"{module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            targets.update(c for c in candidates if c in modules and c != name)
        graph[name] = targets
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, if there is any (depth-first search)."""
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(graph[node]):
            circle = walk(target, [*path, node])
            if circle:
                return circle
        done.add(node)
        return None

    for start in sorted(graph):
        circle = walk(start, [])
        if circle:
            return circle
    return None


def test_no_import_circle_among_the_package_modules() -> None:
    graph = _imports()
    assert graph.get("safeconsumer.consumer._facade"), "the scan found the modules"
    circle = _circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_circle_check_finds_a_circle() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


#: The package's layers, bottom first (docs/architecture.md draws them): a module imports its own
#: folder and the layers below, never a layer above nor a peer of its own layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("base",),  # errors, keys, asyncio plumbing, telemetry, the helper clients' config and logging
    ("group",),  # what a member knows of its group: describing it, rebalances explained, budgets, share settings
    ("poison",),
    ("consumer", "share"),
    ("aio", "otel", "_deserializing", "kafka_python", "spark"),  # the integrations
    ("health",),  # the operator tools: the doctor and its checks, dead-letters
    ("testing",),
    ("__init__", "__main__", "doctor"),  # the public face: re-exports and entry points
)


def _unit(module: str) -> str:
    """The folder (or top-level module) a module belongs to: ``consumer`` for ``safeconsumer.consumer._facade``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def _arrows_against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for source, targets in graph.items():
        for target in targets:
            here, there = _unit(source), _unit(target)
            if here != there and _layer(there) >= _layer(here):
                wrong.append(f"{source} imports {target} ({there} is not below {here})")
    return sorted(wrong)


def test_every_folder_has_its_layer() -> None:
    units = {_unit(module) for module in _imports()}
    placed = {unit for layer in LAYERS for unit in layer}
    assert units <= placed, f"place these in LAYERS: {sorted(units - placed)}"
    assert {"base", "group", "consumer", "share", "health"} <= units, "the scan found the folders"


def test_imports_only_run_down_the_layers() -> None:
    wrong = _arrows_against_the_layers(_imports())
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_layer_check_finds_an_arrow_up_and_one_between_peers() -> None:
    graph = {
        "safeconsumer.base._errors": {"safeconsumer.consumer._facade"},
        "safeconsumer.share._consumer": {"safeconsumer.consumer._lifecycle", "safeconsumer.base._keys"},
        "safeconsumer.consumer._facade": {"safeconsumer.consumer._client"},
    }
    assert _arrows_against_the_layers(graph) == [
        "safeconsumer.base._errors imports safeconsumer.consumer._facade (consumer is not below base)",
        "safeconsumer.share._consumer imports safeconsumer.consumer._lifecycle (consumer is not below share)",
    ]


#: No library module grows past this many lines: one job a file (CONTRIBUTING: split it along its jobs).
MAX_LINES = 600


def test_no_library_module_is_over_its_size() -> None:
    sizes = {path.relative_to(PACKAGE): len(path.read_text(encoding="utf-8").splitlines()) for path in _sources()}
    assert len(sizes) > 50, "the scan found the modules"
    over = sorted(f"{path}: {n} lines" for path, n in sizes.items() if n > MAX_LINES)
    assert not over, f"modules over {MAX_LINES} lines (split them along their jobs):\n" + "\n".join(over)
