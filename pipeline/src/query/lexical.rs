//! The lexical signal beside the dense one: Okapi BM25 over the kb's hyperedges, held in memory
//! as an inverted index built when the kb is loaded.
//!
//! A text's terms are its alphanumeric words, lowercased, without the words that carry no
//! content ([`is_question_stop_word`]), each reduced to its Snowball English stem (`chaired`,
//! `chairs` → `chair`), so that a question and a fact that word one thing differently still
//! meet. Scores are BM25 with k1 = 1.2, b = 0.75 and Lucene's idf, ln(1 + (N − df + 0.5) /
//! (df + 0.5)), which is never negative.

use std::collections::HashMap;

use foldhash::HashMapExt;
use rayon::prelude::*;
use rust_stemmers::{Algorithm, Stemmer};

use super::scan::Hit;
use crate::core::heap::HeapSize;
use crate::core::words::is_question_stop_word;

/// Term-frequency saturation.
const K1: f32 = 1.2;
/// Length normalisation.
const B: f32 = 0.75;
/// Rows indexed together by one parallel job.
const ROWS_PER_BLOCK: usize = 16_384;

/// The stemmed content words of `text`, in order (repeats kept).
pub fn terms(text: &str) -> Vec<String> {
    let stemmer = Stemmer::create(Algorithm::English);
    words(text).filter_map(|w| term(&stemmer, w)).collect()
}

/// The words of `text`: its runs of alphanumeric characters.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty())
}

/// The term of one word (None: a stop word).
fn term(stemmer: &Stemmer, word: &str) -> Option<String> {
    let word = word.to_lowercase();
    (!is_question_stop_word(&word)).then(|| stemmer.stem(&word).into_owned())
}

/// A BM25 index over a list of texts (rows).
#[derive(Debug, Clone, Default)]
pub struct Lexical {
    /// Term → (row, frequency in the row), rows ascending. (Maps built here hash with foldhash:
    /// millions of words at a load, none chosen by a client.)
    postings: foldhash::HashMap<String, Vec<(u32, u32)>>,
    /// Terms per row.
    lengths: Vec<u32>,
    /// Mean terms per row.
    mean_length: f32,
}

/// The index of one block of rows ([`Lexical::build`]).
struct Block {
    /// The block's terms, by number.
    terms: Vec<String>,
    /// Each term's postings, rows ascending.
    postings: Vec<Vec<(u32, u32)>>,
    /// Terms per row.
    lengths: Vec<u32>,
}

impl Block {
    /// Indexes `texts`, rows `first`, `first` + 1, …. Each distinct word is lowercased, checked
    /// and stemmed once per block (stemming every occurrence was most of the time: a million
    /// hyperedges hold tens of millions of words and far fewer distinct ones).
    fn build(texts: &[&str], first: usize) -> Block {
        let stemmer = Stemmer::create(Algorithm::English);
        let mut word_terms: foldhash::HashMap<&str, Option<u32>> = foldhash::HashMap::new();
        let mut term_ids: foldhash::HashMap<String, u32> = foldhash::HashMap::new();
        let mut block = Block { terms: Vec::new(), postings: Vec::new(), lengths: Vec::with_capacity(texts.len()) };
        let mut row_terms = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            row_terms.clear();
            for word in words(text) {
                let id = *word_terms.entry(word).or_insert_with(|| {
                    let term = term(&stemmer, word)?;
                    let next = block.terms.len() as u32;
                    Some(*term_ids.entry(term).or_insert_with_key(|term| {
                        block.terms.push(term.clone());
                        block.postings.push(Vec::new());
                        next
                    }))
                });
                row_terms.extend(id);
            }
            // Sorted, so that a term's frequency is the length of its run.
            row_terms.sort_unstable();
            for run in row_terms.chunk_by(|a, b| a == b) {
                block.postings[run[0] as usize].push(((first + i) as u32, run.len() as u32));
            }
            block.lengths.push(row_terms.len() as u32);
        }
        block
    }
}

impl HeapSize for Lexical {
    fn heap_size(&self) -> usize {
        self.postings.heap_size() + self.lengths.heap_size()
    }
}

