//! Context assembly: retrieved rows become numbered pieces of evidence, deduplicated, ranked,
//! each with its citation (document and code-point span) and token count, trimmed to a token
//! budget from the lowest-ranked end.

use std::collections::HashSet;

use serde::Serialize;

use super::kb::{Kb, Span};
use super::strategy::{Retrieved, StructureMatch, Unit};
use crate::core::ids::chunk_id;
use crate::core::tokens::TokenCounter;

/// Most source spans cited for one entity: its summary is built from the first τ_s (default 9)
/// incident hyperedges in extraction order, so those are the spans it rests on.
pub const ENTITY_SPANS: usize = 9;

/// A verbatim piece of a document behind a piece of evidence (what extractive answers quote).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// The text, exactly as in the document when `span` is known.
    pub text: String,
    /// Where it is.
    pub span: Option<Span>,
}

/// One piece of evidence in the context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// entity | edge | hyperedge | cluster | chunk.
    pub unit: Unit,
    /// Unit id (`doc_id#chunk_idx` for chunks).
    pub id: String,
    /// Document.
    pub doc_id: String,
    /// Start of the covering span (first cited code point), when located.
    pub start: Option<i64>,
    /// End of the covering span.
    pub end: Option<i64>,
    /// Text given to the generator.
    pub text: String,
    /// Ranking score.
    pub score: f32,
    /// cl100k tokens of the evidence's line in the context.
    pub tokens: usize,
    /// Every source span the evidence rests on (a cluster: each member's span).
    pub spans: Vec<Span>,
    /// The verbatim pieces behind it.
    #[serde(skip)]
    pub pieces: Vec<Piece>,
}

/// The assembled context of one question.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    /// Evidence kept, in context order (best first).
    pub evidence: Vec<Evidence>,
    /// Distinct units retrieved but left out by the token budget.
    pub trimmed: usize,
    /// cl100k tokens of [`Context::render`].
    pub tokens: usize,
    /// What the retrieval had to say (a threshold nothing passed), for the answer's reader.
    pub notes: Vec<String>,
    /// What structure matching gave (`--mode paths` only).
    pub structure: Option<StructureMatch>,
}

fn piece(text: &str, span: Option<Span>) -> Piece {
    Piece { text: text.to_owned(), span }
}

/// Builds the evidence of one retrieved row.
fn evidence(kb: &Kb, r: &Retrieved) -> Evidence {
    let row = r.row as usize;
    let hyperedge_piece = |h: usize| piece(kb.hyperedges.ref_text.value(h), kb.hyperedges.span(h));
    let (id, doc_id, text, pieces) = match r.unit {
        Unit::Entity => {
            let e = &kb.entities;
            let pieces =
                kb.entity_hyperedges[row].iter().take(ENTITY_SPANS).map(|&h| hyperedge_piece(h as usize)).collect();
            (e.id.value(row), e.doc_id.value(row), format!("{}: {}", e.name.value(row), e.summary.value(row)), pieces)
        }
        Unit::Hyperedge => {
            let h = &kb.hyperedges;
            (h.id.value(row), h.doc_id.value(row), h.text.value(row).to_owned(), vec![hyperedge_piece(row)])
        }
        Unit::Edge => {
            let g = &kb.edges;
            let pieces = g.hyperedge[row].map(|h| hyperedge_piece(h as usize)).into_iter().collect();
            (g.id.value(row), g.doc_id.value(row), g.text.value(row).to_owned(), pieces)
        }
        Unit::Cluster => {
            let c = &kb.clusters;
            let members = &c.members[row];
            match r.focus.and_then(|h| members.iter().position(|&m| m == h)).filter(|_| r.len > 0) {
                // A window of the cluster around the retrieved member.
                Some(at) => {
                    let k = r.len as usize;
                    let window = &members[at.saturating_sub(k)..(at + k + 1).min(members.len())];
                    let pieces: Vec<Piece> = window.iter().map(|&h| hyperedge_piece(h as usize)).collect();
                    return finish(r, c.id.value(row).to_owned(), c.doc_id.value(row), joined(&pieces), pieces);
                }
                None => {
                    let pieces = members.iter().map(|&h| hyperedge_piece(h as usize)).collect();
                    (c.id.value(row), c.doc_id.value(row), c.text.value(row).to_owned(), pieces)
                }
            }
        }
        Unit::Passage => {
            let h = &kb.hyperedges;
            let members = row..row + r.len.max(1) as usize;
            let pieces: Vec<Piece> = members.clone().map(hyperedge_piece).collect();
            let id = format!("{}..{}", h.id.value(row), h.id.value(members.end - 1));
            return finish(r, id, h.doc_id.value(row), joined(&pieces), pieces);
        }
        Unit::Chunk => {
            let c = &kb.chunks;
            let doc = c.doc_id.value(row);
            let span = Span { doc_id: doc.to_owned(), start: c.char_start.value(row), end: c.char_end.value(row) };
            let id = chunk_id(doc, c.chunk_idx.value(row));
            return finish(r, id, doc, c.text.value(row).to_owned(), vec![piece(c.text.value(row), Some(span))]);
        }
    };
    finish(r, id.to_owned(), doc_id, text, pieces)
}

