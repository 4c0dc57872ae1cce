# Two entry points for a fresh machine (see README.md):
#   make demo   set up, then image -> GLB -> imported into Blender, headless, on the bundled example
#   make test   set up, then run the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
DEMO_IMAGE ?= examples/goblin.png
DEMO_OUT ?= out/demo

.PHONY: setup test demo build bench clean

# torch==2.13.0 first: a bare "torch" requirement would pull a multi-GB CUDA build on Linux.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

test: setup
	$(PY) -m pytest -q

build: setup
	$(PY) -m blender_addon.build --out dist

demo: setup
	mkdir -p $(DEMO_OUT)
	$(PY) blender_addon/headless.py $(DEMO_IMAGE) --glb $(DEMO_OUT)/goblin.glb --blend $(DEMO_OUT)/goblin.blend --preview $(DEMO_OUT)/goblin_preview.png --overwrite

# The eager-vs-staged benchmark (about 5 min, needs about 13 GB free); see docs/benchmark.md.
bench: setup
	$(PY) -m bench.pixal3d --docs docs/benchmark.md

clean:
	rm -rf $(VENV) dist out
