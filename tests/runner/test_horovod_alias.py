"""Tests hvdlite/alias (`hvdliterun --horovod-alias`, `python -m hvdlite.alias`):
a script written for Horovod runs unchanged on hvdlite, with the numbers of
the same script on hvdlite.torch and of one process trained on the whole
batch; an installed Horovod is left alone unless forced."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_launcher_command, run_ranks
from hvdlite import alias

torch = pytest.importorskip("torch")

WORKERS = Path(__file__).resolve().parent / "workers"
TRAIN = WORKERS / "horovod_train.py"
IMPORTS = WORKERS / "horovod_imports.py"
ALIAS_MESSAGE = "hvdlite: horovod imports resolve to hvdlite"
REAL_MESSAGE = "hvdlite: a real Horovod is installed at"
LAUNCHER = [sys.executable, "-m", "hvdlite.runner"]


def printed(result, tag):
    """The JSON rank 0 printed after `tag`."""
    lines = [line for line in result.lines(0) if line.startswith(tag + " ")]
    assert len(lines) == 1, result
    return json.loads(lines[0][len(tag) + 1:])


def messages(result, text):
    """(rank, line) of every stderr line of any rank that contains text."""
    return [(line.split("]", 1)[0].lstrip("["), line) for line in result.stderr.splitlines()
            if text in line]


def reference(size, batch=4, steps=3):
    """horovod_train.py's weights, from one process trained on every rank's rows."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(size * batch, 5, generator=generator, dtype=torch.float64)
        y = torch.randn(size * batch, 3, generator=generator, dtype=torch.float64)
        optimizer.zero_grad()
        # Mean over each rank's rows, averaged over ranks = mean over all rows.
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model.weight.detach(), model.bias.detach()


@pytest.fixture(scope="module")
def hvdlite_numbers(tmp_path_factory):
    """The same script importing hvdlite.torch, run without the alias."""
    script = tmp_path_factory.mktemp("hvdlite_script") / "hvdlite_train.py"
    text = TRAIN.read_text()
    assert "import horovod.torch as hvd\n" in text
    script.write_text(text.replace("import horovod.torch as hvd\n", "import hvdlite.torch as hvd\n"))
    numbers = {}
    for size in (3,):  # an odd size: a wrong average shows
        result = run_ranks(size, script, timeout=180).expect_ok()
        numbers[size] = printed(result, "RESULT")
    return numbers


def check_training(result, size, hvdlite_numbers):
    result.expect_ok()
    got = printed(result, "RESULT")
    assert got["module"] == "hvdlite.torch"
    assert got["size"] == size
    assert got["rank_sum"] == size * (size + 1) / 2
    assert got == hvdlite_numbers[size]  # the same code ran: bit for bit
    weight, bias = reference(size)
    torch.testing.assert_close(torch.tensor(got["weight"], dtype=torch.float64), weight,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.tensor(got["bias"], dtype=torch.float64), bias,
                               rtol=1e-12, atol=1e-12)
    said = messages(result, ALIAS_MESSAGE)
    assert [rank for rank, _ in said] == ["0"], result.stderr  # once, by rank 0


@pytest.mark.parametrize("size", [3])
def test_horovod_script_runs_unchanged_with_the_launcher_flag(size, hvdlite_numbers):
    result = run_ranks(size, TRAIN, timeout=180, launcher_args=["--horovod-alias"])
    check_training(result, size, hvdlite_numbers)


def test_horovod_script_runs_unchanged_under_python_m_hvdlite_alias(hvdlite_numbers):
    command = LAUNCHER + ["-np", "3", sys.executable, "-m", "hvdlite.alias", str(TRAIN)]
    result = run_launcher_command(command, "python -m hvdlite.alias", timeout=180)
    check_training(result, 3, hvdlite_numbers)


def run_python(*args, env=None, timeout=120):
    """One process, with the environment a test run has (no launcher)."""
    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    full_env.pop(alias.VARIABLE, None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=str(REPO / "tests"), timeout=timeout)


def imports_of(process):
    assert process.returncode == 0, process.stdout + process.stderr
    line = [line for line in process.stdout.splitlines() if line.startswith("IMPORTS ")]
    assert len(line) == 1, process.stdout
    return json.loads(line[0][len("IMPORTS "):])


