//! Dynamic partitioning (paper §3.1): paragraphs are packed into chunks of at most `ct_max`
//! tokens, chunks shorter than `ct_min` are merged with an adjacent chunk afterwards, and
//! paragraphs longer than `ct_max` are split recursively (sentences, lines, words, tokens).
//!
//! Offsets are exact: every chunk is the document's text between its `char_start` and `char_end`
//! (Unicode code points, end-exclusive), chunks are in order without overlap, and whatever lies
//! between two chunks is whitespace.

use std::ops::Range;

use crate::core::text::{CharOffsets, paragraphs, sentence_ends, trim};
use crate::core::tokens::TokenCounter;

/// Token thresholds of dynamic partitioning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkParams {
    /// Chunks shorter than this merge with a neighbour (unless the document is shorter).
    pub ct_min: usize,
    /// Paragraphs are appended to a chunk until the next one would exceed this.
    pub ct_max: usize,
}

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Start offset in the document, in code points.
    pub char_start: usize,
    /// End offset (exclusive), in code points.
    pub char_end: usize,
    /// Start offset in bytes (for slicing the Rust string).
    pub byte_start: usize,
    /// End offset in bytes (exclusive).
    pub byte_end: usize,
    /// cl100k_base tokens of the chunk's text.
    pub n_tokens: usize,
    /// How many packed chunks were merged into this one (1 when it absorbed no short neighbour).
    pub parts: usize,
    /// Whether this chunk is a single unit that could not be split below `ct_max`.
    pub unsplittable: bool,
}

/// If a greedy estimate is this close to `ct_max`, the candidate chunk is counted exactly.
/// (Token counts are nearly additive across whitespace; the margin absorbs the difference.)
const ESTIMATE_SLACK: usize = 8;

/// A span of the document that the packer treats as indivisible.
#[derive(Debug, Clone)]
struct Unit {
    bytes: Range<usize>,
    tokens: usize,
    unsplittable: bool,
}

/// A chunk as packed by the greedy pass, before short chunks are merged.
#[derive(Debug, Clone)]
struct Packed {
    bytes: Range<usize>,
    tokens: usize,
    unsplittable: bool,
}

/// Splits `text` into chunks. Empty or whitespace-only text gives no chunk.
pub fn partition(text: &str, params: ChunkParams, counter: &TokenCounter) -> Vec<Chunk> {
    let mut units = Vec::new();
    for para in paragraphs(text) {
        push_units(text, para, Level::Sentences, params, counter, &mut units);
    }
    let packed = pack(text, &units, params, counter);
    let groups = merge_short(&packed, params);
    to_chunks(text, &packed, &groups, counter)
}

/// Split levels for paragraphs longer than `ct_max`, coarsest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Sentences,
    Lines,
    Words,
    Tokens,
}

impl Level {
    fn next(self) -> Level {
        match self {
            Level::Sentences => Level::Lines,
            Level::Lines => Level::Words,
            Level::Words | Level::Tokens => Level::Tokens,
        }
    }
}

/// Appends `range` as one unit if it fits, else the units of its recursive split.
fn push_units(
    text: &str,
    range: Range<usize>,
    level: Level,
    params: ChunkParams,
    counter: &TokenCounter,
    units: &mut Vec<Unit>,
) {
    let tokens = counter.count(&text[range.clone()]);
    if tokens <= params.ct_max {
        units.push(Unit { bytes: range, tokens, unsplittable: false });
        return;
    }
    if level == Level::Tokens {
        split_tokens(text, range, params, counter, units);
        return;
    }
    let pieces = split_at(text, range.clone(), level);
    if pieces.len() <= 1 {
        push_units(text, range, level.next(), params, counter, units);
        return;
    }
    for piece in pieces {
        push_units(text, piece, level.next(), params, counter, units);
    }
}

