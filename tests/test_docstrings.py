"""Every public class, function and method of the modules the API reference
renders (the `::: module` lines of docs/reference/*.md) has a docstring.
Read statically with griffe, as mkdocstrings reads them for the site, so no
framework is imported and the check takes about a second.

Public: the module's __all__ where it has one, else the names not starting
with _ that are defined in the package (not re-exported from torch, numpy...);
a module among them is checked the same way (hvdlite.torch.elastic,
hvdlite.keras.callbacks), and so are the public methods a public class defines."""
import re

import pytest

from conftest import REPO

griffe = pytest.importorskip("griffe", reason="griffe comes with mkdocstrings[python]: "
                                              "make venv-docs")

def reference_modules():
    """The modules docs/reference/*.md renders, in page order."""
    modules = []
    for page in sorted((REPO / "docs" / "reference").glob("*.md")):
        modules += re.findall(r"^::: ([\w.]+)$", page.read_text(), re.MULTILINE)
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


def undocumented(root, module_paths):
    """Paths of the public classes, functions and methods under module_paths
    without a docstring, and of names they export that cannot be found."""
    missing, seen = [], set()

    def visit(obj, where):
        if obj.is_alias:
            try:
                obj = obj.final_target
            except griffe.AliasResolutionError as error:
                missing.append(f"{where}: cannot be resolved ({error})")
                return
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.is_module:
            if not obj.docstring:
                missing.append(obj.path)
            names, problems = public_names(obj)
            missing.extend(problems)
            for name in names:
                if name not in obj.members:
                    missing.append(f"{obj.path}.{name}: in __all__ but not defined")
                else:
                    visit(obj.members[name], f"{obj.path}.{name}")
        elif obj.is_class or obj.is_function:
            if not obj.docstring:
                missing.append(obj.path)
            if obj.is_class:
                for name, member in obj.members.items():
                    if not name.startswith("_") and not member.is_alias and member.is_function:
                        visit(member, f"{obj.path}.{name}")

    for path in module_paths:
        visit(root if path == root.path else root[path[len(root.path) + 1:]], path)
    return missing


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
