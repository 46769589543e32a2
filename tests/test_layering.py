"""The layers of docs/architecture.md, checked on the source: the Python import
graph of the hvdlite package (every import statement, including those inside
functions, read with `ast`) against the layer map's table there, and the
#includes of csrc/ (python/, core/, transport/), with csrc/transport's layout
and the headers' file names.
"""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hvdlite"
# Built from csrc/python, so there is no .py file to find it by.
COMPILED_MODULES = {"hvdlite._core"}


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


def script_import_graph(folder):
    """{script: set of scripts it imports} for a folder of scripts that import
    each other by bare name (bench/ runs `python bench/x.py`, so `from y
    import ...` there means bench/y.py), lazy imports inside functions
    included."""
    scripts = {path.stem: path for path in folder.glob("*.py")}
    graph = {name: set() for name in scripts}
    for name, path in scripts.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names if alias.name in scripts}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module in scripts:
                graph[name].add(node.module)
        graph[name].discard(name)
    return graph


def test_no_import_cycles_among_bench_scripts():
    cycles = import_cycles(script_import_graph(PACKAGE.parent / "bench"))
    assert not cycles, "bench/ scripts that import each other:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


def test_the_script_graph_sees_a_lazy_cycle(tmp_path):
    (tmp_path / "table.py").write_text("import json\nfrom plot import draw\n")
    (tmp_path / "plot.py").write_text("def draw():\n    from table import rows\n")
    (tmp_path / "alone.py").write_text("import table\n")
    assert import_cycles(script_import_graph(tmp_path)) == [["plot", "table", "plot"]]


ARCHITECTURE = ROOT / "docs" / "architecture.md"
_MAP_START = "<!-- layer map:"
_MAP_END = "<!-- end of layer map -->"
_NAME = re.compile(r"`(hvdlite[\w.]*)`")


def layer_map(text):
    """{package: set of packages it may import} from the layer map's table
    in docs/architecture.md (the text between its two markers)."""
    if _MAP_START not in text or _MAP_END not in text:
        raise AssertionError(f"no layer map in {ARCHITECTURE.relative_to(ROOT)}: its table "
                             f"goes between {_MAP_START!r} and {_MAP_END!r}")
    table = text[text.index(_MAP_START):text.index(_MAP_END)]
    allowed = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not _NAME.fullmatch(cells[0]):
            continue  # the marker, the header and its rule
        package = _NAME.fullmatch(cells[0]).group(1)
        assert package not in allowed, f"the layer map has two rows for {package}"
        allowed[package] = set(_NAME.findall(cells[2]))
    return allowed


def package_of(module, packages):
    """The layer map's package of `module`: its own row, else the longest row
    above it; the row `hvdlite` is the package's __init__ alone."""
    rows = [p for p in packages if p != "hvdlite" and _in(module, p)]
    if rows:
        return max(rows, key=len)
    return "hvdlite" if module == "hvdlite" else None


def map_violations(graph, allowed, files):
    """What the layer map does not allow in `graph`, and the arrows it allows
    that no import uses: one message each."""
    messages, used = [], set()
    for module, targets in sorted(graph.items()):
        if module in COMPILED_MODULES:
            continue
        source = package_of(module, allowed)
        if source is None:
            messages.append(f"{files[module]}: {module} is in no package of the layer map: "
                            f"add a row for it to {ARCHITECTURE.relative_to(ROOT)}")
            continue
        for target in sorted(targets):
            destination = package_of(target, allowed) or target
            if destination == source:
                continue
            if destination in allowed[source]:
                used.add((source, destination))
            else:
                messages.append(f"{files[module]} imports {target}: the arrow {source} -> "
                                f"{destination} is not in the layer map of "
                                f"{ARCHITECTURE.relative_to(ROOT)}")
    for source, destinations in sorted(allowed.items()):
        messages += [f"the layer map allows {source} -> {destination}, which no module "
                     f"imports: take it out of {ARCHITECTURE.relative_to(ROOT)}"
                     for destination in sorted(destinations - {None})
                     if (source, destination) not in used]
    return messages


def module_files(package_dir=PACKAGE):
    return {_module_name(path, package_dir): path.relative_to(package_dir.parent).as_posix()
            for path in package_dir.rglob("*.py")}


def test_the_imports_are_the_layer_maps_arrows():
    allowed = layer_map(ARCHITECTURE.read_text())
    assert {"hvdlite.common", "hvdlite.store", "hvdlite.numpy", "hvdlite.runner"} <= set(allowed)
    violations = map_violations(import_graph(), allowed, module_files())
    assert not violations, "\n".join(violations)


