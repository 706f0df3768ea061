# `make demo` and `make test` set up .venv (once) from the repo's own files, then run.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= outputs/demo

.PHONY: install test demo bench clean

$(STAMP): requirements.txt setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) generate/generate_dataset.py --env-name Cartpole --num-transitions 20000 --trajectory-length 100 \
		--num-envs 200 --dataset-dir $(DEMO_DIR) --dataset-name cartpole_demo.hdf5 --overwrite
	$(PY) generate/visualize_dataset.py --dataset $(DEMO_DIR)/cartpole_demo.hdf5

bench: $(STAMP)
	$(PY) bench/bench_envs.py

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
