"""Horovod's own files (tests, examples) for running them unchanged through
the Horovod alias (hvdlite/alias): taken from a Horovod checkout named by
HVDLITE_HOROVOD_SOURCE, or from a git directory of Horovod's repository
(HVDLITE_HOROVOD_GIT, else the snapshot this project's machines keep in
/work/.mirror). Where neither is there (CI has no network), the tests that
need them skip and say so."""
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

MIRROR_GIT_DIR = "/work/.mirror/horovod+horovod/repo"
BOOTSTRAP_DIR = Path(__file__).resolve().parents[1] / "hvdlite" / "alias" / "bootstrap"


def _git_dir():
    for candidate in (os.environ.get("HVDLITE_HOROVOD_GIT"), MIRROR_GIT_DIR):
        if not candidate:
            continue
        path = Path(candidate)
        path = path / ".git" if (path / ".git").is_dir() else path
        if (path / "HEAD").is_file():
            return path
    return None


def extract(paths, into):
    """Copies Horovod's files `paths` (relative to its repository) under
    `into`; skips the calling test when no Horovod source is available."""
    checkout = os.environ.get("HVDLITE_HOROVOD_SOURCE")
    if checkout:
        for path in paths:
            source = Path(checkout) / path
            if not source.exists():
                pytest.skip(f"HVDLITE_HOROVOD_SOURCE={checkout} has no {path}")
            target = Path(into) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            copy = shutil.copytree if source.is_dir() else shutil.copy2
            copy(source, target)
        return Path(into)
    git_dir = _git_dir()
    if git_dir is None or shutil.which("git") is None:
        pytest.skip("Horovod's sources are not here: set HVDLITE_HOROVOD_SOURCE to a checkout "
                    "of github.com/horovod/horovod (or HVDLITE_HOROVOD_GIT to its git directory)")
    archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", "HEAD",
                              *paths], capture_output=True, timeout=60)
    if archive.returncode != 0:
        pytest.skip(f"Horovod's git directory {git_dir} lacks some of {paths}: "
                    f"{archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return Path(into)


def alias_environment(extra_path=()):
    """The environment of a process that runs Horovod's files through the
    alias: horovod imports resolve to hvdlite (in it and in every process it
    starts), `python` is this interpreter, and Horovod's test dependency
    `mock` is the standard library's unittest.mock where it is not installed
    (written next to the extracted files, `extra_path`). Horovod's
    TensorFlow files are written for Keras 2 (`optimizer.lr`): where
    tf_keras is installed, `tf.keras` is it (TF_USE_LEGACY_KERAS=1), as in
    the TensorFlow releases Horovod supports."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("HVDLITE_", "HOROVOD_")) and name not in (
                "HVDLITE_HOROVOD_SOURCE", "HVDLITE_HOROVOD_GIT"):
            del env[name]
    env["HVDLITE_HOROVOD_ALIAS"] = "on"
    env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP_DIR), *map(str, extra_path)])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    if importlib.util.find_spec("tf_keras") is not None:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def mock_shim(into):
    """A `mock` module (unittest.mock) under `into` when `mock` is not installed."""
    try:
        import mock  # noqa: F401
    except ImportError:
        Path(into).mkdir(parents=True, exist_ok=True)
        (Path(into) / "mock.py").write_text(
            '"""Horovod\'s tests import `mock`: the standard library\'s."""\n'
            "from unittest.mock import *  # noqa: F401,F403\n")
    return Path(into)