def test_the_layer_map_check_names_the_file_and_the_arrow(tmp_path):
    # A new import that the map does not allow fails, naming the file and the
    # arrow; an arrow that nothing uses fails too; a package without a row fails.
    package = tmp_path / "hvdlite"
    for folder in ("common", "store", "numpy", "extra"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "common" / "a.py").write_text("def f():\n    from hvdlite.numpy import b\n")
    (package / "numpy" / "b.py").write_text("from hvdlite.common import a\n")
    allowed = layer_map(f"{_MAP_START} -->\n| package | what | may import |\n| --- | --- | --- |\n"
                        "| `hvdlite` | top | nothing |\n"
                        "| `hvdlite.common` | shared | `hvdlite.store` |\n"
                        "| `hvdlite.store` | store | nothing of hvdlite |\n"
                        "| `hvdlite.numpy` | host | `hvdlite.common` |\n" + _MAP_END)
    assert allowed["hvdlite.numpy"] == {"hvdlite.common"} and allowed["hvdlite"] == set()
    violations = map_violations(import_graph(package), allowed, module_files(package))
    assert violations == [
        "hvdlite/common/a.py imports hvdlite.numpy.b: the arrow hvdlite.common -> "
        "hvdlite.numpy is not in the layer map of docs/architecture.md",
        "hvdlite/extra/__init__.py: hvdlite.extra is in no package of the layer map: add a "
        "row for it to docs/architecture.md",
        "the layer map allows hvdlite.common -> hvdlite.store, which no module imports: "
        "take it out of docs/architecture.md"], violations


def private_uses(path, module, packages):
    """(line, text) of each private name (`_x`, not `__x__`) that `path` takes
    from a package other than its own: imported by name, or read off a module
    it imported (`host._x`)."""
    tree = ast.parse(path.read_text(), str(path))
    own = package_of(module, packages)
    bound, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and _in(node.module, "hvdlite"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                bound[alias.asname or alias.name] = name
                if alias.name.startswith("_") and not alias.name.startswith("__") and \
                        package_of(node.module, packages) != own:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and _in(alias.name, "hvdlite"):
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in bound and node.attr.startswith("_") and \
                not node.attr.startswith("__") and \
                package_of(bound[node.value.id], packages) != own:
            found.append((node.lineno, f"{node.value.id}.{node.attr} ({bound[node.value.id]})"))
    return sorted(found)


def test_no_package_uses_another_packages_private_names():
    # The host layer (hvdlite.numpy) is used by every binding through its
    # public names (docs/architecture.md); the same holds between all packages.
    packages = layer_map(ARCHITECTURE.read_text())
    offenders = [f"{relative}:{line}: {text}"
                 for module, relative in sorted(module_files().items())
                 for line, text in private_uses(ROOT / relative, module, packages)]
    assert not offenders, ("these use another package's private names; give the name a "
                           "public one there:\n" + "\n".join(offenders))


def test_the_private_name_check_sees_imports_and_attributes(tmp_path):
    packages = {"hvdlite", "hvdlite.jax", "hvdlite.numpy"}
    source = tmp_path / "x.py"
    source.write_text("from hvdlite.numpy.collectives import _dtype_code, dtype_code\n"
                      "from hvdlite.numpy import collectives as host\n"
                      "from hvdlite.jax import _mine\n"
                      "host._enqueue(1)\nhost.allreduce(2)\nhost.__name__\n")
    assert private_uses(source, "hvdlite.jax.x", packages) == [
        (1, "from hvdlite.numpy.collectives import _dtype_code"),
        (4, "host._enqueue (hvdlite.numpy.collectives)")]


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


# Note: hvdlite/common/config.py is the one Python reader of HVDLITE_*/HOROVOD_*
# variables (as csrc/core/config.cc is in C++). Elsewhere such a name may only be
# written (a dict key, an assignment or `del` into an environment being built for
# a child), bound to a module constant, or passed to config's functions; any
# other use (env.get(NAME), NAME in env, env[NAME] read, a loop over names or
# prefixes, str.startswith("HVDLITE_")) is a read that bypasses the reader.
CONFIG_READER = "hvdlite/common/config.py"
# Modules allowed to read such names on their own, and why. Empty: every read
# goes through the reader (launchers only write their children's variables).
ENVIRONMENT_READ_ALLOWED = {}
_VARIABLE_NAME = re.compile(r"(HVDLITE|HOROVOD)_[A-Z0-9_]*")


def _names_a_variable(node, constants):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_VARIABLE_NAME.fullmatch(node.value))
    if isinstance(node, ast.JoinedStr) and node.values:  # f"HVDLITE_{name}"
        parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
        return isinstance(node.values[0], ast.Constant) and \
            bool(_VARIABLE_NAME.match(parts[0])) and \
            all(re.fullmatch(r"[A-Z0-9_]*", part) for part in parts)
    return isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in constants