impl Lexical {
    /// Indexes `texts` (row i is `texts[i]`).
    pub fn build<'a>(texts: impl IntoParallelIterator<Item = &'a str>) -> Lexical {
        let texts: Vec<&str> = texts.into_par_iter().collect();
        // Blocks of rows are indexed in parallel and their postings appended in row order
        // (`reduce` on an indexed iterator combines neighbours left to right).
        let blocks: Vec<Block> = texts
            .par_chunks(ROWS_PER_BLOCK)
            .enumerate()
            .map(|(block, texts)| Block::build(texts, block * ROWS_PER_BLOCK))
            .collect();
        let mut postings: foldhash::HashMap<String, Vec<(u32, u32)>> = foldhash::HashMap::new();
        let mut lengths = Vec::with_capacity(texts.len());
        for block in blocks {
            for (term, list) in block.terms.into_iter().zip(block.postings) {
                postings.entry(term).or_default().extend(list);
            }
            lengths.extend(block.lengths);
        }
        let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
        let mean_length = if lengths.is_empty() { 0.0 } else { total as f32 / lengths.len() as f32 };
        Lexical { postings, lengths, mean_length }
    }

    /// Rows indexed.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether no row is indexed.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The `k` rows of highest BM25 score for `query` (each distinct query term counted once),
    /// best first, ties to the lower row; rows sharing no term with it are never returned.
    pub fn search(&self, query: &str, k: usize) -> Vec<Hit> {
        let mut query_terms = terms(query);
        query_terms.sort_unstable();
        query_terms.dedup();
        let n = self.lengths.len() as f32;
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for t in &query_terms {
            let Some(list) = self.postings.get(t) else { continue };
            let df = list.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(row, tf) in list {
                let tf = tf as f32;
                let norm = 1.0 - B + B * self.lengths[row as usize] as f32 / self.mean_length.max(1.0);
                *scores.entry(row).or_default() += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
        }
        let hits = scores.into_iter().map(|(row, score)| Hit { row: row as usize, score }).collect();
        flexstruct_scan::keep_best(hits, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_stemmed_content_words() {
        assert_eq!(terms("Who chaired the talks?"), ["chair", "talk"]);
        assert_eq!(terms("The talks were chaired by Rafael Ortiz."), ["talk", "chair", "rafael", "ortiz"]);
        assert!(terms("of the and").is_empty());
    }

    #[test]
    fn search_ranks_by_bm25() {
        let texts = [
            "The compact was signed in Aldermoor.",
            "Talks on the compact were chaired by Rafael Ortiz.",
            "The weir raised the Long Dyke by 1.2 metres.",
            "Ortiz retired in 2015; Ortiz died in 2018.",
        ];
        let index = Lexical::build(texts.into_par_iter());
        assert_eq!(index.len(), 4);
        let hits = index.search("Who chaired the talks on the compact?", 10);
        let rows: Vec<usize> = hits.iter().map(|h| h.row).collect();
        // The row with every term first; the one sharing only `compact` next; none without a
        // shared term.
        assert_eq!(rows, [1, 0]);
        assert!(hits[0].score > hits[1].score && hits[1].score > 0.0);
        // A repeated term counts, saturating: row 3 names Ortiz twice.
        let hits = index.search("Ortiz", 10);
        assert_eq!(hits.iter().map(|h| h.row).collect::<Vec<_>>(), [3, 1]);
        // A rare term weighs more than a common one.
        assert!(index.search("weir", 1)[0].score > index.search("compact", 1)[0].score);
        assert!(index.search("nothing shared here", 5).is_empty());
        assert!(Lexical::default().search("compact", 5).is_empty());
    }

    #[test]
    fn blocks_indexed_in_parallel_keep_every_posting_in_row_order() {
        let rows = 2 * ROWS_PER_BLOCK + 5;
        let texts: Vec<String> = (0..rows).map(|i| format!("weir{} compact compact", i % 3)).collect();
        let index = Lexical::build(texts.par_iter().map(String::as_str));
        let compact = &index.postings["compact"];
        assert_eq!(compact.len(), rows);
        assert!(compact.iter().enumerate().all(|(i, &(row, tf))| row as usize == i && tf == 2));
        let weir1: Vec<u32> = index.postings["weir1"].iter().map(|p| p.0).collect();
        assert_eq!(weir1, (0..rows as u32).filter(|r| r % 3 == 1).collect::<Vec<_>>());
        assert_eq!((index.len(), index.mean_length), (rows, 3.0));
    }

    #[test]
    fn the_index_holds_each_rows_terms_as_terms_gives_them() {
        let words = ["Weir", "weirs", "the", "Compact", "compacts", "Ortiz", "of", "chaired", "CHAIRS", "2015"];
        let mut rng = fastrand::Rng::with_seed(7);
        let texts: Vec<String> = (0..ROWS_PER_BLOCK + 300)
            .map(|_| (0..rng.usize(0..9)).map(|_| words[rng.usize(..words.len())]).collect::<Vec<_>>().join(" "))
            .collect();
        let index = Lexical::build(texts.par_iter().map(String::as_str));
        let mut expected: foldhash::HashMap<String, Vec<(u32, u32)>> = foldhash::HashMap::new();
        for (row, text) in texts.iter().enumerate() {
            let terms = terms(text);
            assert_eq!(index.lengths[row] as usize, terms.len());
            let mut counts: HashMap<&String, u32> = HashMap::new();
            for t in &terms {
                *counts.entry(t).or_default() += 1;
            }
            for (t, n) in counts {
                expected.entry(t.clone()).or_default().push((row as u32, n));
            }
        }
        assert_eq!(index.postings, expected);
        assert!(index.postings.contains_key("chair") && !index.postings.contains_key("the"));
    }
}
