"""Every public class, function and method of the modules the API reference
renders (the `::: module` lines of docs/reference/*.md) has a docstring.
Read statically with griffe, as mkdocstrings reads them for the site, so no
framework is imported and the check takes about a second.

Public: the module's __all__ where it has one, else the names not starting
with _ that are defined in the package (not re-exported from torch, numpy...);
a module among them is checked the same way (hvdlite.torch.elastic,
hvdlite.keras.callbacks), and so are the public methods a public class defines.

Each docstring also has the Google-style sections the reference renders,
read with griffe's Google parser under mkdocs.yml's options:
- Args: naming every parameter of a function or method, and no name that is
  not one (self, cls, *args/**kwargs pass-throughs and private _parameters
  need no entry; *args/**kwargs may have one);
- Returns: (or Yields:) where the function returns something: a return
  annotation other than None, or a `return <value>` of its own body (not of
  a function nested in it);
- Raises: where its own body has a `raise X` (a bare re-raise does not count);
- for a class whose own __init__ takes parameters: an Args: section naming
  them, in the class docstring or in __init__'s.
Exempt: property getters, dunder methods, and the hooks a framework calls
with a signature it fixes (a Keras callback's on_* methods, a
torch.autograd.Function's forward/backward): their parameters are the
framework's, documented there."""
import ast
import re
import textwrap

import pytest

from conftest import REPO

griffe = pytest.importorskip("griffe", reason="griffe comes with mkdocstrings[python]: "
                                              "make venv-docs")

def reference_modules():
    """The modules docs/reference/*.md renders, in page order: `::: module`
    lines and `<!-- reference: module -->` (docs/hooks/reference_order.py)."""
    modules = []
    for page in sorted((REPO / "docs" / "reference").glob("*.md")):
        modules += re.findall(r"^(?:::: |<!-- reference: )([\w.]+)(?: -->)?$", page.read_text(),
                              re.MULTILINE)
    return modules


def load(package, search_path):
    loader = griffe.GriffeLoader(search_paths=[str(search_path)])
    root = loader.load(package)
    loader.resolve_aliases(implicit=False, external=False)
    return root


def public_names(module):
    """(names, problems): the module's __all__ if it has one, else the names
    not starting with _ that the package itself defines (modules it imports
    for its own use are not among them)."""
    if module.exports is None:
        inside = module.package.path + "."
        return [name for name, member in module.members.items()
                if not name.startswith("_") and
                (not member.is_alias or member.target_path.startswith(inside)) and
                not member.is_module], []
    names = [name for name in module.exports if isinstance(name, str)]
    unread = [f"{module.path}.__all__ holds {name}, which griffe cannot expand: list the "
              f"names, or `*other.__all__`" for name in module.exports
              if not isinstance(name, str)]
    return names, unread


def public_objects(root, module_paths):
    """(objects, problems): the public modules, classes, functions and methods
    under module_paths, once each, and the names they export that cannot be
    found."""
    objects, problems, seen = [], [], set()

    def visit(obj, where):
        if obj.is_alias:
            try:
                obj = obj.final_target
            except griffe.AliasResolutionError as error:
                problems.append(f"{where}: cannot be resolved ({error})")
                return
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.is_module:
            objects.append(obj)
            names, unread = public_names(obj)
            problems.extend(unread)
            for name in names:
                if name not in obj.members:
                    problems.append(f"{obj.path}.{name}: in __all__ but not defined")
                else:
                    visit(obj.members[name], f"{obj.path}.{name}")
        elif obj.is_class or obj.is_function:
            objects.append(obj)
            if obj.is_class:
                for name, member in obj.members.items():
                    if not name.startswith("_") and not member.is_alias and member.is_function:
                        visit(member, f"{obj.path}.{name}")

    for path in module_paths:
        visit(root if path == root.path else root[path[len(root.path) + 1:]], path)
    return objects, problems