/// The indexes of `rows` in the order a context takes them: by tier, then score (best first),
/// then unit and row.
fn context_order(rows: &[Retrieved]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&rows[a], &rows[b]);
        a.tier.cmp(&b.tier).then(b.score.total_cmp(&a.score)).then(a.unit.cmp(&b.unit)).then(a.row.cmp(&b.row))
    });
    order
}

/// The first `n` distinct pieces of `rows` in context order, as (index into `rows`, the text a
/// context would give of it): what a re-ranker reads. Rows repeated, and pieces whose text an
/// earlier one has, are passed over as the context passes them over.
pub fn leading_pieces(kb: &Kb, rows: &[Retrieved], n: usize) -> Vec<(usize, String)> {
    let mut seen_rows = HashSet::new();
    let mut seen_texts = HashSet::new();
    let mut out = Vec::new();
    for i in context_order(rows) {
        if out.len() == n {
            break;
        }
        let r = &rows[i];
        if !seen_rows.insert((r.unit, r.row, r.len, r.focus)) {
            continue;
        }
        let text = evidence(kb, r).text;
        if seen_texts.insert(text.trim().to_owned()) {
            out.push((i, text));
        }
    }
    out
}

/// The text of consecutive pieces: each trimmed, joined by a space.
fn joined(pieces: &[Piece]) -> String {
    pieces.iter().map(|p| p.text.trim()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" ")
}

fn finish(r: &Retrieved, id: String, doc_id: &str, text: String, pieces: Vec<Piece>) -> Evidence {
    let mut spans: Vec<Span> = pieces.iter().filter_map(|p| p.span.clone()).collect();
    spans.sort();
    spans.dedup();
    let covering = spans.iter().filter(|s| s.doc_id == doc_id);
    let start = covering.clone().map(|s| s.start).min();
    let end = covering.map(|s| s.end).max();
    Evidence { unit: r.unit, id, doc_id: doc_id.to_owned(), start, end, text, score: r.score, tokens: 0, spans, pieces }
}

/// The line of one piece of evidence in the context given to the generator, with its line
/// break: its [`head`] and its [`body`]. cl100k never joins a line break to the `[` that opens
/// the next line, so the tokens of a context are exactly the sum of its lines' tokens (each line
/// is counted once).
pub fn line(number: usize, e: &Evidence) -> String {
    head(number, e) + &body(e)
}

/// `[n] (unit; doc start-end)`: where a line's evidence is from.
fn head(number: usize, e: &Evidence) -> String {
    let span = match (e.start, e.end) {
        (Some(s), Some(t)) => format!(" {s}-{t}"),
        _ => String::new(),
    };
    format!("[{number}] ({}; {}{span})", e.unit.name(), e.doc_id)
}

/// ` text` and the line break: what a line says.
fn body(e: &Evidence) -> String {
    format!(" {}\n", e.text.trim())
}

