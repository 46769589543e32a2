"""README.md and the documentation pages (docs/) against the code: the
launcher's flag table (docs/launching.md) against `hvdliterun --help` (both
ways), the environment-variable table (docs/environment.md) against what the
code reads and its defaults, every shell block either run here or marked
`notrun`, README's links into docs/ resolving, and README's quick start run
as written."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from hvdlite.common import compiled_library, config, defaults, rendezvous, user_secret
from hvdlite.runner import arguments

README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
CONFIG_CC = (REPO / "csrc/core/config.cc").read_text()
CONFIG_H = (REPO / "csrc/core/config.h").read_text()
PYTHON_SOURCES = "\n".join(path.read_text() for path in (REPO / "hvdlite").rglob("*.py"))


def page(name):
    return (DOCS / name).read_text()


def section(title):
    """A `## title` section of README.md."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else len(README)]


def table_rows(text, header):
    """The rows (lists of cells) of the table in `text` whose header row starts with `header`."""
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


# --- flags -----------------------------------------------------------------------

def readme_flags():
    flags = set()
    for row in table_rows(page("launching.md"), "| flag | variable it sets |"):
        for code in re.findall(r"`([^`]+)`", row[0]):
            flags.add(code.split()[0])
    return flags


def help_text():
    return subprocess.run([sys.executable, "-m", "hvdlite.runner", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True).stdout


def test_every_flag_in_the_readme_is_in_help_and_the_reverse():
    text = help_text()
    in_help = set(re.findall(r"(?<![\w-])(--?[A-Za-z][a-z-]*(?:=force)?)", text))
    documented = readme_flags()
    assert documented - in_help == set(), "flags in docs/launching.md's table missing from --help"
    parser = arguments.build_parser()
    options = {option for action in parser._actions for option in action.option_strings
               if option not in ("-h", "--help")}
    assert options - documented == set(), "hvdliterun flags missing from docs/launching.md's table"
    assert options - in_help == set(), "flags missing from --help"


# --- environment variables -------------------------------------------------------

def readme_variables():
    """{name: its documented default} from the table of docs/environment.md;
    `HVDLITE_A` (3) in the first column gives A its own default."""
    variables = {}
    for first, default, _ in table_rows(page("environment.md"), "| variable |"):
        prefix = None
        for name, own in re.findall(r"`(HVDLITE_[A-Z_]+|_[A-Z_]+)`(?: \(([^)]*)\))?", first):
            if name.startswith("HVDLITE_"):
                prefix = "HVDLITE"
            variables[name if name.startswith("HVDLITE_") else prefix + name] = own or default
    return variables


def core_default(short):
    """The C++ default of the variable the core reads as `short`, or None when
    the core does not read it (csrc/core/config.cc and config.h)."""
    match = re.search(rf'read\.\w+\("{short}", &(c\.)?(\w+)', CONFIG_CC)
    if match is None:
        return None
    source = CONFIG_H if match.group(1) else CONFIG_CC
    declared = re.search(rf"(\w+(?:::\w+)?) {match.group(2)}(?: = ([^;]+))?;", source)
    value = (declared.group(2) or "").strip()
    if declared.group(1) == "std::string":
        return value.strip('"')
    if value in ("true", "false"):
        return float(value == "true")
    return float(eval(re.sub(r"(\d)LL\b", r"\1", value)))  # e.g. 128LL * 1024 * 1024


# Defaults the table states in words, each checked against the code here.
IN_WORDS = {
    "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": lambda: "kStallShutdownFactor = 10.0" in CONFIG_H,
    "HVDLITE_CUDA_DEVICE": lambda: core_default("CUDA_DEVICE") == -1,  # -1: the local rank
    "HVDLITE_HOSTNAME": lambda: core_default("HOSTNAME") == "",  # "": gethostname()
    "HVDLITE_GPU_LIBRARY_PATH": lambda: core_default("GPU_LIBRARY_PATH") == "",
    "HVDLITE_RENDEZVOUS_ROUND": lambda: core_default("RENDEZVOUS_ROUND") == -1,
    # "": the TCP transport listens on and advertises 127.0.0.1.
    "HVDLITE_BIND_ADDR": lambda: core_default("BIND_ADDR") == "" and 'host.empty() ? '
    '"127.0.0.1"' in (REPO / "csrc/transport/tcp/socket.cc").read_text(),
    "HVDLITE_AUTOTUNE": lambda: core_default("AUTOTUNE") == 0.0,  # off
    "HVDLITE_AUTOTUNE_LOG": lambda: core_default("AUTOTUNE_LOG") == "",  # off
    # -1: unset, the automatic choice (Note [Two-level allreduce]).
    "HVDLITE_HIERARCHICAL_ALLREDUCE": lambda: core_default("HIERARCHICAL_ALLREDUCE") == -1,
    "HVDLITE_HIERARCHICAL_ALLGATHER": lambda: core_default("HIERARCHICAL_ALLGATHER") == -1,
    "HVDLITE_JAX_FFI": lambda: _jax_ffi_wanted_by_default(),
    "HVDLITE_SECRET_FILE": lambda: user_secret.secret_file_path({"HOME": "/h"})
    == "/h/.hvdlite/secret",
    # Unset: the same field keeps HVDLITE_START_TIMEOUT's default.
    "HVDLITE_GLOO_TIMEOUT_SECONDS": lambda: '"GLOO_TIMEOUT_SECONDS", &c.start_timeout_s'
    in CONFIG_CC and rendezvous.start_timeout({}) == core_default("START_TIMEOUT"),
    "HVDLITE_CACHE_DIR": lambda: compiled_library.cache_dir("x").endswith(
        os.path.join("hvdlite", "x")),
}


def _jax_ffi_wanted_by_default():
    from hvdlite.jax import ffi
    saved = {k: os.environ.pop(k) for k in ("HVDLITE_JAX_FFI",) if k in os.environ}
    try:
        return ffi._ffi_wanted() is True
    finally:
        os.environ.update(saved)


def readme_default(text):
    word = text.split()[0].strip("`")
    if word == "unset":
        return ""
    try:
        return float(word)
    except ValueError:
        return word


@pytest.mark.parametrize("name, default", sorted(readme_variables().items()))
def test_each_documented_variable_is_read_with_its_default(name, default):
    short = name[len("HVDLITE_"):]
    core = core_default(short)
    read_by_python = re.search(rf"['\"]{name}['\"]", PYTHON_SOURCES) is not None
    assert core is not None or read_by_python, f"{name} is documented but nothing reads it"
    if default.startswith("set by"):
        return  # the launcher's own variables
    if name in IN_WORDS:
        assert IN_WORDS[name](), f"{name}: the code's default is not README's {default!r}"
        return
    if core is None:  # read in Python only: tests/common/test_config.py compares the
        assert name in config.VARIABLES, f"{name} is read in Python but not declared in " \
            "hvdlite/common/config.py"  # default with the reader's
        return
    assert readme_default(default) == core, f"{name}: README says {default!r}, the code {core!r}"


def test_start_timeout_defaults_agree():
    # The core and init() without hvdliterun wait 60 s; hvdliterun passes its
    # --start-timeout (horovodrun's 30 s) to the ranks.
    row = readme_variables()["HVDLITE_START_TIMEOUT"]
    assert row.startswith("60 (`hvdliterun` sets it to its `--start-timeout`, default 30)")
    assert core_default("START_TIMEOUT") == defaults.RANK_START_TIMEOUT_S == 60
    assert rendezvous.start_timeout({}) == 60
    parsed = arguments.parse_args(["-np", "1", "true"])
    assert parsed.start_timeout == defaults.START_TIMEOUT_S == 30
    assert "else 30 (horovodrun's)" in page("launching.md")


# --- shell blocks ----------------------------------------------------------------

QUICK_START_COMMAND = "hvdliterun -np 2 python train.py"


def shell_blocks(text):
    return re.findall(r"^```(bash|sh|shell|console)([^\n]*)\n(.*?)^```", text,
                      re.MULTILINE | re.DOTALL)


def documents():
    """{path relative to the repository: text} of README.md and every page under docs/."""
    paths = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    return {str(path.relative_to(REPO)): path.read_text() for path in paths}


def test_each_shell_block_is_run_here_or_marked_notrun():
    unmarked = [(name, body.strip()) for name, text in documents().items()
                for _, info, body in shell_blocks(text) if info.strip() != "notrun"]
    assert unmarked == [("README.md", QUICK_START_COMMAND)], \
        "a shell block neither run by this test nor marked ```bash notrun"


def test_no_example_writes_into_the_source_tree():
    for name, text in documents().items():
        for _, _, body in shell_blocks(text):
            assert not re.search(r">>? *(examples|hvdlite|tests)/", body), f"{name}: {body}"


# --- README's links into the documentation ---------------------------------------

def heading_anchors(text):
    """The anchors GitHub and MkDocs both give the headings of `text` (outside code)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    titles = re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower())
            for title in titles}


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", README)
    assert any(target.startswith("docs/") for target, _ in links)
    for target, anchor in links:
        assert (REPO / target).is_file(), f"README links {target}, which does not exist"
        if anchor:
            assert anchor in heading_anchors((REPO / target).read_text()), \
                f"README links {target}#{anchor}, which has no such heading"


def test_heading_anchors_match_the_renderers():
    anchors = heading_anchors("# Keras 3 and Keras 2 (tf-keras)\n## Uneven data: join()\n"
                              "```\n# not a heading\n```\n")
    assert anchors == {"keras-3-and-keras-2-tf-keras", "uneven-data-join"}


@pytest.mark.timeout(120)
def test_the_quick_start_runs_as_written(tmp_path):
    quick_start = section("Quick start (NumPy)")
    program = re.search(r"```python\n(.*?)```", quick_start, re.DOTALL).group(1)
    (tmp_path / "train.py").write_text(program + "print('ok', hvd.rank(), avg.tolist(), "
                                       "total.tolist(), rows.tolist())\n")
    assert f"```bash\n{QUICK_START_COMMAND}\n```" in quick_start
    command = QUICK_START_COMMAND.replace("hvdliterun", f"{sys.executable} -m hvdlite.runner", 1)
    command = command.replace(" python ", f" {sys.executable} ")
    result = subprocess.run(command.split(), cwd=tmp_path, capture_output=True, text=True,
                            timeout=100)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert f"[{rank}]<stdout>:ok {rank} [0.5, 0.5, 0.5, 0.5] [1.0, 1.0, 1.0, 1.0] " \
               f"[0, 0, 1]" in result.stdout, result.stdout
