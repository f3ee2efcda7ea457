//! `flexstruct-query`: answers questions from the merged knowledge base of an index, with
//! citations back to the source spans.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use flexstruct_pipeline::compose;
use flexstruct_pipeline::config::{Mode, QueryConfig};
use flexstruct_pipeline::io::parquet::{read_doc, string_column};
use flexstruct_pipeline::io::{Index, Selection};
use flexstruct_pipeline::query::{self, Answer, Engine, Question};
use flexstruct_schemas::Table;
use flexstruct_stages::{ConfigArg, IndexArg, Outcome, ThreadsArg, exit, query_overrides};

/// Answers one question or a JSONL file of `{id, question}` from the kb of an index: printed for
/// a person, or written to an answers file (JSONL + Parquet).
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Examples:\n  flexstruct-query --index data/indexes/sample \"Under whose chairmanship did the talks on the Kestrel Valley Water Compact begin?\"\n  \
                  flexstruct-query --index IDX --questions q.jsonl --out answers.jsonl --mode chunks\n\
                  Settings not given as flags come from the [query] section of --config.\n\
                  Exit codes: 0 ok, 1 some questions failed (their lines say why; a rerun asks them again), 2 error."
)]
struct Args {
    /// The index (after `make index`; an `s3://` one has its kb and documents fetched into a
    /// temporary working copy).
    #[command(flatten)]
    index: IndexArg,
    #[command(flatten)]
    config: ConfigArg,
    /// Print the retrieval strategies (name, a tab, what it does; `*` marks those
    /// `flexstruct-eval run` compares unless told) and exit.
    #[arg(long)]
    list_modes: bool,
    /// One question (printed for a person).
    question: Option<String>,
    /// JSONL file of {id, question} (other fields are ignored).
    #[arg(long, value_name = "FILE", conflicts_with = "question")]
    questions: Option<PathBuf>,
    /// Answers file (JSONL); a Parquet twin is written beside it (.parquet). Without it (and
    /// without --jsonl), answers are printed for a person.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the answers to standard output as JSON lines instead.
    #[arg(long, conflicts_with = "out")]
    jsonl: bool,
    /// Evidence shown per answer when printing for a person.
    #[arg(long, default_value_t = 6, value_name = "N")]
    show: usize,
    /// The `[query]` keys, each a flag.
    #[command(flatten)]
    query: QueryConfig,
    /// No timing summary on stderr.
    #[arg(long, short, env = "FLEXSTRUCT_QUIET")]
    quiet: bool,
    #[command(flatten)]
    threads: ThreadsArg,
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    // `--list-modes` needs no index: read the flags without requiring it first.
    let lenient = Args::command().mut_arg("location", |a| a.required(false)).get_matches();
    if lenient.get_flag("list_modes") {
        for mode in Mode::ALL {
            let compared = if mode.compared_by_default() { " *" } else { "" };
            println!("{}\t{}{compared}", mode.name(), mode.help());
        }
        return ExitCode::SUCCESS;
    }
    let matches = Args::command().get_matches();
    exit(Args::from_arg_matches(&matches).map_err(anyhow::Error::from).and_then(|args| run(args, &matches)))
}

fn run(args: Args, matches: &clap::ArgMatches) -> anyhow::Result<Outcome> {
    args.threads.init()?;
    let location = &args.index.location;
    let config = args.config.load_with(query_overrides(matches, &args.query)?)?;
    let questions = match (&args.question, &args.questions) {
        (Some(text), None) => {
            if text.trim().is_empty() {
                bail!("the question is empty");
            }
            vec![Question { id: "q".into(), question: text.clone() }]
        }
        (None, Some(path)) => query::read_questions(path)?,
        _ => bail!("give a question as an argument, or --questions FILE"),
    };
    // A remote index: what a query reads (kb/ and documents) in a working copy that lives as
    // long as the run; the LLM calls the run logs are written back.
    let read: Vec<Table> = Table::ALL.into_iter().filter(|t| t.is_kb() || *t == Table::Documents).collect();
    let local = location.open_local(Selection::Tables(&read), false)?;
    let index = Index::open(local.path())?;
    let engine = compose::open_engine(&index, &config)?;
    for note in &engine.kb.notes {
        flexstruct_stages::say!("query: {note}");
    }
    let prepared = engine.prepare_for(questions, config.query.mode)?;
    let answers = engine.answer(&prepared, &config.query)?;
    engine.record_calls()?;
    if let Some(copy) = local.copy() {
        copy.push().with_context(|| format!("writing the LLM calls of the run back to {location}"))?;
    }

    if let Some(out) = &args.out {
        query::write_jsonl(out, &answers).with_context(|| format!("writing {}", out.display()))?;
        let parquet = out.with_extension("parquet");
        query::write_parquet(&parquet, &answers).with_context(|| format!("writing {}", parquet.display()))?;
    } else if args.jsonl {
        let lines: Vec<String> =
            answers.iter().map(|a| serde_json::to_string(a).map(|l| l + "\n")).collect::<Result<_, _>>()?;
        flexstruct_stages::print_stdout(&lines.concat())?;
    } else {
        let printed: Vec<String> =
            answers.iter().map(|a| for_a_person(a, &index, args.show)).collect::<anyhow::Result<_>>()?;
        flexstruct_stages::print_stdout(&printed.join("\n"))?;
    }
    if !args.quiet {
        summary(&engine, &answers);
    }
    let failed: Vec<&Answer> = answers.iter().filter(|a| a.error.is_some()).collect();
    for a in &failed {
        flexstruct_stages::say!("query: question `{}` failed: {}", a.id, a.error.as_deref().unwrap_or_default());
    }
    Ok(if failed.is_empty() { Outcome::Ok } else { Outcome::Partial })
}