def undocumented(root, module_paths):
    """Paths of the public classes, functions and methods under module_paths
    without a docstring, and of names they export that cannot be found."""
    objects, problems = public_objects(root, module_paths)
    return problems + [obj.path for obj in objects if not obj.docstring]


VARIADIC = (griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword)
KIND = griffe.DocstringSectionKind


def sections(docstring):
    """{kind: [section, ...]} of a docstring read as the site reads it
    (mkdocs.yml's Google options), its parser's warnings silenced: the
    checks below say what is wrong."""
    parsed = griffe.parse_google(docstring, returns_named_value=False,
                                 returns_multiple_items=False, warn_missing_types=False,
                                 warnings=False)
    found = {}
    for section in parsed:
        found.setdefault(section.kind, []).append(section)
    return found


def own_statements(function):
    """The return and raise statements of the function's own body (not of
    functions or classes nested in it), read from its source."""
    tree = ast.parse(textwrap.dedent(function.source))
    body = tree.body[0]
    found, todo = [], list(ast.iter_child_nodes(body))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.Return, ast.Raise)):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def named_parameters(function):
    """The parameters an Args: section must name: not self or cls, not *args
    or **kwargs (pass-throughs, documented where they are more), not the
    private ones (leading _, for hvdlite's own callers)."""
    return [p.name for p in function.parameters
            if p.name not in ("self", "cls") and p.kind not in VARIADIC and
            not p.name.startswith("_")]


def framework_hook(method):
    """A method the framework calls with a signature it fixes: a Keras
    callback's on_* hooks, a torch.autograd.Function's forward/backward."""
    return method.parent.is_class and (
        method.name.startswith("on_") or
        (method.name in ("forward", "backward") and method.parameters and
         method.parameters[0].name == "ctx"))


def args_problems(path, parameters, found):
    """What the Args: sections in found miss or name wrongly against parameters."""
    if not parameters:
        return []
    if KIND.parameters not in found:
        return [f"{path}: no Args: section for {', '.join(parameters)}"]
    named = {item.name.lstrip("*") for section in found[KIND.parameters]
             for item in section.value}
    problems = [f"{path}: Args: lacks {name}" for name in parameters if name not in named]
    return problems + [f"{path}: Args: names {name}, which is no parameter"
                       for name in sorted(named - set(parameters))
                       if name not in ("args", "kwargs")]


def incomplete(objects):
    """The docstring sections the public functions, methods and classes among
    objects lack (see test_every_public_docstring_has_its_sections)."""
    problems = []
    for obj in objects:
        if not obj.docstring or obj.is_module or obj.name.startswith("__"):
            continue
        if obj.is_class:
            init = obj.members.get("__init__")
            if init is None or init.is_alias or not init.is_function:
                continue
            found = sections(obj.docstring)
            if init.docstring and KIND.parameters not in found:
                found = sections(init.docstring)
            problems += args_problems(obj.path, named_parameters(init), found)
            continue
        if "property" in obj.labels or framework_hook(obj):
            continue
        found = sections(obj.docstring)
        problems += args_problems(obj.path, named_parameters(obj), found)
        statements = own_statements(obj)
        annotation = str(obj.returns) if obj.returns is not None else None
        returns = (annotation not in (None, "None", "NoReturn")) or any(
            isinstance(node, ast.Return) and node.value is not None and
            not (isinstance(node.value, ast.Constant) and node.value.value is None)
            for node in statements)
        if returns and KIND.returns not in found and KIND.yields not in found:
            problems.append(f"{obj.path}: returns a value, but has no Returns: section")
        if any(isinstance(node, ast.Raise) and node.exc is not None for node in statements) \
                and KIND.raises not in found:
            problems.append(f"{obj.path}: raises, but has no Raises: section")
    return problems


def test_the_reference_renders_every_binding():
    modules = reference_modules()
    assert {"hvdlite", "hvdlite.torch", "hvdlite.tensorflow", "hvdlite.keras", "hvdlite.jax",
            "hvdlite.numpy", "hvdlite.ray", "hvdlite.spark", "hvdlite.runner",
            "hvdlite.torch.elastic", "hvdlite.keras.callbacks"} <= set(modules)


