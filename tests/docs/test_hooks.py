"""docs/hooks/: the MkDocs hooks of the documentation site, each on a small
site of its own (mkdocs' default theme, no plugins: a second or two), built
strict as `make docs` builds the real one."""
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("mkdocs", reason="MkDocs comes with the docs tools: make venv-docs")

HOOKS = REPO / "docs" / "hooks"


def build(tmp_path, page):
    """Builds a one-page site in tmp_path/repo (docs/ beside an examples/
    folder, as in the repository); returns (exit code, output, site folder)."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "examples").mkdir()
    (repo / "examples" / "train.py").write_text("print('trained')\n")
    (repo / "docs" / "index.md").write_text(page)
    (repo / "mkdocs.yml").write_text(
        "site_name: fixture\nstrict: true\n"
        "validation:\n  not_found: warn\n  anchors: warn\n"
        f"hooks:\n  - {HOOKS / 'repo_files.py'}\n  - {HOOKS / 'notrun_fences.py'}\n"
        "markdown_extensions:\n  - pymdownx.superfences\n")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=repo,
                            capture_output=True, text=True, timeout=120)
    return result.returncode, result.stderr, repo / "site"


def test_a_linked_repository_file_is_copied_and_the_link_follows_it(tmp_path):
    code, output, site = build(tmp_path, "# Home\n\nRun [the example](../examples/train.py).\n")
    assert code == 0, output
    assert (site / "repo" / "examples" / "train.py").read_text() == "print('trained')\n"
    assert 'href="repo/examples/train.py"' in (site / "index.html").read_text()


def test_a_link_to_a_missing_repository_file_fails_the_build(tmp_path):
    code, output, _ = build(tmp_path, "# Home\n\nRun [it](../examples/missing.py).\n")
    assert code != 0
    assert "../examples/missing.py" in output


def test_a_notrun_shell_block_renders_as_code(tmp_path):
    code, output, site = build(tmp_path, "# Home\n\n```bash notrun\nmake demo\n```\n\nAfter.\n")
    assert code == 0, output
    html = (site / "index.html").read_text()
    # A code block (highlighted: "make<span ...> </span>demo"), and the text after it
    # outside it: without the hook the fence would not close there.
    assert "<code>make" in html and "<p>After.</p>" in html
    assert "notrun" not in html