/// The answer, then each piece of evidence with its document, span and the cited source text.
fn for_a_person(a: &Answer, index: &Index, show: usize) -> anyhow::Result<String> {
    let mut s = String::new();
    let answer = match (a.answer.is_empty(), a.generator, a.evidence.is_empty()) {
        (false, ..) => a.answer.as_str(),
        (true, "failed", _) => "(no answer: the LLM failed, below)",
        (true, _, true) => "(no answer: nothing was retrieved)",
        (true, _, false) => "(no answer: no sentence of the evidence below can be cited)",
    };
    s.push_str(&format!("Q: {}\nA: {answer}\n", a.question));
    for note in &a.notes {
        s.push_str(&format!("   note: {note}\n"));
    }
    if let Some(structure) = a.structure.as_ref().filter(|s| !s.answers.is_empty()) {
        s.push_str(&format!("   matched for the node asked for: {}\n", structure.answers.join("; ")));
    }
    for c in &a.citations {
        s.push_str(&format!(
            "   cited: {} [{}..{}] \"{}\"\n",
            c.doc_id,
            c.start,
            c.end,
            source_text(index, &c.doc_id, c.start, c.end)?
        ));
    }
    s.push_str(&format!(
        "\nEvidence ({}, {} tokens{}):\n",
        a.variant,
        a.context_tokens,
        if a.trimmed > 0 { format!(", {} trimmed", a.trimmed) } else { String::new() }
    ));
    for (i, e) in a.evidence.iter().enumerate().take(show) {
        let span = match (e.start, e.end) {
            (Some(start), Some(end)) => format!(" [{start}..{end}]"),
            _ => String::new(),
        };
        let mark = if a.cited.contains(&(i + 1)) { "*" } else { " " };
        let text: String = e.text.chars().take(220).collect();
        let more = if e.text.chars().count() > 220 { "…" } else { "" };
        s.push_str(&format!(
            "{mark}[{}] {:<9} {:.3}  {}{span}\n      {text}{more}\n",
            i + 1,
            e.unit.name(),
            e.score,
            e.doc_id
        ));
    }
    if a.evidence.len() > show {
        s.push_str(&format!("  … and {} more (--show N)\n", a.evidence.len() - show));
    }
    Ok(s)
}

/// The text of a document span (as the citation promises it is).
fn source_text(index: &Index, doc_id: &str, start: i64, end: i64) -> anyhow::Result<String> {
    let docs = read_doc(index, Table::Documents, doc_id)?;
    for batch in &docs {
        let text = string_column(batch, flexstruct_schemas::col::TEXT)?;
        if batch.num_rows() > 0 {
            let span: String =
                text.value(0).chars().skip(start.max(0) as usize).take((end - start).max(0) as usize).collect();
            return Ok(span.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    Ok(String::new())
}

fn summary(engine: &Engine, answers: &[Answer]) {
    let mut retrieval: Vec<f64> = answers.iter().map(|a| a.retrieval_ms).collect();
    retrieval.sort_by(f64::total_cmp);
    let pct = |p: f64| retrieval.get(((retrieval.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);
    let tokens = answers.iter().map(|a| a.context_tokens).sum::<usize>() as f64 / answers.len().max(1) as f64;
    let sizes: Vec<String> = engine.kb.sizes().iter().map(|(n, c)| format!("{c} {n}")).collect();
    flexstruct_stages::say!(
        "query: {} questions, kb loaded in {:.2} s ({}; tables {:.1} s, lookups {:.1} s, lexical {:.1} s); retrieval p50 {:.1} ms, p95 {:.1} ms; {:.0} context tokens per question",
        answers.len(),
        engine.load_seconds,
        sizes.join(", "),
        engine.kb.load_times.tables,
        engine.kb.load_times.lookups,
        engine.kb.load_times.lexical,
        pct(0.5),
        pct(0.95),
        tokens
    );
    for search in &engine.kb.searches {
        flexstruct_stages::say!("query: {search}");
    }
    if let Some(paths) = engine.loaded_path_index() {
        let s = &paths.stats;
        flexstruct_stages::say!(
            "query: path index loaded in {:.2} s ({} nodes, {} node pairs; paths by length {:?}, R*-tree depths {:?}); {}",
            s.load_seconds,
            s.nodes,
            s.edges,
            s.paths,
            s.depths,
            paths.tally.summary()
        );
    }
}
