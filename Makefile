# Two entry points for a fresh machine (see README.md):
#   make demo   set up, then image -> GLB -> imported into Blender, headless, on the bundled example
#   make test   set up, then run the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# A second virtual environment holding only bpy 5.x (the newest Blender the registry serves):
# the add-on tests run a smaller scenario set on it, and the zero-setup check (nothing but bpy
# installed) runs there. Python 3.11, like Blender 5.0.
BPY5 := bpy==5.0.1
VENV_BPY5 := .venv-bpy5
# The extension's wheels for this machine's platform (blender_addon/packaging/wheels.txt; the tests build
# and install this platform's zip); `make build` fetches every platform's.
DEMO_IMAGE ?= examples/goblin.png
DEMO_OUT ?= out/demo

.PHONY: setup setup-bpy5 wheels test demo build bench clean

# torch==2.13.0 first: a bare "torch" requirement would pull a multi-GB CUDA build on Linux.
# The cluster extra (Ray) is for the cluster tests (tests/runner/test_cluster.py); the product
# needs it only for `batch --cluster`.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,cluster]'
	touch $@

setup: $(VENV)/.installed

$(VENV_BPY5)/.installed:
	$(PYTHON) -m venv $(VENV_BPY5)
	$(VENV_BPY5)/bin/python -m pip install -q $(BPY5)
	touch $@

setup-bpy5: $(VENV_BPY5)/.installed

.wheels/.host-fetched: blender_addon/packaging/wheels.txt | $(VENV)/.installed
	$(PY) -m blender_addon.packaging.wheels --platform host
	touch $@

wheels: setup
	$(PY) -m blender_addon.packaging.wheels

# IMAGE_TO_MESH_REQUIRE_BPY5: the bpy 5 tests fail (not skip) when that venv is missing.
# ruff first (pyproject.toml: pycodestyle at 100 columns, pyflakes, isort, bugbear): seconds.
# The whole tree, tests/ included; pyproject.toml excludes the venvs and fetched wheels.
# --durations: the 25 slowest tests are listed, so a test that grows shows in the CI log.
# Two pytest calls (tests/conftest.py says which test goes where and why): most tests on two
# workers, a file per worker at a time, one torch thread each (two processes of two threads each
# on two cores spin against each other: the suite took 23 min so, 15 min with one thread each,
# 31 min serial), then the tests that read the whole machine (guard, meter) or start Ray
# clusters, alone.
LINTED := .
test: setup setup-bpy5 .wheels/.host-fetched
	$(VENV)/bin/ruff check $(LINTED)
	IMAGE_TO_MESH_REQUIRE_BPY5=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist loadfile \
		-m "not serial" --durations=25
	IMAGE_TO_MESH_REQUIRE_BPY5=1 $(PY) -m pytest -q -m serial --durations=10

build: wheels
	$(PY) -m blender_addon.packaging.build --out dist

demo: setup
	mkdir -p $(DEMO_OUT)
	$(PY) blender_addon/headless.py $(DEMO_IMAGE) --glb $(DEMO_OUT)/goblin.glb --blend $(DEMO_OUT)/goblin.blend --preview $(DEMO_OUT)/goblin_preview.png --overwrite

# The eager-vs-staged benchmark (about 5 min, needs about 13 GB free); see docs/benchmark.md.
bench: setup
	$(PY) -m bench.pixal3d --docs docs/benchmark.md

clean:
	rm -rf $(VENV) $(VENV_BPY5) .wheels dist out