/// The tokens of [`line`]: those of its head and those of its body, each remembered
/// ([`TokenCounter::count_memo`]), since the same evidence comes back in context after context
/// under one number or another. The sum is exact: cl100k splits a text into pieces before
/// encoding each, and the `)` that ends a head is a piece of its own whatever the body (a piece
/// that holds punctuation ends before a space, and the body starts with one), so no piece
/// crosses from head to body (a property test checks it).
fn line_tokens(number: usize, e: &Evidence, counter: &TokenCounter) -> usize {
    counter.count_memo(&head(number, e)) + counter.count_memo(&body(e))
}

impl Context {
    /// The evidence of `rows`, ranked by score (ties: unit, then row), deduplicated (by unit and
    /// row, by identical text, and by source: a piece all of whose spans lie inside spans already
    /// in the context — a hyperedge inside a cluster given before it, an edge whose hyperedge is
    /// there — adds nothing and is left out), and cut to `budget` tokens by dropping the lowest-ranked
    /// evidence first (0: no budget). The piece that crosses the budget is shortened to the room
    /// left when that is at least 48 tokens (always, when it is the first), so that a budget is
    /// used about fully whatever the size of the pieces. Evidence is built in rank order and
    /// only until the budget is full, so a long candidate list (HyperGraphRAG's expansions) costs
    /// little beyond its sort.
    pub fn assemble(kb: &Kb, rows: &[Retrieved], budget: usize, counter: &TokenCounter) -> Context {
        Context::assemble_with(kb, rows, budget, false, counter)
    }

    /// [`Context::assemble`], and with `merge` a context that says each thing once: evidence
    /// whose text is its verbatim spans (clusters, chunks, passages, hyperedges whose statement
    /// is their span) merges with the evidence of the same document it overlaps or touches into
    /// one passage in document order, cited once with its spans; derived text (an entity
    /// summary, an edge, a restated hyperedge) whose text already stands in the context adds
    /// nothing. The budget counts the lines as finally rendered.
    pub fn assemble_with(kb: &Kb, rows: &[Retrieved], budget: usize, merge: bool, counter: &TokenCounter) -> Context {
        let order = context_order(rows).into_iter().map(|i| &rows[i]);
        let mut seen_rows = HashSet::new();
        let mut seen_texts = HashSet::new();
        let mut covered = Covered::default();
        let mut kept: Vec<Evidence> = Vec::new();
        let mut used = 0;
        let mut full = false;
        let mut trimmed = 0;
        for r in order {
            if !seen_rows.insert((r.unit, r.row, r.len, r.focus)) {
                continue;
            }
            if full {
                trimmed += 1;
                continue;
            }
            let mut e = evidence(kb, r);
            if !seen_texts.insert(e.text.trim().to_owned()) || covered.covers(&e.spans) {
                continue;
            }
            if merge {
                if verbatim(&e) {
                    let joins: Vec<usize> =
                        (0..kept.len()).filter(|&i| verbatim(&kept[i]) && adjoins(&kept[i], &e)).collect();
                    if let Some(&first) = joins.first() {
                        // Merge into the best-ranked evidence it joins; the others it joins go.
                        let before = kept.clone();
                        let mut parts = vec![std::mem::replace(&mut kept[first], e.clone())];
                        for &i in joins[1..].iter().rev() {
                            parts.push(kept.remove(i));
                        }
                        parts.push(e.clone());
                        kept[first] = passage(parts);
                        let total = recount(&mut kept, counter);
                        if budget == 0 || total <= budget {
                            used = total;
                            covered.add(&e.spans);
                            continue;
                        }
                        // The merged passage does not fit: the piece goes on as a piece of its
                        // own, cut to the room left like any piece that crosses the budget.
                        kept = before;
                    }
                } else if kept.iter().any(|k| k.doc_id == e.doc_id && k.text.contains(e.text.trim())) {
                    continue;
                }
            }
            e.tokens = line_tokens(kept.len() + 1, &e, counter);
            if budget > 0 && used + e.tokens > budget {
                // The piece that crosses the budget is cut to the room left, when that room is
                // worth a piece (or when nothing was kept yet); everything ranked below it goes.
                full = true;
                let room = budget - used;
                if room >= MIN_CUT_TOKENS || kept.is_empty() {
                    cut_to_fit(&mut e, kept.len() + 1, room, counter);
                }
                if e.tokens <= room && !e.text.is_empty() {
                    kept.push(e);
                } else {
                    trimmed += 1;
                }
                continue;
            }
            used += e.tokens;
            covered.add(&e.spans);
            kept.push(e);
        }
        let tokens = kept.iter().map(|e| e.tokens).sum();
        Context { evidence: kept, trimmed, tokens, notes: Vec::new(), structure: None }
    }

