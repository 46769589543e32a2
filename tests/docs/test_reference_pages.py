"""The documentation site as a reader opens it: built once, as `make docs`
builds it (strict), then read as HTML. No link is drawn inside a code block,
nothing in a shell block is coloured like one, and each binding's API
reference begins with what a training script calls (docs/hooks/reference_order.py)."""
import html.parser
import importlib.util
import re
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("mkdocs", reason="MkDocs comes with the docs tools: make venv-docs")
pytest.importorskip("griffe", reason="griffe comes with mkdocstrings: make venv-docs")

# Each binding, and the names they share (docs/reference/<last part>.md).
MODULES = ("hvdlite", "hvdlite.torch", "hvdlite.tensorflow", "hvdlite.keras", "hvdlite.jax",
           "hvdlite.numpy")


def _hook():
    spec = importlib.util.spec_from_file_location(
        "reference_order", REPO / "docs" / "hooks" / "reference_order.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(folder)], cwd=REPO, capture_output=True, text=True, timeout=300,
                           env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert built.returncode == 0, built.stderr
    return folder


class _Reader(html.parser.HTMLParser):
    """The links inside <pre> blocks, and the ids of the reference's entries
    (h3 headings named hvdlite.*) in page order."""

    def __init__(self):
        super().__init__()
        self.depth, self.links_in_code, self.entries = 0, [], []

    def handle_starttag(self, tag, attributes):
        attributes = dict(attributes)
        if tag == "pre":
            self.depth += 1
        elif tag == "a" and self.depth:
            self.links_in_code.append((self.getpos()[0], attributes.get("href")))
        elif tag == "h3" and (attributes.get("id") or "").startswith("hvdlite."):
            self.entries.append(attributes["id"])

    def handle_endtag(self, tag):
        if tag == "pre" and self.depth:
            self.depth -= 1


def read(path):
    reader = _Reader()
    reader.feed(path.read_text())
    return reader


def test_no_code_block_holds_a_link(site):
    offenders = [f"{page.relative_to(site)}:{line}: <a href={href!r}> inside <pre>"
                 for page in sorted(site.rglob("*.html"))
                 for line, href in read(page).links_in_code]
    assert not offenders, "\n".join(offenders)


def test_the_home_pages_make_test_is_not_coloured_like_a_link(site):
    # Pygments' bash lexer calls `test` in `make test` a builtin (class nb),
    # which the theme colours like a link; docs/stylesheets/code.css gives
    # builtins in shell blocks the code's own colour.
    home = (site / "index.html").read_text()
    block = re.search(r'<div class="language-bash highlight"><pre>.*?make<span class="w"> '
                      r'</span><span class="(\w+)">test</span>', home, re.S)
    assert block, "the home page has no bash block with `make test`"
    assert 'href="stylesheets/code.css"' in home
    style = (site / "stylesheets" / "code.css").read_text()
    rule = re.search(r"([^{}]*\.language-bash[^{}]*)\{([^}]*)\}", style)
    assert rule and f".{block.group(1)}" in rule.group(1), style
    assert "color: var(--md-code-fg-color)" in rule.group(2), style


def test_the_torch_reference_starts_with_what_a_training_script_calls(site):
    entries = read(site / "reference" / "torch" / "index.html").entries
    assert entries[:6] == [f"hvdlite.torch.{name}" for name in
                           ("init", "shutdown", "is_initialized", "rank", "size", "local_rank")]
    position = {name.removeprefix("hvdlite.torch."): index for index, name in enumerate(entries)}
    # Collectives, then the optimizer wrapper and the broadcasts, before any
    # error class; the autograd Functions last of all.
    assert position["allreduce"] < position["DistributedOptimizer"] < \
        position["broadcast_parameters"] < position["HvdliteInternalError"]
    functions = [index for name, index in position.items() if name.startswith("Horovod")]
    assert functions and min(functions) > max(index for name, index in position.items()
                                              if not name.startswith("Horovod")), entries


@pytest.mark.parametrize("module", MODULES)
def test_every_exported_name_has_a_section(module):
    hook = _hook()
    missing = [name for name in hook.exported_names(module, REPO)
               if hook.section_of(name) is None]
    assert not missing, (f"{module} exports {missing}, which no section of "
                         "docs/hooks/reference_order.py shows: add each to SECTIONS")
    page = REPO / "docs" / "reference" / f"{module.split('.')[-1]}.md"
    assert hook.MARKER.findall(page.read_text()) == [module], \
        f"{page.relative_to(REPO)} lacks the line <!-- reference: {module} -->"
