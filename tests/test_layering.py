"""The layers of DESIGN.md, checked on the source: the Python import graph of
the hvdlite package (every import statement, including those inside
functions, read with `ast`) and the #includes of csrc/python.

    frameworks' bindings (torch, tensorflow, keras, numpy)
      -> hvdlite.common (the workers' shared code) -> hvdlite.store
    hvdlite.runner (the launcher) -> hvdlite.common, hvdlite.store
    hvdlite.ray, hvdlite.spark (launchers on a cluster engine) -> hvdlite.runner
"""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hvdlite"
# Built from csrc/python, so there is no .py file to find it by.
COMPILED_MODULES = {"hvdlite._core"}
BINDINGS = ("hvdlite.torch", "hvdlite.tensorflow", "hvdlite.keras", "hvdlite.numpy",
            "hvdlite.jax")


def _module_name(path, package_dir):
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node, module, is_package, modules):
    """The hvdlite modules one import statement loads: `import a.b` names
    a.b; `from a import b` names a.b when that is a module, else a."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    if node.level:  # relative: from the module's own package, up level - 1
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    found = set()
    for alias in node.names:
        if f"{source}.{alias.name}" in modules:
            found.add(f"{source}.{alias.name}")
        elif source in modules:
            found.add(source)
    return found


def import_graph(package_dir=PACKAGE):
    """{module: set of hvdlite modules it imports} over package_dir/**/*.py."""
    files = {_module_name(path, package_dir): path for path in package_dir.rglob("*.py")}
    modules = set(files) | COMPILED_MODULES
    graph = {name: set() for name in modules}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name] |= _imported(node, name, is_package, modules)
        graph[name].discard(name)
    return graph


def import_cycles(graph):
    """One cycle (a list of modules, first == last) for each group of modules
    that import each other (a strongly connected component, Tarjan's)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while module not in group:
                group.add(stack.pop())
            on_stack.difference_update(group)
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_shortest_cycle(graph, min(group), group) for group in groups]


def _shortest_cycle(graph, start, group):
    paths, queue = {start: [start]}, [start]
    for module in queue:
        for target in sorted(graph[module] & group):
            if target == start:
                return paths[module] + [start]
            if target not in paths:
                paths[target] = paths[module] + [target]
                queue.append(target)
    raise AssertionError(f"{sorted(group)} is not strongly connected")


def _in(module, package):
    return module == package or module.startswith(package + ".")


def test_no_import_cycles():
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles among hvdlite modules:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


def test_only_the_launchers_import_the_runner():
    # Workers never need the launcher: what both sides use is in hvdlite.store.
    # hvdlite.ray and hvdlite.spark launch jobs too (DESIGN.md), with its code.
    # The one other exception is hvdlite.run (Horovod's horovod.run), which the
    # package loads from the launcher on first use.
    graph = import_graph()
    assert graph["hvdlite"] == {"hvdlite.version", "hvdlite.common", "hvdlite.runner.function"}
    graph["hvdlite"].discard("hvdlite.runner.function")
    launchers = ("hvdlite.runner", "hvdlite.ray", "hvdlite.spark")
    offenders = [f"{module} imports {target}"
                 for module, targets in sorted(graph.items())
                 if not any(_in(module, launcher) for launcher in launchers)
                 for target in sorted(targets) if _in(target, "hvdlite.runner")]
    assert not offenders, "\n".join(offenders)


def test_common_imports_no_framework_binding():
    graph = import_graph()
    offenders = [f"{module} imports {target}" for module, targets in sorted(graph.items())
                 if _in(module, "hvdlite.common") for target in sorted(targets)
                 if any(_in(target, binding) for binding in BINDINGS)]
    assert not offenders, "\n".join(offenders)


def test_the_store_imports_nothing_of_hvdlite():
    graph = import_graph()
    offenders = [f"{module} imports {target}" for module, targets in sorted(graph.items())
                 if _in(module, "hvdlite.store") for target in sorted(targets)
                 if not _in(target, "hvdlite.store")]
    assert not offenders, "\n".join(offenders)


def test_python_bindings_reach_the_core_only_through_api():
    # csrc/python may use api/ (the Session, maintenance.h) and common/
    # (types, errors), never core/ or transport/ directly; core::Status (a
    # Handle's outcome, with its details) and core::CallSite (the Session's
    # interned call sites, Note [Call sites]) are the core types the api hands out.
    allowed = ("python/", "api/", "common/", "core/status.h", "core/call_site.h")
    offenders = []
    for path in sorted((ROOT / "csrc" / "python").glob("*.*")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if match and not match.group(1).startswith(allowed):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_graph_sees_a_cycle_and_a_lazy_import(tmp_path):
    # The checks above are only as good as the graph: a cycle made by an
    # import inside a function, and relative imports, must show.
    package = tmp_path / "hvdlite"
    (package / "common").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "common" / "__init__.py").write_text("")
    (package / "common" / "a.py").write_text("from . import b\n")
    (package / "common" / "b.py").write_text(
        "def f():\n    from hvdlite.common.c import g\n")
    (package / "common" / "c.py").write_text("import hvdlite.common.a\n")
    graph = import_graph(package)
    assert graph["hvdlite.common.a"] == {"hvdlite.common.b"}
    assert import_cycles(graph) == [["hvdlite.common.a", "hvdlite.common.b",
                                     "hvdlite.common.c", "hvdlite.common.a"]]