def test_horovod_modules_are_hvdlites_own_objects():
    process = run_python("-m", "hvdlite.alias", IMPORTS, "--identity", "--tensorflow",
                         timeout=240)
    found = imports_of(process)
    expected = {"horovod": "hvdlite", "horovod.torch": "hvdlite.torch",
                "horovod.torch.elastic": "hvdlite.torch.elastic",
                "horovod.torch.mpi_ops": "hvdlite.torch.mpi_ops",
                "horovod.tensorflow.mpi_ops": "hvdlite.tensorflow.mpi_ops",
                "horovod.common.exceptions": "hvdlite.common.exceptions",
                "horovod.common.process_sets": "hvdlite.common.process_sets",
                "horovod.tensorflow": "hvdlite.tensorflow",
                "horovod.tensorflow.elastic": "hvdlite.tensorflow.elastic",
                "horovod.tensorflow.keras": "hvdlite.keras",
                "horovod.tensorflow.keras.elastic": "hvdlite.keras.elastic",
                "horovod.keras": "hvdlite.keras", "horovod.keras.elastic": "hvdlite.keras.elastic"}
    for name, target in expected.items():
        # __spec__ too: aliasing must not rename hvdlite's module.
        assert found[name] == {"name": target, "spec": target,
                               "file": found[name]["file"]}, (name, found[name])
    assert "No module named 'horovod.mxnet'" in found["horovod.mxnet"]["error"]
    assert "has no hvdlite.mxnet" in found["horovod.mxnet"]["error"]
    assert process.stderr.count(ALIAS_MESSAGE) == 1, process.stderr


def test_without_the_alias_import_horovod_fails_as_usual():
    for env in ({}, {"PYTHONPATH": alias.BOOTSTRAP_DIR}):  # the bootstrap alone turns nothing on
        process = run_python("-c", "import horovod", env=env)
        assert process.returncode == 1
        assert "ModuleNotFoundError: No module named 'horovod'" in process.stderr, env
    result = run_ranks(2, TRAIN, timeout=60)
    assert result.returncode != 0
    assert "No module named 'horovod'" in result.stderr


@pytest.fixture
def installed_horovod(tmp_path):
    """A stand-in for a real Horovod on PYTHONPATH."""
    package = tmp_path / "site" / "horovod"
    (package / "torch").mkdir(parents=True)
    (package / "__init__.py").write_text("FAKE = True\n")
    (package / "torch" / "__init__.py").write_text("FAKE = True\n")
    (package / "common").mkdir()
    (package / "common" / "__init__.py").write_text("")
    (package / "common" / "exceptions.py").write_text("class HorovodInternalError(RuntimeError): pass\n")
    (package / "common" / "process_sets.py").write_text("")
    return package


@pytest.mark.parametrize("flag, resolves_to_hvdlite", [("--horovod-alias", False),
                                                       ("--horovod-alias=force", True)])
def test_an_installed_horovod_is_used_unless_forced(flag, resolves_to_hvdlite, installed_horovod):
    command = LAUNCHER + ["-np", "2", flag, sys.executable, str(IMPORTS)]
    result = run_launcher_command(command, "horovod_imports.py", timeout=120,
                                  env={"PYTHONPATH": str(installed_horovod.parent)}).expect_ok()
    for rank in (0, 1):
        found = json.loads(result.lines(rank)[0][len("IMPORTS "):])
        if resolves_to_hvdlite:
            assert found["horovod.torch"]["name"] == "hvdlite.torch"
        else:
            assert found["horovod.torch"]["file"] == str(installed_horovod / "torch" / "__init__.py")
            assert found["horovod"]["name"] == "horovod"
            assert "error" in found["horovod.torch.elastic"]  # the stand-in has none
    said = messages(result, ALIAS_MESSAGE if resolves_to_hvdlite else REAL_MESSAGE)
    assert [rank for rank, _ in said] == ["0"], result.stderr
    if not resolves_to_hvdlite:
        assert str(installed_horovod) in said[0][1]
        assert "--horovod-alias=force" in said[0][1]