/// Trimmed, non-empty pieces of `range` at `level` (not Tokens).
fn split_at(text: &str, range: Range<usize>, level: Level) -> Vec<Range<usize>> {
    let s = &text[range.clone()];
    let mut cuts = vec![0];
    match level {
        Level::Sentences => cuts.extend(sentence_ends(s)),
        Level::Lines => cuts.extend(s.match_indices('\n').map(|(i, _)| i + 1)),
        Level::Words => cuts.extend(s.char_indices().filter(|(_, c)| c.is_whitespace()).map(|(i, c)| i + c.len_utf8())),
        Level::Tokens => {}
    }
    cuts.push(s.len());
    cuts.windows(2).filter_map(|w| trim(s, w[0]..w[1])).map(|r| range.start + r.start..range.start + r.end).collect()
}

/// Cuts `range` into runs of at most `ct_max` tokens at token boundaries that fall on character
/// boundaries. A run with no such boundary below `ct_max` stays whole and is marked unsplittable.
fn split_tokens(text: &str, range: Range<usize>, params: ChunkParams, counter: &TokenCounter, units: &mut Vec<Unit>) {
    let s = &text[range.clone()];
    let mut boundaries = vec![0];
    let mut pos = 0;
    for len in counter.token_byte_lengths(s) {
        pos += len;
        boundaries.push(pos);
    }
    let mut start_token = 0;
    while start_token + 1 < boundaries.len() {
        let mut end_token = (start_token + params.ct_max).min(boundaries.len() - 1);
        while end_token > start_token + 1 && !s.is_char_boundary(boundaries[end_token]) {
            end_token -= 1;
        }
        let mut unsplittable = false;
        if !s.is_char_boundary(boundaries[end_token]) {
            // No character boundary within ct_max tokens: take the shortest run that ends on one.
            while !s.is_char_boundary(boundaries[end_token]) {
                end_token += 1;
            }
            unsplittable = true;
        }
        let piece = boundaries[start_token]..boundaries[end_token];
        if let Some(r) = trim(s, piece) {
            let bytes = range.start + r.start..range.start + r.end;
            let tokens = counter.count(&text[bytes.clone()]);
            let unsplittable = unsplittable || tokens > params.ct_max;
            units.push(Unit { bytes, tokens, unsplittable });
        }
        start_token = end_token;
    }
}

/// The greedy pass: appends units to the current chunk until the next would exceed `ct_max`.
/// Decisions near the limit use exact counts, so no packed chunk of several units exceeds it.
fn pack(text: &str, units: &[Unit], params: ChunkParams, counter: &TokenCounter) -> Vec<Packed> {
    let mut out: Vec<Packed> = Vec::new();
    let mut i = 0;
    while i < units.len() {
        let first = &units[i];
        let mut current = Packed { bytes: first.bytes.clone(), tokens: first.tokens, unsplittable: first.unsplittable };
        i += 1;
        if !first.unsplittable {
            while i < units.len() && !units[i].unsplittable {
                let next = &units[i];
                let gap = counter.count(&text[current.bytes.end..next.bytes.start]);
                let estimate = current.tokens + gap + next.tokens;
                let candidate = current.bytes.start..next.bytes.end;
                let tokens = if estimate + ESTIMATE_SLACK <= params.ct_max {
                    estimate
                } else {
                    counter.count(&text[candidate.clone()])
                };
                if tokens > params.ct_max {
                    break;
                }
                current.bytes = candidate;
                current.tokens = tokens;
                i += 1;
            }
        }
        // Estimates are upper bounds in practice; the exact count settles the stored value.
        current.tokens = counter.count(&text[current.bytes.clone()]);
        out.push(current);
    }
    out
}

