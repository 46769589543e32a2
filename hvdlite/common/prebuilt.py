"""The framework libraries a wheel carries built in advance (Note [One wheel,
every framework version] in cmake/prebuilt.cmake): which one serves the
TensorFlow or jaxlib installed here, or why none does, so that the caller can
compile one on first use (hvdlite/common/compiled_library.py) and say why.

A wheel installs them under hvdlite/prebuilt/, each named for the version it
was built against:
    prebuilt/tensorflow/hvdlite_tf_ops-tf2.21.so     one per TensorFlow minor version
    prebuilt/jax/hvdlite_jax_ffi-jaxlib0.6.0.so      one, for that jaxlib and newer
An install built from source (`pip install` of the sdist, `make install`) has
none: it compiles them on first use, as it always did.

They live beside the core, inside the installed package, so they are as
trusted as hvdlite's Python code; the checks of Note [Private caches] guard
the cache of compiled code, which anyone's build could have written.
"""
import glob
import os
import re

from hvdlite.common import compiled_library

FROM_SOURCE = ("this hvdlite was built from source (not installed from a wheel), so it has no "
               "prebuilt {what}")


def release(version):
    """(major, minor, patch) of a version string: "2.21.0" -> (2, 21, 0),
    "0.7.2.dev20250101" -> (0, 7, 2), "2.20.0rc1" -> (2, 20, 0)."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        raise ValueError(f"hvdlite cannot read the version {version!r}")
    return tuple(int(part or 0) for part in match.groups())


def _libraries(kind, prefix):
    """{version in the name: path} of hvdlite/prebuilt/<kind>/<prefix><version>.so."""
    folder = os.path.join(compiled_library.package_dir(), "prebuilt", kind)
    found = {}
    for path in glob.glob(os.path.join(folder, prefix + "*.so")):
        found[os.path.basename(path)[len(prefix):-len(".so")]] = path
    return found


def tensorflow_ops(tf_version):
    """(path, None) of the op library built for this TensorFlow's minor
    version, or (None, why there is none)."""
    libraries = _libraries("tensorflow", "hvdlite_tf_ops-tf")
    if not libraries:
        return None, FROM_SOURCE.format(what="TensorFlow op libraries")
    minor = "%d.%d" % release(tf_version)[:2]
    if minor in libraries:
        return libraries[minor], None
    known = sorted(libraries, key=release)
    relation = "newer than" if release(tf_version) > release(known[-1]) else "not one of"
    return None, (f"TensorFlow {tf_version} is {relation} the versions this hvdlite wheel has "
                  f"op libraries for ({', '.join(known)})")


def jax_handler(jaxlib_version):
    """(path, None) of the XLA FFI handler built against the newest jaxlib not
    newer than this one, or (None, why there is none)."""
    libraries = _libraries("jax", "hvdlite_jax_ffi-jaxlib")
    if not libraries:
        return None, FROM_SOURCE.format(what="XLA FFI handler")
    usable = [v for v in libraries if release(v) <= release(jaxlib_version)]
    if usable:
        return libraries[max(usable, key=release)], None
    oldest = min(libraries, key=release)
    return None, (f"jaxlib {jaxlib_version} is older than jaxlib {oldest}, whose FFI headers this "
                  "hvdlite wheel's handler was built against (a handler built against newer "
                  "headers may use what an older jaxlib lacks)")