def test_the_flag_takes_no_value_from_the_command(monkeypatch):
    from hvdlite.runner.arguments import parse_args
    from hvdlite.runner.environment import tuning_environment
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    for flag, mode in (("--horovod-alias", "on"), ("--horovod-alias=force", "force")):
        args = parse_args(["-np", "2", flag, "python", "train.py"])
        assert args.command == ["python", "train.py"]
        env = tuning_environment(args)
        assert env[alias.VARIABLE] == mode
        assert env["PYTHONPATH"].split(os.pathsep) == [alias.BOOTSTRAP_DIR, "/somewhere"]
    assert alias.VARIABLE not in tuning_environment(parse_args(["-np", "2", "python", "t.py"]))


# --- horovod.runner: Horovod's launcher API (Note [Horovod runner adapters]) ---


def test_horovod_runner_names_resolve_to_the_adapters():
    assert alias.target_name("horovod.runner") == "hvdlite.alias.runner"
    assert alias.target_name("horovod.runner.launch") == "hvdlite.alias.runner.launch"
    assert alias.target_name("horovod.runner.elastic.driver") == \
        "hvdlite.alias.runner.elastic.driver"
    assert alias.target_name("horovod.torch.elastic") == "hvdlite.torch.elastic"


def test_run_elastic_reads_the_patched_constants_and_raises_as_horovod(monkeypatch):
    # Horovod's elastic tests patch these module attributes (mock.patch) and
    # expect them to take effect; a job's end becomes Horovod's RuntimeError.
    from hvdlite.alias.runner import gloo_run, launch
    from hvdlite.alias.runner.elastic import constants, driver
    from hvdlite.runner.elastic import launch as elastic_launch
    from hvdlite.runner.elastic.driver import Outcome
    from hvdlite.runner.elastic.source import Ending, Worker

    started = []
    outcomes = []

    def run(args, console, function_job=None, elastic_settings=None):
        started.append((args, elastic_settings))
        return outcomes.pop(0)

    monkeypatch.setattr(elastic_launch, "elastic_outcome", run)
    monkeypatch.setattr(driver, "DISCOVER_HOSTS_FREQUENCY_SECS", 0.01)
    monkeypatch.setattr(driver, "ELASTIC_TIMEOUT_SECS", 7)
    monkeypatch.setattr(gloo_run, "_get_min_start_hosts", lambda settings: 2)
    monkeypatch.delenv("HVDLITE_ELASTIC_TIMEOUT", raising=False)
    monkeypatch.delenv("HOROVOD_ELASTIC_TIMEOUT", raising=False)
    argv = ["horovodrun", "-np", "2", "--min-num-proc", "2", "--max-num-proc", "4",
            "--log-level", "DEBUG", "--host-discovery-script", "discover.sh",
            "--reset-limit", "1", "python", "train.py", "--logfile", "x"]
    monkeypatch.setattr(sys, "argv", argv)
    args = launch.parse_args()
    assert (args.num_proc, args.min_np, args.max_np) == (2, 2, 4)
    assert args.command == ["python", "train.py", "--logfile", "x"]
    outcomes.append(Outcome(0))
    assert launch._run_elastic(args) is None
    ran, settings = started[-1]
    assert settings.discovery_interval == 0.01 and settings.elastic_timeout == 7
    assert settings.min_start_hosts == 2 and ran.horovod_alias in alias.MODES

    outcomes.append(Outcome(1, stop_reason="reset", reset_limit_reached=True))
    with pytest.raises(RuntimeError, match=constants.RESET_LIMIT_EXCEEDED_MESSAGE.format(1)):
        launch._run_elastic(launch.parse_args())
    failed = Worker("h/1/3", 3, "127.0.0.1", 1, "127.0.0.1")
    failed.ending = Ending(False, "exited with code 5", exit_code=5)
    outcomes.append(Outcome(5, failure=failed))
    with pytest.raises(RuntimeError, match="Horovod detected that one or more processes exited "
                                           "with non-zero status(.|\n)*127.0.0.1\\[1\\](.|\n)*5"):
        launch._run_elastic(launch.parse_args())
    # A flag wins over the constants.
    monkeypatch.setattr(sys, "argv", argv[:1] + ["--discovery-interval", "0.5"] + argv[1:])
    outcomes.append(Outcome(0))
    launch._run_elastic(launch.parse_args())
    assert started[-1][1].discovery_interval == 0.5