/// The post-pass: which consecutive packed chunks form each final chunk.
///
/// Every packed chunk shorter than `ct_min` is merged with an adjacent one. Among all ways to do
/// that, the one chosen has the fewest groups of three (needed only where pairs cannot cover,
/// e.g. short–full–short or three short chunks alone), then the fewest merges, then prefers a
/// short chunk joining the chunk before it. A group never holds two full chunks, so a merged
/// pair stays below `ct_max + ct_min` plus the tokens of the whitespace between its parts
/// (usually one), and a group of three below `ct_max + 2 * ct_min` plus two separators.
/// Earlier chunks are never re-partitioned.
fn merge_short(packed: &[Packed], params: ChunkParams) -> Vec<Range<usize>> {
    let n = packed.len();
    if n <= 1 {
        return (0..n).map(|i| i..i + 1).collect();
    }
    let short: Vec<bool> = packed.iter().map(|p| p.tokens < params.ct_min).collect();
    // cost = (groups of three, merges, short chunks merged forward); lexicographic.
    type Cost = (usize, usize, usize);
    let mut best: Vec<Option<(Cost, usize)>> = vec![None; n + 1];
    best[0] = Some(((0, 0, 0), 0));
    for end in 1..=n {
        let mut candidates: Vec<(Cost, usize)> = Vec::new();
        let from = |len: usize| end.checked_sub(len).and_then(|s| best[s].map(|(c, _)| (c, s)));
        if !short[end - 1]
            && let Some((c, s)) = from(1)
        {
            candidates.push((c, s));
        }
        if end >= 2
            && (short[end - 2] || short[end - 1])
            && let Some(((t, m, f), s)) = from(2)
        {
            let forward = usize::from(short[end - 2] && !short[end - 1]);
            candidates.push(((t, m + 1, f + forward), s));
        }
        if end >= 3
            && short[end - 3..end].iter().filter(|&&s| !s).count() <= 1
            && let Some(((t, m, f), s)) = from(3)
        {
            candidates.push(((t + 1, m + 2, f), s));
        }
        best[end] = candidates.into_iter().min_by_key(|&(c, _)| c);
    }
    let mut groups = Vec::new();
    let mut end = n;
    while end > 0 {
        // A cover always exists for n >= 2 (induction: a full chunk stands alone, a short first
        // chunk pairs with the second, and a remainder of three is one group), so the fallback
        // is never taken.
        let start = best[end].map_or(end - 1, |(_, s)| s);
        groups.push(start..end);
        end = start;
    }
    groups.reverse();
    groups
}