def _is_config_call(node):
    func = node.func
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
        func.value.id == "config"


def _writes_or_declares(node, parent):
    """True where `node` (a variable name) is written, declared or handed to
    the reader, rather than read on its own."""
    if isinstance(parent, ast.Dict):
        return any(node is key for key in parent.keys)
    if isinstance(parent, ast.DictComp):
        return node is parent.key
    if isinstance(parent, ast.Subscript):
        return node is parent.slice and isinstance(parent.ctx, (ast.Store, ast.Del))
    if isinstance(parent, ast.Assign):  # NAME = "HVDLITE_X": its uses are checked
        return node is parent.value and all(isinstance(t, ast.Name) for t in parent.targets)
    if isinstance(parent, ast.Call):
        return _is_config_call(parent)
    return False


def environment_reads(source, filename="<source>"):
    """(line, text) of each place `source` reads an HVDLITE_/HOROVOD_
    variable without hvdlite/common/config.py."""
    tree = ast.parse(source, filename)
    constants = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)
                 and _names_a_variable(node.value, set())}
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(parents.get(node), ast.JoinedStr):
            continue  # a literal part of an f-string (messages), judged as the whole
        if _names_a_variable(node, constants) and \
                not _writes_or_declares(node, parents.get(node)):
            found.append((node.lineno, ast.get_source_segment(source, node)))
    return sorted(found)


def test_only_the_config_reader_reads_hvdlite_variables():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative == CONFIG_READER or relative in ENVIRONMENT_READ_ALLOWED:
            continue
        offenders += [f"{relative}:{line}: {text}"
                      for line, text in environment_reads(path.read_text(), relative)]
    assert not offenders, (
        "these read HVDLITE_/HOROVOD_ variables themselves; declare the variable in "
        "hvdlite/common/config.py and read it with config.get() (or config.raw()):\n"
        + "\n".join(offenders))


def test_the_reader_check_sees_every_kind_of_read():
    reads = environment_reads(
        'import os\n'
        'a = os.environ.get("HVDLITE_CYCLE_TIME")\n'
        'b = "HOROVOD_RANK" in env\n'
        'c = env["HVDLITE_SIZE"]\n'
        'd = os.getenv(f"HVDLITE_{name}")\n'
        'for prefix in ("HVDLITE_", "HOROVOD_"):\n'
        '    pass\n'
        'NAME = "HVDLITE_SECRET"\n'
        'e = env.get(NAME)\n')
    assert [line for line, _ in reads] == [2, 3, 4, 5, 6, 6, 9], reads
    assert environment_reads(
        'env = {"HVDLITE_RANK": "0"}\n'
        'env["HVDLITE_SIZE"] = "2"\n'
        'del env["HVDLITE_SIZE"]\n'
        'layout = {f"HVDLITE_{n}": v for n, v in items}\n'
        'x = config.get("HVDLITE_RANK", env)\n'
        'NAME = "HVDLITE_SECRET"\n'
        'env[NAME] = "s"\n'
        'raise ValueError(f"HVDLITE_RANK={value!r} is not a number")\n') == []


# The C++ layers (docs/architecture.md): common <- transport <- core <- api <-
# python, tensorflow. Each transport lives in its own folder of csrc/transport
# (tcp/, shm/, two_level/, mpi/, cuda/, nccl/, store/); the top of
# csrc/transport holds only what the layers above use: the interfaces, the
# stall limits every transport honours, and the factory that names them.
CSRC = ROOT / "csrc"
TRANSPORT_INTERFACE = {"communicator.h", "communicator.cc", "device_communicator.h",
                       "transport.h", "store.h", "stall.h", "stall.cc", "factory.cc"}


