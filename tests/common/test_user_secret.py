"""Tests hvdlite/common/user_secret.py: the secret of a job hvdliterun did
not start comes from HVDLITE_SECRET or a private file of the user's, never
from anything another user can read or compute."""
import os
import stat
import subprocess
import sys

import pytest

from hvdlite.common.user_secret import SecretError, job_secret, secret_file_path

# A uid that is not ours, to stand for another user of the cluster.
STRANGER_UID = 65534 if os.geteuid() != 65534 else 65533


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_secret_file_is_created_private_and_then_reused(tmp_path):
    env = {"HOME": str(tmp_path)}
    secret = job_secret(env)
    path = tmp_path / ".hvdlite" / "secret"
    assert secret_file_path(env) == str(path)
    assert mode(path.parent) == 0o700 and mode(path) == 0o600
    assert os.lstat(path).st_uid == os.geteuid()
    assert len(secret) == 32 and int(secret, 16) >= 0  # 128 bits, hex
    assert job_secret(env) == secret  # the next job (or rank) reads the same one
    assert [p.name for p in path.parent.iterdir()] == ["secret"]  # no temporary left


def test_ranks_starting_at_once_all_read_the_one_file_that_won(tmp_path):
    # Each rank of a new user's first job creates the file at the same time.
    code = ("import sys; from hvdlite.common.user_secret import job_secret; "
            "print(job_secret({'HOME': sys.argv[1]}))")
    ranks = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    secrets = {rank.communicate(timeout=60)[0].strip() for rank in ranks}
    assert all(rank.returncode == 0 for rank in ranks)
    assert secrets == {(tmp_path / ".hvdlite" / "secret").read_text().strip()}


def test_hvdlite_secret_file_names_another_file(tmp_path):
    path = tmp_path / "private" / "job.key"
    secret = job_secret({"HVDLITE_SECRET_FILE": str(path), "HOME": "/nonexistent"})
    assert path.read_text().strip() == secret and mode(path) == 0o600
    # HVDLITE_SECRET wins over any file.
    assert job_secret({"HVDLITE_SECRET": " abc ", "HVDLITE_SECRET_FILE": str(path)}) == "abc"


@pytest.mark.parametrize("value", ["", "  \n"])
def test_an_empty_secret_is_refused(tmp_path, value):
    with pytest.raises(SecretError, match="HVDLITE_SECRET is empty.*openssl rand -hex 16"):
        job_secret({"HVDLITE_SECRET": value, "HOME": str(tmp_path)})
    path = tmp_path / "empty"
    path.write_text(value)
    path.chmod(0o600)
    with pytest.raises(SecretError, match=f"the job secret file {path} is empty"):
        job_secret({"HVDLITE_SECRET_FILE": str(path)})


@pytest.mark.parametrize("file_mode", [0o640, 0o604])
def test_a_secret_file_others_can_read_is_refused(tmp_path, file_mode):
    env = {"HOME": str(tmp_path)}
    job_secret(env)
    path = tmp_path / ".hvdlite" / "secret"
    path.chmod(file_mode)
    with pytest.raises(SecretError, match=rf"{path} has mode 0{file_mode:o}: other users can "
                                          rf"read the secret. Remove it \(`rm {path}`"):
        job_secret(env)


def test_a_secret_folder_others_can_write_is_refused(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # mkdir's mode is masked by the umask
    with pytest.raises(SecretError, match=rf"folder {folder} has mode 0777: other users can "
                                          rf"replace the secret. Run `chmod go-w {folder}`"):
        job_secret({"HVDLITE_SECRET_FILE": str(folder / "secret")})
    assert not (folder / "secret").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_a_secret_file_or_folder_of_another_user_is_refused(tmp_path):
    env = {"HOME": str(tmp_path)}
    job_secret(env)
    path = tmp_path / ".hvdlite" / "secret"
    os.chown(path, STRANGER_UID, -1)
    with pytest.raises(SecretError, match=rf"{path} belongs to user id {STRANGER_UID}, not to "
                                          rf"you \(0\).*Remove it"):
        job_secret(env)
    os.chown(path, 0, -1)
    os.chown(path.parent, STRANGER_UID, -1)
    with pytest.raises(SecretError, match=rf"folder {path.parent} belongs to user id "
                                          rf"{STRANGER_UID}"):
        job_secret(env)


def test_a_symbolic_link_is_not_followed(tmp_path):
    env = {"HOME": str(tmp_path)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("planted\n")
    elsewhere.chmod(0o600)
    (tmp_path / ".hvdlite").mkdir(mode=0o700)
    (tmp_path / ".hvdlite" / "secret").symlink_to(elsewhere)
    with pytest.raises(SecretError, match=r"is not a plain file \(a symbolic link\?\)"):
        job_secret(env)


def test_no_home_and_no_file_says_how_to_provide_a_secret(tmp_path):
    missing = tmp_path / "no-such-home"
    with pytest.raises(SecretError, match=rf"cannot read or create the job secret file "
                                          rf"{missing}/.hvdlite/secret: No such file.*"
                                          rf"export HVDLITE_SECRET=.*HVDLITE_SECRET_FILE"):
        job_secret({"HOME": str(missing)})
