# `make demo` and `make test` set up .venv (once) from the repo's own files, then run.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= outputs/demo
# Test processes (pytest-xdist): one per core the process may use, at most 4 (each loads torch, Warp and Newton);
# each runs torch on one thread (tests/conftest.py).
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))

.PHONY: install test demo bench clean

$(STAMP): requirements.txt setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n $(TEST_WORKERS)

demo: $(STAMP)
	$(PY) eval/eval_passive_motion.py --env-name Cartpole --model-path pretrained_models/NeRD_models/Cartpole/model.pt \
		--env-mode neural --num-envs 512 --num-rollouts 512 --rollout-horizon 100 --seed 500 \
		--output $(DEMO_DIR)/cartpole_passive.json --overwrite

bench: $(STAMP)
	$(PY) bench/bench_envs.py
	$(PY) bench/bench_rl.py
	$(PY) bench/profile_step.py --compile
	$(PY) bench/bench_train.py

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
