"""Compiles the fake CUDA runtime and NCCL of this folder (and variants) into
shared libraries for the tests; needs only a C compiler."""
import atexit
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Note [Fake libraries built once]
# Many tests (of several files) want the same library: the same source, the
# same soname and defines. A test process compiles each once and copies it
# where later tests ask for it (a copy: a test may place, rename or change
# its own). Keyed by the compiler and every source and header of this folder,
# so an edit is never served a stale build; kept in a private folder of this
# process (mkdtemp: mode 0700), removed when it exits, so nothing is shared
# with another user or run.
_BUILT = {}
_KEPT = []  # the private folder, once made
# The files each library is built from (fake_cuda.h says what they share).
PARTS = {"fake_cudart.c": ("fake_cudart.c", "fake_cuda_streams.c", "fake_cuda_races.c", "fake_cuda_capture.c")}


def compiler():
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    return None


def build(out_dir, source, name, soname, defines=()):
    """Builds HERE/source into out_dir/name (with that soname); returns its path."""
    out = Path(out_dir) / name
    sources = [str(HERE / part) for part in PARTS.get(source, (source,))]
    flags = ["-shared", "-fPIC", "-O1", "-Wall", f"-Wl,-soname,{soname}", *(f"-D{d}" for d in defines)]
    key = (_compiler_identity(), _sources_digest(), source, *flags)
    earlier = _BUILT.get(key)
    if earlier is not None and earlier.exists():
        partial = out.with_name(f".{out.name}.partial")
        shutil.copyfile(earlier, partial)
        partial.chmod(0o755)
        partial.replace(out)  # a new file, as the linker makes: a process may map the old one
        return out
    command = [compiler(), *flags, "-o", str(out), *sources, "-lpthread", "-lrt", "-ldl"]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"building {out} failed:\n{' '.join(command)}\n{built.stderr}")
    if not _KEPT:
        _KEPT.append(Path(tempfile.mkdtemp(prefix="hvdlite-fake-gpu-")))
        atexit.register(shutil.rmtree, _KEPT[0], True)
    _BUILT[key] = _KEPT[0] / str(len(_BUILT))
    shutil.copyfile(out, _BUILT[key])  # the test's own file may change
    return out


def _compiler_identity():
    """The compiler's path and modification time: an upgraded one rebuilds."""
    path = shutil.which(compiler())
    return path, Path(path).stat().st_mtime_ns


def _sources_digest():
    """A digest of every source and header of this folder (Note [Fake libraries built once])."""
    digest = hashlib.sha256()
    for path in sorted(HERE.glob("*.[ch]")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_cudart(out_dir, version=12080, defines=()):
    """The fake CUDA runtime of one release (CUDA encodes 12.8 as 12080): its
    file and soname are those of that generation, libcudart.so.12 for 12.x and
    libcudart.so.13 for 13.x, as the real ones are; one folder per version,
    since a process finds a loaded library again by its soname."""
    name = f"libcudart.so.{version // 1000}"
    folder = Path(out_dir) / f"cuda{version}"
    folder.mkdir(parents=True, exist_ok=True)
    return build(folder, "fake_cudart.c", name, name, defines=[f"FAKE_CUDART_VERSION={version}", *defines])


def build_empty(out_dir, name, soname):
    """A library that exports nothing hvdlite looks for."""
    source = Path(out_dir) / "empty.c"
    source.write_text("int not_nccl(void) { return 1; }\n")
    out = Path(out_dir) / name
    subprocess.run([compiler(), "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out),
                    str(source)], check=True, capture_output=True, text=True)
    return out


def environment(out_dir, version=12080, **extra):
    """The variables that make the core load this folder's fake CUDA runtime
    (of CUDA `version`) and NCCL, built into out_dir, with `extra` on top."""
    return {"HVDLITE_NCCL_LIBRARY": str(build(out_dir, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2")),
            "HVDLITE_CUDART_LIBRARY": str(build_cudart(out_dir, version)), **extra}
