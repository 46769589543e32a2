"""Which prebuilt framework library serves the framework found at import
(hvdlite/common/prebuilt.py), and why none does, over a planted
hvdlite/prebuilt/ folder: no wheel, no framework and no compiler needed."""
import pytest

from hvdlite.common import compiled_library, prebuilt


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package folder whose prebuilt/ the test fills; names -> paths."""
    monkeypatch.setattr(compiled_library, "package_dir", lambda: str(tmp_path))

    def plant(kind, *names):
        folder = tmp_path / "prebuilt" / kind
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            (folder / name).write_bytes(b"")
        return {name: str(folder / name) for name in names}
    return plant


def test_release_reads_the_numbers_of_every_version_style():
    assert prebuilt.release("2.21.0") == (2, 21, 0)
    assert prebuilt.release("0.7.2.dev20250101") == (0, 7, 2)
    assert prebuilt.release("2.20.0rc1") == (2, 20, 0)
    assert prebuilt.release("2.16") == (2, 16, 0)
    with pytest.raises(ValueError, match="cannot read the version"):
        prebuilt.release("nightly")


def test_tensorflow_takes_the_library_of_its_minor_version(package):
    paths = package("tensorflow", "hvdlite_tf_ops-tf2.16.so", "hvdlite_tf_ops-tf2.21.so")
    assert prebuilt.tensorflow_ops("2.21.3") == (paths["hvdlite_tf_ops-tf2.21.so"], None)
    assert prebuilt.tensorflow_ops("2.16.0rc0") == (paths["hvdlite_tf_ops-tf2.16.so"], None)
    path, reason = prebuilt.tensorflow_ops("2.22.0")
    assert path is None and "TensorFlow 2.22.0 is newer than" in reason and "2.16, 2.21" in reason
    path, reason = prebuilt.tensorflow_ops("2.18.1")
    assert path is None and "is not one of" in reason


def test_jax_takes_the_newest_handler_not_newer_than_its_jaxlib(package):
    paths = package("jax", "hvdlite_jax_ffi-jaxlib0.6.0.so", "hvdlite_jax_ffi-jaxlib0.8.1.so")
    assert prebuilt.jax_handler("0.7.2") == (paths["hvdlite_jax_ffi-jaxlib0.6.0.so"], None)
    assert prebuilt.jax_handler("0.10.2") == (paths["hvdlite_jax_ffi-jaxlib0.8.1.so"], None)
    path, reason = prebuilt.jax_handler("0.5.3")
    assert path is None and "jaxlib 0.5.3 is older than jaxlib 0.6.0" in reason


def test_a_source_install_has_none_and_says_so(package):
    for kind in ("tensorflow", "jax"):
        package(kind)  # empty folders, or none at all: the same
    assert prebuilt.tensorflow_ops("2.21.0")[1].startswith("this hvdlite was built from source")
    assert "XLA FFI handler" in prebuilt.jax_handler("0.10.2")[1]


def test_a_failed_fallback_compile_says_why_it_compiled_at_all():
    with pytest.raises(RuntimeError, match=r"no C\+\+ compiler(.|\n)*because jaxlib 0.5.3 is older"):
        with compiled_library.needed_because("jaxlib 0.5.3 is older than jaxlib 0.6.0"):
            raise RuntimeError("no C++ compiler was found")
    unsafe = compiled_library.UnsafeCacheError("not yours")
    with pytest.raises(compiled_library.UnsafeCacheError) as raised:
        with compiled_library.needed_because("a reason"):
            raise unsafe
    assert raised.value is unsafe