def test_every_public_name_of_the_reference_has_a_docstring():
    missing = undocumented(load("hvdlite", REPO), reference_modules())
    assert missing == [], \
        "public names without a docstring (the API reference would skip them): " \
        "document them in Google style (Args/Returns/Raises)"


def test_every_public_docstring_has_its_sections():
    objects, _ = public_objects(load("hvdlite", REPO), reference_modules())
    problems = incomplete(objects)
    assert problems == [], \
        "docstrings without the sections the API reference needs (Google style, see " \
        "this file's docstring): " + "; ".join(problems)


def test_the_check_finds_what_is_missing(tmp_path):
    package = tmp_path / "fixture"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        '"""A package."""\n'
        "from os.path import join\n"
        "from fixture import sub\n"
        "from fixture.impl import Documented, bare\n"
        '__all__ = ["Documented", "bare", "sub", "ghost"]\n')
    (package / "impl.py").write_text(
        '"""Its implementation."""\n'
        "def bare(x):\n    return x\n\n"
        'class Documented:\n    """Has one."""\n'
        '    def method(self):\n        pass\n'
        '    def _private(self):\n        pass\n'
        '    def told(self):\n        """Told."""\n')
    (package / "sub" / "__init__.py").write_text(
        "from os.path import join\n"
        "def undocumented_here():\n    pass\n"
        "def _hidden():\n    pass\n")
    missing = undocumented(load("fixture", tmp_path), ["fixture"])
    assert sorted(missing) == sorted([
        "fixture.impl.bare", "fixture.impl.Documented.method", "fixture.sub",
        "fixture.sub.undocumented_here", "fixture.ghost: in __all__ but not defined"])


def test_the_section_check_finds_what_is_missing(tmp_path):
    package = tmp_path / "sections"
    package.mkdir()
    (package / "__init__.py").write_text('''"""A package."""


def complete(a, b=1, *args, _private=None, **kwargs):
    """Adds.

    Args:
        a (int): one.
        b (int): the other.

    Returns:
        int: the sum.

    Raises:
        ValueError: for a negative `a`.
    """
    if a < 0:
        raise ValueError(a)

    def nested():
        return 1
    return a + b


def lacks_an_entry(a, b):
    """Args without b.

    Args:
        a: one.
    """


def names_a_stranger(a):
    """Args with a name that is no parameter.

    Args:
        a: one.
        c: none.
    """


def lacks_returns(a):
    """Returns without saying so.

    Args:
        a: one.
    """
    return a


def annotated() -> int:
    """Annotated, without Returns."""


def lacks_raises():
    """Raises without saying so; a bare re-raise and a nested function's
    return do not count."""
    try:
        pass
    except OSError:
        raise

    def nested():
        return 1
    raise KeyError("x")


def no_args_section(a):
    """Prose only about `a`."""


class Documented:
    """Takes x, but does not say so."""

    def __init__(self, x):
        self.x = x

    @property
    def value(self):
        """The value (a property: exempt)."""
        return self.x

    def on_epoch_end(self, epoch, logs=None):
        """A framework hook (exempt)."""


class InInit:
    """Its __init__ says what it takes."""

    def __init__(self, x):
        """Makes one.

        Args:
            x: the value.
        """
''')
    objects, problems = public_objects(load("sections", tmp_path), ["sections"])
    assert problems == []
    assert sorted(incomplete(objects)) == sorted([
        "sections.lacks_an_entry: Args: lacks b",
        "sections.names_a_stranger: Args: names c, which is no parameter",
        "sections.lacks_returns: returns a value, but has no Returns: section",
        "sections.annotated: returns a value, but has no Returns: section",
        "sections.lacks_raises: raises, but has no Raises: section",
        "sections.no_args_section: no Args: section for a",
        "sections.Documented: no Args: section for x"])
