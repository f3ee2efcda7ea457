//! The cost table (paper Table 3) of an index: LLM prompt and response tokens and seconds per
//! stage from `llm_calls` (each distinct request counted once, whether it was answered fresh or
//! from the cache; seconds are those of fresh answers), next to each stage's wall time from the
//! `manifest`. Answers cut at the token limit count too (their tokens were spent). Judge calls
//! are the `evaluation` phase, apart from the answers' `generation`.

use crate::core::{Result, threads};
use crate::io::Index;
use crate::io::sql::{IndexSql, OutputFormat, format_batches};

/// The SQL of the cost table.
pub fn cost_sql() -> String {
    "WITH requests AS ( \
       SELECT stage, request_id, max(prompt_tokens) AS prompt_tokens, max(completion_tokens) AS completion_tokens, \
              sum(CASE WHEN cached THEN 0 ELSE latency_ms END) AS latency_ms \
       FROM llm_calls WHERE status IN ('ok', 'length') GROUP BY stage, request_id), \
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
        .to_owned()
}

/// The cost table of an index in a format (`table` for reports, `json` for machines).
pub fn cost_table(index: &Index, format: OutputFormat) -> Result<String> {
    threads::runtime()?.block_on(async {
        let sql = IndexSql::open(index).await?;
        let results = sql.run(&cost_sql()).await?;
        format_batches(results.first().map(Vec::as_slice).unwrap_or_default(), format, 0)
    })
}