def cpp_includes(path):
    """(line number, included path) of each #include "..." in `path`."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if match:
            found.append((number, match.group(1)))
    return found


def _sources(folder):
    return sorted(p for p in folder.rglob("*") if p.suffix in (".h", ".cc"))


def test_the_top_of_transport_holds_only_its_interfaces():
    loose = sorted(p.name for p in (CSRC / "transport").iterdir()
                   if p.is_file() and p.name not in TRANSPORT_INTERFACE)
    assert not loose, (f"{loose} sit at the top of csrc/transport; an implementation "
                       "goes in its own folder (tcp/, shm/, two_level/, ...)")


def test_the_core_uses_only_the_transport_interfaces():
    # The executors (executor.cc, device_executor.cc) and the rest of core/
    # pack, call a Communicator and unpack: no transport's internals.
    allowed = {f"transport/{name}" for name in TRANSPORT_INTERFACE if name.endswith(".h")}
    offenders = [f"{path.relative_to(ROOT)}:{number}: {included}"
                 for path in _sources(CSRC / "core") for number, included in cpp_includes(path)
                 if included.startswith("transport/") and included not in allowed]
    assert not offenders, "\n".join(offenders)
    # The rule reaches the executors (a move out of core/ would escape it).
    checked = {p.name for p in _sources(CSRC / "core")}
    assert {"executor.cc", "device_executor.cc", "executor.h", "device_executor.h"} <= checked


def test_the_executors_see_only_the_communicator_interfaces():
    # Issue 38: both hierarchies (CPU and CUDA two levels) live behind the
    # communicator interfaces, so an executor packs, calls one communicator
    # and unpacks: of transport/ it includes those two headers and nothing
    # else (no transport.h to make communicators, no tcp/, shm/, mpi/, nccl/,
    # cuda/ or two_level/ internals), and it knows no hierarchy of its own.
    interfaces = {"transport/communicator.h", "transport/device_communicator.h"}
    executors = [CSRC / "core" / f"{name}.{ext}" for name in ("executor", "device_executor")
                 for ext in ("h", "cc")]
    offenders = [f"{path.relative_to(ROOT)}:{number}: {included}"
                 for path in executors for number, included in cpp_includes(path)
                 if included.startswith("transport/") and included not in interfaces]
    assert not offenders, "\n".join(offenders)
    knows_levels = [f"{path.relative_to(ROOT)}:{number}"
                    for path in executors
                    for number, line in enumerate(path.read_text().splitlines(), 1)
                    if re.search(r"\b(hierarchical\w*|local_comm|cross_comm)\s*\(|\bcomms\.(local|cross)\b", line)]
    assert not knows_levels, "an executor runs a hierarchy itself: " + ", ".join(knows_levels)


def test_transport_includes_nothing_above_it():
    offenders = [f"{path.relative_to(ROOT)}:{number}: {included}"
                 for path in _sources(CSRC / "transport") for number, included in cpp_includes(path)
                 if included.split("/")[0] in ("core", "api", "python", "tensorflow", "jax")]
    assert not offenders, "\n".join(offenders)


def test_no_two_headers_share_a_file_name():
    # An include names its folder, but a reader (and a debugger's list of
    # files) sees the name: transport/nccl/api.h beside api/api.h misled.
    by_name = {}
    for path in sorted(CSRC.rglob("*.h")):
        by_name.setdefault(path.name, []).append(path.relative_to(ROOT).as_posix())
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, shared


# A C++ string literal on one line (escapes included): its words are no call.
_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')


def test_only_the_session_queues_into_the_runtime():
    # Note [One way in] (csrc/api/session.h): every binding's request enters
    # the core through Session::submit, which checks it (api/request.h) and
    # calls Runtime::enqueue; nothing above core/ calls that itself.
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for folder in ("api", "python", "tensorflow", "jax")
                 for path in _sources(CSRC / folder)
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"(->|\.)\s*enqueue\s*\(", _STRING_LITERAL.sub('""', line))
                 and path.relative_to(CSRC).as_posix() != "api/session.cc"]
    assert not offenders, "\n".join(offenders)
    session = (CSRC / "api" / "session.cc").read_text()
    assert len(re.findall(r"->\s*enqueue\s*\(", session)) == 1, "Session::submit alone enqueues"


def test_the_framework_libraries_reach_the_core_only_through_the_c_api():
    # The TF op library and JAX's handler are compiled on the user's machine
    # against api.h alone: they submit through hvdlite_enqueue (Note [One way
    # in]), never the Session or the core.
    layers = ("common/", "core/", "transport/", "api/", "python/")
    offenders = [f"{path.relative_to(ROOT)}:{number}: {included}"
                 for folder in ("tensorflow", "jax") for path in _sources(CSRC / folder)
                 for number, included in cpp_includes(path)
                 if included.startswith(layers) and included != "api/api.h"]
    assert not offenders, "\n".join(offenders)
