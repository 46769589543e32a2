"""Compiles the fake CUDA runtime and NCCL of this folder (and variants) into
shared libraries for the tests; needs only a C compiler."""
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
    command = [compiler(), "-shared", "-fPIC", "-O1", "-Wall", f"-Wl,-soname,{soname}",
               *(f"-D{d}" for d in defines), "-o", str(out), *sources, "-lpthread", "-lrt", "-ldl"]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"building {out} failed:\n{' '.join(command)}\n{built.stderr}")
    return out


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
