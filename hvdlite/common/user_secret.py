"""The job secret of a job that hvdliterun did not start (srun, mpirun with
or without mpi4py, torchrun, a store address the user set): one no other
user can compute.

    secret = job_secret(os.environ)

It is HVDLITE_SECRET when that is set, and otherwise the user's own secret
file, HVDLITE_SECRET_FILE or ~/.hvdlite/secret: home folders are shared by a
cluster's nodes, so every rank of the job reads the same one. The first job
creates it (128 bits from the CSPRNG, mode 0600 in a 0700 folder); later ones
reuse it. A file that another user owns, or that others may read, is refused:
whoever can read it could log into the job's store, join the mesh and run
code in every rank (unpickled objects).
"""
import contextlib
import hashlib
import hmac
import os
import pwd
import secrets
import stat
import tempfile

from hvdlite.common import config

SECRET_VARIABLE = config.declared("HVDLITE_SECRET").name
FILE_VARIABLE = config.declared("HVDLITE_SECRET_FILE").name
DEFAULT_FILE = config.declared("HVDLITE_SECRET_FILE").default

HOW_TO_PROVIDE = (
    f"give every rank the same secret: `export {SECRET_VARIABLE}=$(openssl rand -hex 16)` "
    f"before starting the job, or let hvdlite create one in a file of yours that every node "
    f"sees ({DEFAULT_FILE} under a shared $HOME, or the path in {FILE_VARIABLE}), or start "
    f"the job with hvdliterun, which makes one per job")


class SecretError(ValueError):
    """No private secret is available; the message says how to provide one."""


def job_secret(environ):
    """HVDLITE_SECRET, else the contents of the user's secret file (created
    on first use). Raises SecretError when neither gives a private secret."""
    given = config.raw(SECRET_VARIABLE, environ)  # set but empty is refused, not ignored
    if given is not None:
        return checked_secret(given, SECRET_VARIABLE)
    path = secret_file_path(environ)
    try:
        return read_or_create(path)
    except OSError as error:
        raise SecretError(f"cannot read or create the job secret file {path}: "
                          f"{error.strerror or error}; {HOW_TO_PROVIDE}") from error


def checked_secret(value, where):
    """The secret with surrounding white space removed; refuses an empty one."""
    value = value.strip()
    if not value:
        raise SecretError(f"{where} is empty: an empty secret lets anyone into the job's "
                          f"store and data connections; {HOW_TO_PROVIDE}")
    return value


def fingerprint(secret):
    """A short public token that is equal for equal secrets: ranks compare it
    (over mpirun's connections) to find one that read another secret, say a
    node whose $HOME is not the shared one. An HMAC under the secret of a
    fixed label: learning it tells no more about the secret than one store
    handshake does."""
    digest = hmac.new(secret.encode(), b"hvdlite-secret-fingerprint", hashlib.sha256)
    return digest.hexdigest()[:16]


def secret_file_path(environ):
    """HVDLITE_SECRET_FILE, else ~/.hvdlite/secret, with ~ the HOME of
    `environ` (else the password database's home folder)."""
    configured = config.raw(FILE_VARIABLE, environ)
    if configured is not None and not configured.strip():
        raise SecretError(f"{FILE_VARIABLE} is set but empty; unset it or name a file")
    path = configured or DEFAULT_FILE
    if path == "~" or path.startswith("~/"):
        home = environ.get("HOME") or _home_in_password_database()
        if not home:
            raise SecretError(f"cannot find a home folder for {path} (HOME is not set); "
                              f"{HOW_TO_PROVIDE}")
        path = os.path.join(home, path[2:])
    return os.path.abspath(path)


def _home_in_password_database():
    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return None


def read_or_create(path):
    """The secret in `path`, created first when missing. Checks the folder
    and the file (owner and mode, without following links) before reading."""
    folder = os.path.dirname(path)
    _make_private_folder(folder)
    _check_owned_by_user(folder, os.lstat(folder), stat.S_ISDIR, "folder", 0o022,
                         "Run `chmod go-w {path}`")
    try:
        return _read(path)
    except FileNotFoundError:
        pass  # the first job of this user: make one
    try:
        _create(path, folder)
    except FileExistsError:
        pass  # another rank of this job made it just now
    return _read(path)


def _make_private_folder(folder):
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass


def _create(path, folder):
    # Written in full under a private temporary name (mkstemp: O_CREAT|O_EXCL,
    # mode 0600), then linked to its name: link() fails when the name exists,
    # also over NFS, so ranks starting at once on several nodes all end up
    # reading the one file that won, and none reads a half-written one.
    fd, temporary = tempfile.mkstemp(prefix=".secret-", dir=folder)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_hex(16) + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.link(temporary, path)
    finally:
        os.unlink(temporary)


# Someone may have read a secret that others could read: a new one, not a
# chmod, makes it private again.
_REPLACE_FILE = "Remove it (`rm {path}`: the next job creates a new one, mode 0600)"


def _read(path):
    _check_owned_by_user(path, os.lstat(path), stat.S_ISREG, "file", 0o077, _REPLACE_FILE)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with contextlib.closing(os.fdopen(fd)) as file:
        opened = os.fstat(file.fileno())
        # The name may have been replaced between lstat() and open().
        _check_owned_by_user(path, opened, stat.S_ISREG, "file", 0o077, _REPLACE_FILE)
        return checked_secret(file.read(), f"the job secret file {path}")


def _check_owned_by_user(path, status, is_kind, kind, forbidden_mode, fix):
    if not is_kind(status.st_mode):
        raise SecretError(f"the job secret {kind} {path} is not a plain {kind} (a symbolic "
                          f"link?); remove it and start the job again, or set "
                          f"{FILE_VARIABLE} to a file of yours")
    if status.st_uid != os.geteuid():
        raise SecretError(f"the job secret {kind} {path} belongs to user id {status.st_uid}, "
                          f"not to you ({os.geteuid()}): its owner can read or replace the "
                          f"secret. Remove it (or set {FILE_VARIABLE} to a file of yours) "
                          f"and start the job again")
    mode = stat.S_IMODE(status.st_mode)
    if mode & forbidden_mode:
        raise SecretError(f"the job secret {kind} {path} has mode {mode:04o}: other users "
                          f"can {'read' if kind == 'file' else 'replace'} the secret. "
                          f"{fix.format(path=path)}, then start the job again")