fn to_chunks(text: &str, packed: &[Packed], groups: &[Range<usize>], counter: &TokenCounter) -> Vec<Chunk> {
    let mut chunks = Vec::with_capacity(groups.len());
    let mut offsets = CharOffsets::new(text);
    for group in groups {
        let first = &packed[group.start];
        let last = &packed[group.end - 1];
        let bytes = first.bytes.start..last.bytes.end;
        let n_tokens = if group.len() == 1 { first.tokens } else { counter.count(&text[bytes.clone()]) };
        let char_start = offsets.at(bytes.start);
        let char_end = offsets.at(bytes.end);
        chunks.push(Chunk {
            char_start,
            char_end,
            byte_start: bytes.start,
            byte_end: bytes.end,
            n_tokens,
            parts: group.len(),
            unsplittable: group.len() == 1 && first.unsplittable,
        });
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ChunkParams = ChunkParams { ct_min: 500, ct_max: 600 };

    fn words(n: usize, seed: &str) -> String {
        (0..n).map(|i| format!("{seed}{}", i % 7)).collect::<Vec<_>>().join(" ")
    }

    fn check_tiling(text: &str, chunks: &[Chunk]) {
        let chars: Vec<char> = text.chars().collect();
        let mut prev_end = 0;
        for c in chunks {
            assert!(c.char_start >= prev_end && c.char_start < c.char_end);
            let gap: String = chars[prev_end..c.char_start].iter().collect();
            assert!(gap.trim().is_empty(), "gap {gap:?} is not whitespace");
            let by_chars: String = chars[c.char_start..c.char_end].iter().collect();
            assert_eq!(by_chars, text[c.byte_start..c.byte_end]);
            prev_end = c.char_end;
        }
        let tail: String = chars[prev_end..].iter().collect();
        assert!(tail.trim().is_empty());
    }

    #[test]
    fn short_document_is_one_chunk() {
        let text = "\n\nA short note about the ESA (European Space Agency).\n";
        let chunks = partition(text, P, &TokenCounter::cl100k());
        assert_eq!(chunks.len(), 1);
        assert_eq!(&text[chunks[0].byte_start..chunks[0].byte_end], text.trim());
        assert_eq!(chunks[0].char_start, 2);
        check_tiling(text, &chunks);
    }

    #[test]
    fn empty_document_has_no_chunk() {
        assert!(partition("", P, &TokenCounter::cl100k()).is_empty());
        assert!(partition(" \n \n", P, &TokenCounter::cl100k()).is_empty());
    }

    #[test]
    fn paragraphs_pack_up_to_ct_max_and_short_tail_merges_back() {
        let counter = TokenCounter::cl100k();
        // Seven paragraphs of ~190 tokens: greedy packs 3+3 (~570 each) and leaves 1 short tail.
        let paras: Vec<String> = (0..7).map(|i| words(47, &format!("p{i}w"))).collect();
        let text = paras.join("\n\n");
        let per_para = counter.count(&paras[0]);
        assert!((180..=195).contains(&per_para), "{per_para}");
        let chunks = partition(&text, P, &counter);
        check_tiling(&text, &chunks);
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert!((P.ct_min..=P.ct_max).contains(&chunks[0].n_tokens));
        assert_eq!(chunks[1].parts, 2);
        assert!(chunks[1].n_tokens < P.ct_max + P.ct_min);
    }

    #[test]
    fn long_paragraph_is_split_at_sentences() {
        let counter = TokenCounter::cl100k();
        let sentence = "The Northern Coastal Monitoring Agency (NCMA) measured the tide at Port Ellery. ";
        let text = sentence.repeat(120);
        let chunks = partition(&text, P, &counter);
        check_tiling(&text, &chunks);
        assert!(chunks.len() > 1);
        for c in &chunks {
            let s = &text[c.byte_start..c.byte_end];
            assert!(s.ends_with('.'), "chunk ends mid-sentence: {:?}", &s[s.len() - 20..]);
            assert_eq!(c.n_tokens, counter.count(s));
        }
    }

    #[test]
    fn text_without_spaces_is_split_at_tokens() {
        let counter = TokenCounter::cl100k();
        let text = "ab1😀cd".repeat(800);
        let chunks = partition(&text, P, &counter);
        check_tiling(&text, &chunks);
        assert!(chunks.len() > 1);
        for c in &chunks {
            assert!(!c.unsplittable);
            assert!(c.n_tokens < P.ct_max + P.ct_min);
        }
    }

    #[test]
    fn three_short_paragraphs_alone_form_one_chunk() {
        let counter = TokenCounter::cl100k();
        // ~350 + ~300 + ~350 tokens: every neighbour pair exceeds ct_max, each is below ct_min.
        let text = [words(175, "a"), words(150, "b"), words(175, "c")].join("\n\n");
        let chunks = partition(&text, P, &counter);
        check_tiling(&text, &chunks);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].parts, 3);
    }

    #[test]
    fn merge_prefers_backward_and_avoids_triples() {
        let p = |tokens| Packed { bytes: 0..0, tokens, unsplittable: false };
        // N S S N S: the only cover without triples and with two merges.
        let packed = [p(600), p(300), p(400), p(550), p(450)];
        assert_eq!(merge_short(&packed, P), vec![0..1, 1..3, 3..5]);
        let packed = [p(450), p(600), p(600)];
        assert_eq!(merge_short(&packed, P), vec![0..2, 2..3]);
        let packed = [p(550), p(520)];
        assert_eq!(merge_short(&packed, P), vec![0..1, 1..2]);
        // Short, full, short: only a group of three covers it.
        let packed = [p(100), p(590), p(120)];
        assert_eq!(merge_short(&packed, P), vec![0..3]);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn word() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => "[a-z]{1,9}",
                1 => "[A-Z]{2,5}",
                1 => "[0-9]{1,6}(\\.|,|!|\\?)?",
                1 => "[a-z]{1,8}[.!?]",
                1 => "(é|ü|ß|東|京|🚀|—|’){1,4}",
                1 => "[a-zA-Z0-9]{30,200}",
            ]
        }

        fn paragraph() -> impl Strategy<Value = String> {
            (prop::collection::vec((word(), prop_oneof![8 => Just(" "), 1 => Just("\n"), 1 => Just("  ")]), 1..120))
                .prop_map(|ws| ws.into_iter().map(|(w, sep)| format!("{w}{sep}")).collect::<String>().trim().to_owned())
        }

        fn document() -> impl Strategy<Value = String> {
            (
                prop::collection::vec(
                    (paragraph(), prop_oneof![Just("\n\n"), Just("\n \t\n"), Just("\r\n\r\n"), Just("\n\n\n")]),
                    0..12,
                ),
                prop_oneof![Just(""), Just("\n "), Just("  \n\n")],
            )
                .prop_map(|(paras, edge)| {
                    let body: String = paras.into_iter().map(|(p, sep)| format!("{p}{sep}")).collect();
                    format!("{edge}{body}{edge}")
                })
        }

        /// Any Unicode: control characters, combining marks, lone CRs, NULs, right-to-left text.
        fn any_text() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                prop::collection::vec(
                    prop_oneof![
                        Just("\r".to_owned()),
                        Just("\r\n\r\n".to_owned()),
                        Just("\u{0}".to_owned()),
                        Just("\u{301}\u{308}".to_owned()),
                        Just("\u{2028}\u{2029}".to_owned()),
                        Just("\u{feff}".to_owned()),
                        "\\PC{1,40}",
                        "[ \t\n]{1,4}",
                    ],
                    0..60
                )
                .prop_map(|parts| parts.concat()),
            ]
        }

        proptest! {
            #![proptest_config(crate::fuzz_config())]

            #[test]
            fn fuzz_any_unicode_text_is_tiled(text in any_text(), ct_min in 1usize..40, extra in 0usize..40) {
                let params = ChunkParams { ct_min, ct_max: ct_min + extra };
                let chunks = partition(&text, params, &TokenCounter::cl100k());
                check_tiling(&text, &chunks);
                prop_assert_eq!(chunks.is_empty(), text.trim().is_empty());
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

            #[test]
            fn chunks_tile_the_document_within_bounds(text in document(), ct_min in 1usize..60, extra in 0usize..80) {
                let params = ChunkParams { ct_min, ct_max: ct_min + extra };
                let counter = TokenCounter::cl100k();
                let chunks = partition(&text, params, &counter);
                check_tiling(&text, &chunks);
                prop_assert_eq!(chunks.is_empty(), text.trim().is_empty());

                // The same steps as `partition`, to see the packed chunks behind each chunk.
                let mut units = Vec::new();
                for para in paragraphs(&text) {
                    push_units(&text, para, Level::Sentences, params, &counter, &mut units);
                }
                let packed = pack(&text, &units, params, &counter);
                let groups = merge_short(&packed, params);
                prop_assert_eq!(groups.len(), chunks.len());
                // Joining parts adds the whitespace between them, and BPE may cut a few tokens
                // differently across the seam; allow for both.
                let sep = text.split(|c: char| !c.is_whitespace()).map(|run| counter.count(run)).max().unwrap_or(0);
                for (group, c) in groups.iter().zip(&chunks) {
                    let members = &packed[group.clone()];
                    let full = members.iter().filter(|p| p.tokens >= ct_min).count();
                    let content: usize = members.iter().map(|p| p.tokens).sum();
                    prop_assert_eq!(c.n_tokens, counter.count(&text[c.byte_start..c.byte_end]));
                    prop_assert!(members.len() <= 3 && full <= 1, "{members:?}");
                    for p in members {
                        prop_assert!(p.tokens <= params.ct_max || p.unsplittable, "{p:?}");
                    }
                    if chunks.len() > 1 {
                        prop_assert!(members.len() > 1 || full == 1, "short chunk left alone: {c:?}");
                        prop_assert!(c.n_tokens >= ct_min, "{c:?}");
                    }
                    if !members.iter().any(|p| p.unsplittable) {
                        // One full part at most ct_max, every other part below ct_min.
                        prop_assert!(content <= params.ct_max + (members.len() - 1) * (ct_min - 1));
                        prop_assert!(c.n_tokens <= content + (members.len() - 1) * (sep + 2), "{c:?} {members:?}");
                    }
                }
            }
        }
    }
}
