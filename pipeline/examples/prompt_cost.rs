//! Prompt tokens the LLM extraction of an index would send (cl100k), with the sliding window
//! and without it, against the corpus's own tokens: the construction-cost driver of the paper.
//!
//! `cargo run -p flexstruct-pipeline --example prompt_cost -- INDEX [G_MAX G_OVERLAP]`
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use arrow::array::Int32Array;
use flexstruct_pipeline::core::tokens::TokenCounter;
use flexstruct_pipeline::io::Index;
use flexstruct_pipeline::io::parquet::{read_table, string_column, typed};
use flexstruct_pipeline::llm::prompts::items_messages;
use flexstruct_pipeline::stages::extract::Window;
use flexstruct_schemas::{Table, col};

fn main() {
    let mut args = std::env::args().skip(1);
    let root = args.next().expect("usage: prompt_cost INDEX [G_MAX G_OVERLAP]");
    let g_max: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let g_overlap: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let index = Index::open(std::path::Path::new(&root)).unwrap();
    let mut docs: BTreeMap<String, Vec<(i32, String)>> = BTreeMap::new();
    for batch in read_table(&index, Table::Chunks).unwrap() {
        let ids = string_column(&batch, col::DOC_ID).unwrap();
        let idx = typed::<Int32Array>(&batch, col::CHUNK_IDX).unwrap();
        let text = string_column(&batch, col::TEXT).unwrap();
        for i in 0..batch.num_rows() {
            docs.entry(ids.value(i).to_owned()).or_default().push((idx.value(i), text.value(i).to_owned()));
        }
    }
    let counter = TokenCounter::cl100k();
    let mut corpus = 0usize;
    let mut totals = [0usize; 2];
    let mut requests = 0usize;
    for chunks in docs.values_mut() {
        chunks.sort_by_key(|c| c.0);
        let texts: Vec<&str> = chunks.iter().map(|c| c.1.as_str()).collect();
        corpus += texts.iter().map(|t| counter.count(t)).sum::<usize>();
        for (k, enabled) in [true, false].into_iter().enumerate() {
            let window = Window { g_max, g_overlap, enabled };
            for position in 0..texts.len() {
                let prefix = window.prefix(position + 1);
                let messages = items_messages(&texts[prefix.start - 1..prefix.end - 1], texts[position]);
                // 4 tokens of chat framing per message, as OpenAI counts them.
                totals[k] += messages.iter().map(|m| counter.count(&m.content) + 4).sum::<usize>();
            }
        }
        requests += texts.len();
    }
    println!("documents {}, chunks (= extraction requests) {requests}, corpus tokens {corpus}", docs.len());
    for (label, total) in
        [(format!("window g_max={g_max} g_overlap={g_overlap}"), totals[0]), ("no window".to_owned(), totals[1])]
    {
        println!("{label}: {total} prompt tokens, {:.2} per corpus token", total as f64 / corpus as f64);
    }
}
