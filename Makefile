# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch, installed before anything that depends on torch, so that no requirement
# pulls the multi-GB CUDA build. Override on machines where this exact version is not available.
TORCH_SPEC ?= torch==2.13.0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install test demo bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[local,optimize,longterm,mcp,pydantic-ai,langgraph,postgres,dev]"
	$(BIN)/python -m amb_dspy.retrieval.onnx_embedding  # the embedding model exported to ONNX once, and its int8 copy, into AMB_CACHE_DIR
	touch $@

# pytest exits 5 when it collects no test: that is reported, not hidden, and not a failure of set-up.
# The layers (import-linter) and the lint rules (ruff) are checked before any test runs.
test: install
	$(BIN)/lint-imports
	$(BIN)/ruff check .
	$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

# The demo runs offline on the embedded model, which takes the direct strategy (amb_dspy/lm/profile.py):
# memory by the deterministic policies, a search of the corpus for what the notes lack, one answer call.
demo: install
	$(BIN)/amb run \
		"Which river flows through the city where the Tidewater Lantern Festival is held, and when does the festival take place?" \
		--context-file datasets/demo-notes.md --corpus datasets/demo --lm local --export amb_runs/demo-bank.json

bench: install
	$(BIN)/python bench/retrieval.py --n 10000
	$(BIN)/python bench/hotpotqa_retrieval.py ../shared/datasets/hotpotqa/dev_distractor_300.jsonl
	$(BIN)/python bench/heuristic_policy.py ../shared/datasets/hotpotqa/dev_distractor_300.jsonl

clean:
	rm -rf $(VENV) build dist *.egg-info amb_runs