    /// The numbered evidence lines given to the generator.
    pub fn render(&self) -> String {
        self.evidence.iter().enumerate().map(|(i, e)| line(i + 1, e)).collect()
    }
}

/// The document spans already in a context.
#[derive(Debug, Default)]
struct Covered {
    spans: std::collections::HashMap<String, Vec<(i64, i64)>>,
}

impl Covered {
    fn add(&mut self, spans: &[Span]) {
        for s in spans {
            self.spans.entry(s.doc_id.clone()).or_default().push((s.start, s.end));
        }
    }

    /// Whether every one of `spans` (at least one) lies inside a span already given.
    fn covers(&self, spans: &[Span]) -> bool {
        !spans.is_empty()
            && spans.iter().all(|s| {
                self.spans.get(&s.doc_id).is_some_and(|given| given.iter().any(|&(a, b)| a <= s.start && s.end <= b))
            })
    }
}

/// Pieces of one document this close (code points) or closer touch: they read as one passage.
const TOUCH: i64 = 3;

/// Whether the text of `e` is its verbatim pieces, each exactly its span of its document, so
/// that it can merge with other such evidence.
fn verbatim(e: &Evidence) -> bool {
    let exact = !e.pieces.is_empty()
        && e.pieces.iter().all(|p| {
            p.span.as_ref().is_some_and(|s| s.doc_id == e.doc_id && s.end - s.start == p.text.chars().count() as i64)
        });
    exact
        && match e.unit {
            Unit::Cluster | Unit::Chunk | Unit::Passage => true,
            Unit::Hyperedge => e.pieces.len() == 1 && e.text.trim() == e.pieces[0].text.trim(),
            Unit::Entity | Unit::Edge => false,
        }
}

/// Whether two pieces of evidence of one document overlap or touch.
fn adjoins(a: &Evidence, b: &Evidence) -> bool {
    a.doc_id == b.doc_id
        && a.spans.iter().any(|x| b.spans.iter().any(|y| x.start <= y.end + TOUCH && y.start <= x.end + TOUCH))
}

