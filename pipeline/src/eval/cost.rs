//! The cost table (paper Table 3) of an index: LLM prompt and response tokens and seconds per
//! stage from `llm_calls` (each distinct request counted once, whether it was answered fresh or
//! from the cache; seconds are those of fresh answers), next to each stage's wall time from the
//! `manifest`. Answers cut at the token limit count too (their tokens were spent). Judge calls
//! are the `evaluation` phase, apart from the answers' `generation`.

use std::sync::Arc;

use datafusion::datasource::MemTable;
use flexstruct_schemas::Table;

use crate::core::{Result, threads};
use crate::io::calls::calls_batch;
use crate::io::sql::{IndexSql, OutputFormat, format_batches};
use crate::io::{CallRecord, Index};

/// The SQL of the cost table.
pub fn cost_sql() -> String {
    cost_sql_over("llm_calls")
}

/// The SQL of the cost table over the calls of `calls` (a table, or a query in parentheses, with
/// `llm_calls`' columns).
fn cost_sql_over(calls: &str) -> String {
    format!(
        "WITH requests AS ( \
       SELECT stage, request_id, max(prompt_tokens) AS prompt_tokens, max(completion_tokens) AS completion_tokens, \
              sum(CASE WHEN cached THEN 0 ELSE latency_ms END) AS latency_ms \
       FROM {calls} WHERE status IN ('ok', 'length') GROUP BY stage, request_id), \
     llm AS ( \
       SELECT stage, count(*) AS requests, sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens, \
              round(sum(latency_ms) / 1000.0, 1) AS llm_seconds FROM requests GROUP BY stage), \
     runs AS (SELECT stage, round(sum(seconds), 1) AS stage_seconds, count(*) AS runs FROM manifest GROUP BY stage) \
     SELECT coalesce(r.stage, l.stage) AS stage, \
            CASE coalesce(r.stage, l.stage) WHEN 'query' THEN 'generation' WHEN 'eval' THEN 'evaluation' ELSE 'construction' END AS phase, \
            coalesce(l.requests, 0) AS requests, coalesce(l.prompt_tokens, 0) AS prompt_tokens, \
            coalesce(l.completion_tokens, 0) AS completion_tokens, coalesce(l.llm_seconds, 0) AS llm_seconds, \
            r.stage_seconds, coalesce(r.runs, 0) AS runs \
     FROM runs r FULL OUTER JOIN llm l ON l.stage = r.stage \
     ORDER BY phase, stage"
    )
}

/// The cost table of an index in a format (`table` for reports, `json` for machines).
pub fn cost_table(index: &Index, format: OutputFormat) -> Result<String> {
    threads::runtime()?.block_on(async {
        let sql = IndexSql::open(index).await?;
        let results = sql.run(&cost_sql()).await?;
        format_batches(results.first().map(Vec::as_slice).unwrap_or_default(), format, 0)
    })
}

/// The cost table of one evaluation: the index's construction beside the generation and
/// evaluation calls of `run_calls` alone — not those of earlier runs, which the index's
/// `llm_calls` also holds (an extractive run's report would otherwise show an earlier LLM run's
/// answers, and one question set's report another's).
pub fn run_cost_table(index: &Index, run_calls: &[CallRecord], format: OutputFormat) -> Result<String> {
    threads::runtime()?.block_on(async {
        let sql = IndexSql::open(index).await?;
        let batches = if run_calls.is_empty() { Vec::new() } else { vec![calls_batch(run_calls)?] };
        let run = MemTable::try_new(Table::LlmCalls.schema(), vec![batches])?;
        sql.context().register_table("run_calls", Arc::new(run))?;
        let columns = "stage, request_id, prompt_tokens, completion_tokens, latency_ms, cached, status";
        let calls = format!(
            "(SELECT {columns} FROM llm_calls WHERE stage NOT IN ('query', 'eval') \
              UNION ALL SELECT {columns} FROM run_calls)"
        );
        let results = sql.run(&cost_sql_over(&calls)).await?;
        format_batches(results.first().map(Vec::as_slice).unwrap_or_default(), format, 0)
    })
}
