# flexstruct — `make help` lists the targets.
#
# Every stage target runs its binary; the binaries are idempotent (an up-to-date stage does no
# work), so `make index` can be rerun at any time and only redoes what changed.

CARGO   ?= cargo
BIN     := target/debug
CORPUS  ?= data/sample/corpus
INDEX   ?= data/indexes/sample
CONFIG  ?=
SHARD   ?= 0/1
QA      ?= ../shared/qa/ultradomain-mix
FORMAT  ?= table

STAGE_FLAGS = --index $(INDEX) --shard $(SHARD) $(if $(CONFIG),--config $(CONFIG))

.DEFAULT_GOAL := help
.PHONY: help build demo test bench ingest chunk extract hypergraph graph index sql clean

help: ## List the targets and their variables
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo ""
	@echo "Variables: CORPUS=$(CORPUS) INDEX=$(INDEX) CONFIG=$(CONFIG) SHARD=$(SHARD) QA=$(QA)"

build: ## Build the stage binaries (dev profile, hot crates optimised)
	$(CARGO) build --bins

demo: build ## Run every stage on the bundled sample corpus and print a SQL summary
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
	@echo "== best-connected entities =="
	@$(BIN)/flexstruct-sql --index data/indexes/sample --max-width 50 \
	  "SELECT name, hyperdegree, aliases, summary FROM entities ORDER BY hyperdegree DESC, name LIMIT 8"
	@echo ""
	@echo "== stage runs (manifest) =="
	@$(BIN)/flexstruct-sql --index data/indexes/sample \
	  "SELECT stage, rows_in, rows_out, units_done, units_skipped, units_failed, round(seconds, 3) AS seconds \
	   FROM manifest ORDER BY started_at DESC LIMIT 5"
	@echo ""
	@echo "Inspect further with: make sql Q=\"SELECT * FROM chunks LIMIT 5\""

test: ## Build and run the whole test suite
	$(CARGO) test --workspace

bench: build ## Time every stage on QA=<folder with corpus.jsonl> (wall time, peak memory, statistics), then the LLM client's throughput
	$(CARGO) build --examples -p flexstruct-pipeline
	scripts/bench.sh $(QA)/corpus.jsonl
	$(BIN)/examples/llm_throughput 20000 32

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

index: ## Run every stage that exists so far on CORPUS into INDEX
	$(MAKE) --no-print-directory ingest
	$(MAKE) --no-print-directory chunk
	$(MAKE) --no-print-directory extract
	$(MAKE) --no-print-directory hypergraph
	$(MAKE) --no-print-directory graph

sql: build ## Run Q="<SQL>" over INDEX (FORMAT=table|csv|json|jsonl)
	@$(BIN)/flexstruct-sql --index $(INDEX) --format $(FORMAT) "$(Q)"

clean: ## Remove build outputs and the sample index
	$(CARGO) clean
	rm -rf data/indexes