/// One passage of the verbatim evidence `parts` (of one document): their pieces in document
/// order, overlaps cut, a run of overlapping or touching pieces one span, runs joined by line
/// breaks; its score is the best of the parts'. The pieces stay apart (each still exactly its
/// span of the document, so that a sentence quoted from them is cited exactly), and the text
/// joins the pieces of a run with a space.
fn passage(parts: Vec<Evidence>) -> Evidence {
    let doc_id = parts[0].doc_id.clone();
    let score = parts.iter().map(|p| p.score).fold(f32::MIN, f32::max);
    let mut pieces: Vec<(i64, i64, String)> =
        parts.into_iter().flat_map(|e| e.pieces).filter_map(|p| p.span.map(|s| (s.start, s.end, p.text))).collect();
    pieces.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    // Runs: (start, end, pieces as (start, end, text)).
    type Located = (i64, i64, String);
    let mut runs: Vec<(i64, i64, Vec<Located>)> = Vec::new();
    for (start, end, text) in pieces {
        match runs.last_mut() {
            Some(run) if start <= run.1 + TOUCH => {
                if end > run.1 {
                    // The part past what the run holds already.
                    let from = start.max(run.1);
                    let rest: String = text.chars().skip((from - start) as usize).collect();
                    run.2.push((from, end, rest));
                    run.1 = end;
                }
            }
            _ => runs.push((start, end, vec![(start, end, text)])),
        }
    }
    let text = runs
        .iter()
        .map(|r| r.2.iter().map(|p| p.2.trim()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n");
    let span = |start: i64, end: i64| Span { doc_id: doc_id.clone(), start, end };
    let spans: Vec<Span> = runs.iter().map(|r| span(r.0, r.1)).collect();
    let pieces =
        runs.iter().flat_map(|r| &r.2).map(|p| Piece { text: p.2.clone(), span: Some(span(p.0, p.1)) }).collect();
    let (start, end) = (runs.first().map(|r| r.0), runs.last().map(|r| r.1));
    let id = format!("{doc_id}:{}-{}", start.unwrap_or(0), end.unwrap_or(0));
    Evidence { unit: Unit::Passage, id, doc_id, start, end, text, score, tokens: 0, spans, pieces }
}

/// Counts every line again (merging renumbers them) and returns the context's tokens.
fn recount(kept: &mut [Evidence], counter: &TokenCounter) -> usize {
    let mut total = 0;
    for (i, e) in kept.iter_mut().enumerate() {
        e.tokens = line_tokens(i + 1, e, counter);
        total += e.tokens;
    }
    total
}

/// Least room (tokens) for which the piece of evidence that crosses the budget is cut to fit
/// rather than dropped.
const MIN_CUT_TOKENS: usize = 48;

/// Shortens the text of the `number`th piece of evidence until its line fits `budget` tokens.
fn cut_to_fit(e: &mut Evidence, number: usize, budget: usize, counter: &TokenCounter) {
    let overhead = counter.count(&line(number, &Evidence { text: String::new(), ..e.clone() }));
    let room = budget.saturating_sub(overhead);
    let lengths = counter.token_byte_lengths(&e.text);
    let bytes: usize = lengths.iter().take(room).sum();
    let mut cut = bytes.min(e.text.len());
    while !e.text.is_char_boundary(cut) {
        cut -= 1;
    }
    e.text.truncate(cut);
    e.tokens = counter.count(&line(number, e));
    while e.tokens > budget && e.text.pop().is_some() {
        e.tokens = counter.count(&line(number, e));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn evidence(text: String, start: Option<i64>) -> Evidence {
        Evidence {
            unit: Unit::Chunk,
            id: "d#0".into(),
            doc_id: "d".into(),
            start,
            end: start.map(|s| s + 9),
            text,
            score: 0.5,
            tokens: 0,
            spans: Vec::new(),
            pieces: Vec::new(),
        }
    }

    proptest! {
        /// The context's count is the sum of its lines' counts, whatever the lines end with
        /// (letters, digits, punctuation, spaces, line breaks, other scripts).
        #[test]
        fn a_context_counts_as_the_sum_of_its_lines(
            texts in prop::collection::vec("[a-zA-Z0-9 .,;:!?()\\[\\]'\"\n\r\t-]{0,40}|[éü東京🚀 .\n]{0,12}", 1..6),
        ) {
            let counter = TokenCounter::cl100k();
            let evidence: Vec<Evidence> = texts
                .into_iter()
                .enumerate()
                .map(|(i, t)| evidence(t, (i % 2 == 0).then_some(i as i64 * 10)))
                .collect();
            let sum: usize = evidence.iter().enumerate().map(|(i, e)| counter.count(&line(i + 1, e))).sum();
            let context = Context { evidence, trimmed: 0, tokens: 0, notes: Vec::new(), structure: None };
            prop_assert_eq!(sum, counter.count(&context.render()));
        }

        /// A line's tokens are its head's and its body's, whatever its text, its document's
        /// name and its span.
        #[test]
        fn a_line_counts_as_its_head_and_body(
            text in "[a-zA-Z0-9 .,;:!?()\\[\\]'\"\n\r\t-]{0,40}|[éü東京🚀 .'\n]{0,12}",
            doc_id in "[a-zA-Z0-9_.()' -]{1,12}",
            number in 1usize..200,
            start in prop::option::of(0i64..100_000),
        ) {
            let counter = TokenCounter::cl100k();
            let e = Evidence { doc_id, ..evidence(text, start) };
            prop_assert_eq!(line_tokens(number, &e, &counter), counter.count(&line(number, &e)));
        }
    }
}
