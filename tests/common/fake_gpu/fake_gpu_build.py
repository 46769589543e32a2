"""Compiles the fake CUDA runtime and NCCL of this folder (and variants) into
shared libraries for the tests; needs only a C compiler."""
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def compiler():
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return name
    return None


def build(out_dir, source, name, soname, defines=()):
    """Builds HERE/source into out_dir/name (with that soname); returns its path."""
    out = Path(out_dir) / name
    command = [compiler(), "-shared", "-fPIC", "-O1", f"-Wl,-soname,{soname}",
               *(f"-D{d}" for d in defines), "-o", str(out), str(HERE / source)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return out


def build_empty(out_dir, name, soname):
    """A library that exports nothing hvdlite looks for."""
    source = Path(out_dir) / "empty.c"
    source.write_text("int not_nccl(void) { return 1; }\n")
    out = Path(out_dir) / name
    subprocess.run([compiler(), "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out),
                    str(source)], check=True, capture_output=True, text=True)
    return out
