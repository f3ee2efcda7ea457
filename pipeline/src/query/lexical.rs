//! The lexical signal beside the dense one: Okapi BM25 over the kb's hyperedges, held in memory
//! as an inverted index built when the kb is loaded.
//!
//! A text's terms are its alphanumeric words, lowercased, without the words that carry no
//! content ([`is_question_stop_word`]), each reduced to its Snowball English stem (`chaired`,
//! `chairs` → `chair`), so that a question and a fact that word one thing differently still
//! meet. Scores are BM25 with k1 = 1.2, b = 0.75 and Lucene's idf, ln(1 + (N − df + 0.5) /
//! (df + 0.5)), which is never negative.

use std::collections::HashMap;

use rayon::prelude::*;
use rust_stemmers::{Algorithm, Stemmer};

use super::scan::Hit;
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
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !is_question_stop_word(w))
        .map(|w| stemmer.stem(&w).into_owned())
        .collect()
}

/// A BM25 index over a list of texts (rows).
#[derive(Debug, Clone, Default)]
pub struct Lexical {
    /// Term → (row, frequency in the row), rows ascending.
    postings: HashMap<String, Vec<(u32, u32)>>,
    /// Terms per row.
    lengths: Vec<u32>,
    /// Mean terms per row.
    mean_length: f32,
}

impl Lexical {
    /// Indexes `texts` (row i is `texts[i]`).
    pub fn build<'a>(texts: impl IntoParallelIterator<Item = &'a str>) -> Lexical {
        // Each row's terms, sorted, so that a term's frequency is the length of its run.
        let rows: Vec<Vec<String>> = texts
            .into_par_iter()
            .map(|text| {
                let mut t = terms(text);
                t.sort_unstable();
                t
            })
            .collect();
        // Blocks of rows are indexed in parallel and their postings appended in row order
        // (`reduce` on an indexed iterator combines neighbours left to right).
        let postings = rows
            .par_chunks(ROWS_PER_BLOCK)
            .enumerate()
            .map(|(block, rows)| {
                let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
                for (i, terms) in rows.iter().enumerate() {
                    let row = (block * ROWS_PER_BLOCK + i) as u32;
                    for run in terms.chunk_by(|a, b| a == b) {
                        let list = match postings.get_mut(&run[0]) {
                            Some(list) => list,
                            None => postings.entry(run[0].clone()).or_default(),
                        };
                        list.push((row, run.len() as u32));
                    }
                }
                postings
            })
            .reduce(HashMap::new, |mut left, right| {
                for (term, list) in right {
                    left.entry(term).or_default().extend(list);
                }
                left
            });
        let lengths: Vec<u32> = rows.iter().map(|terms| terms.len() as u32).collect();
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
}
