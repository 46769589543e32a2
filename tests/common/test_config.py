"""hvdlite/common/config.py, the one Python reader of HVDLITE_*/HOROVOD_*
variables: parsing, aliases, errors, and the table of docs/environment.md
held to it and to csrc/core/config.cc."""
import logging
import re

import pytest

from conftest import REPO
from hvdlite.common import config, defaults

PAGE = "docs/environment.md"
ENVIRONMENT_PAGE = (REPO / PAGE).read_text()
CONFIG_CC = (REPO / "csrc/core/config.cc").read_text()


def documented_table():
    """{HVDLITE_ name: its default cell} over the rows of the table of
    docs/environment.md; `_X` after `HVDLITE_A` in one cell is
    HVDLITE_X, and `NAME` (3) gives NAME its own default."""
    table = {}
    for line in ENVIRONMENT_PAGE.splitlines():
        if not line.startswith("| `HVDLITE_"):
            continue
        first, default = [cell.strip() for cell in line.strip("|").split(" | ")][:2]
        for name, own in re.findall(r"`(HVDLITE_[A-Z0-9_]+|_[A-Z0-9_]+)`(?: \(([^)]*)\))?",
                                    first):
            table[name if name.startswith("HVDLITE_") else "HVDLITE" + name] = own or default
    return table


def core_names():
    """HVDLITE_ names csrc/core/config.cc reads: read.<kind>("X", ...) is
    HVDLITE_X (then HOROVOD_X), plus the names it spells out in full."""
    short = re.findall(r'read\.\w+\("([A-Z0-9_]+)"', CONFIG_CC)
    return {f"HVDLITE_{name}" for name in short} | \
        set(re.findall(r'"(HVDLITE_[A-Z0-9_]+)"', CONFIG_CC))


def test_the_page_and_config_cc_parsers_see_the_table_and_the_core():
    table, core = documented_table(), core_names()
    assert {"HVDLITE_CYCLE_TIME", "HVDLITE_JAX_FFI", "HVDLITE_STORE_PORT"} <= set(table)
    assert table["HVDLITE_AUTOTUNE_WARMUP_SAMPLES"] == "3"
    assert {"HVDLITE_CYCLE_TIME", "HVDLITE_SECRET", "HVDLITE_GPU_ALLREDUCE"} <= core
    assert len(core) > 40


def test_every_setting_is_documented_with_the_readers_default():
    table = documented_table()
    for variable in config.VARIABLES.values():
        if variable.role != "setting":
            continue
        assert variable.name in table, f"{variable.name} is missing from {PAGE}'s table"
        cell = table[variable.name]
        assert cell.startswith(variable.readme_default), \
            f"{variable.name}: {PAGE} says {cell!r}, config.py {variable.readme_default!r}"
        word = cell.split()[0].strip("`")
        if word == "unset":
            assert variable.default is None, f"{variable.name}: {PAGE} says unset"
        elif variable.default is not None:  # the documented value means the default
            assert variable.parse(word) == variable.default, \
                f"{variable.name}: {PAGE}'s {word!r} reads as {variable.parse(word)!r}, " \
                f"not {variable.default!r}"


def test_every_documented_variable_is_read_by_python_or_the_core():
    unread = set(documented_table()) - set(config.VARIABLES) - core_names()
    assert not unread, f"{PAGE} documents variables nothing declares: {sorted(unread)}"


def test_layout_variables_are_documented_as_set_by_the_launcher():
    table = documented_table()
    for variable in config.VARIABLES.values():
        if variable.role == "layout" and variable.name in table:
            assert table[variable.name].startswith(("set by", "`gethostname()`", "127.0.0.1")), \
                f"{variable.name}: {PAGE} shows it as a setting: {table[variable.name]!r}"


def test_settings_the_core_reads_too_have_its_horovod_name():
    core = core_names()
    for variable in config.VARIABLES.values():
        if variable.role == "setting" and variable.name in core:
            horovod = "HOROVOD_" + variable.name[len("HVDLITE_"):]
            assert variable.aliases == (horovod,), \
                f"{variable.name}: config.cc also reads {horovod}; Python reads {variable.aliases}"


def test_every_variable_is_described():
    for variable in config.VARIABLES.values():
        assert variable.role in ("setting", "layout"), variable
        assert variable.description and variable.accepts, variable
        assert re.fullmatch(r"HVDLITE_[A-Z0-9_]+", variable.name), variable


def test_get_parses_with_the_hvdlite_name_first_and_empty_as_unset():
    assert config.get("HVDLITE_START_TIMEOUT", {}) == defaults.RANK_START_TIMEOUT_S
    assert config.get("HVDLITE_START_TIMEOUT", {"HOROVOD_START_TIMEOUT": "7"}) == 7.0
    assert config.get("HVDLITE_START_TIMEOUT", {"HVDLITE_START_TIMEOUT": "5",
                                                "HOROVOD_START_TIMEOUT": "7"}) == 5.0
    assert config.get("HVDLITE_START_TIMEOUT", {"HVDLITE_START_TIMEOUT": "",
                                                "HOROVOD_START_TIMEOUT": "7"}) == 7.0
    assert config.get("HVDLITE_START_TIMEOUT", {}, default=30.0) == 30.0
    assert config.get("HVDLITE_LOG_LEVEL", {"HOROVOD_LOG_LEVEL": " Debug "}) == logging.DEBUG
    assert config.get("HVDLITE_JAX_FFI", {"HVDLITE_JAX_FFI": "off"}) is False
    assert config.get("HVDLITE_CONTROLLER", {"HOROVOD_CONTROLLER": " MPI"}) == "mpi"
    assert config.get("HVDLITE_ELASTIC", {"HOROVOD_ELASTIC": "1"}) is True


def test_a_bad_value_names_the_variable_the_value_and_what_is_accepted():
    with pytest.raises(config.SettingError,
                       match=r"^HOROVOD_START_TIMEOUT='soon' is not a number of seconds$"):
        config.get("HVDLITE_START_TIMEOUT", {"HOROVOD_START_TIMEOUT": "soon"})
    with pytest.raises(ValueError, match=r"^HVDLITE_JAX_FFI='maybe' is not 1 \(collectives"):
        config.get("HVDLITE_JAX_FFI", {"HVDLITE_JAX_FFI": "maybe"})
    with pytest.raises(ValueError, match=r"^HVDLITE_HOROVOD_ALIAS='sometimes' is not 1 .* or 0$"):
        config.get("HVDLITE_HOROVOD_ALIAS", {"HVDLITE_HOROVOD_ALIAS": "sometimes"})


def test_required_undeclared_raw_and_is_set():
    with pytest.raises(KeyError) as missing:
        config.required("HVDLITE_STORE_ADDR", {})
    assert missing.value.args[0] == "HVDLITE_STORE_ADDR"
    assert config.required("HVDLITE_STORE_PORT", {"HVDLITE_STORE_PORT": "4000"}) == 4000
    with pytest.raises(KeyError, match="not declared in hvdlite/common/config.py"):
        config.get("HVDLITE_NO_SUCH_THING", {})
    assert config.raw("HVDLITE_SECRET", {"HVDLITE_SECRET": ""}) == ""
    assert config.raw("HVDLITE_SECRET", {}) is None
    assert config.is_set("HVDLITE_RANK", {"HOROVOD_RANK": ""})
    assert not config.is_set("HVDLITE_RANK", {"RANK": "0"})
    assert config.hvdlite_variables({"HVDLITE_A": "1", "HOROVOD_B": "", "PATH": "/x"}) == \
        {"HVDLITE_A": "1", "HOROVOD_B": ""}
