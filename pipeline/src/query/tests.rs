//! Retrieval, context and answers on a tiny hand-built knowledge base whose cosines with the
//! query are chosen (query = e₁, every vector (c, √(1−c²), 0)), so every mode's ids are known.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use arrow::array::{Int32Array, Int64Array, StringArray};

use super::config::{Assembly, FusionWeights, Mode, QueryConfig, Thresholds, WindowIn};
use super::context::Context;
use super::generate;
use super::kb::*;
use super::scan::Vectors;
use super::strategy::{QueryInput, Retrieved, Unit, retrieve};
use crate::core::tokens::TokenCounter;

/// The one document of the tiny kb. Every hyperedge is one of its sentences.
const DOC: &str = "The Velda Basin Authority (VBA) runs the Harlow gauge. Mara Quint chairs the VBA. \
The gauge measured 7.9 cubic metres per second in August. Quint signed the compact in 2009. \
Rain fell in May. Long records kept at the gauge show the summer flow falling slowly over many \
decades, with wet and dry runs of several seasons each, while the winter flow has changed far less, and \
the readings are checked by hand every week by staff who walk the bank from the weir to the bridge.";

fn at_cosines(cosines: &[f32]) -> Vectors {
    let values: Vec<f32> = cosines.iter().flat_map(|&c| [c, (1.0 - c * c).max(0.0).sqrt(), 0.0]).collect();
    Vectors::new(3, values.into())
}

fn strings(v: &[&str]) -> StringArray {
    StringArray::from(v.to_vec())
}

/// Code-point span of a sentence of DOC.
fn span_of(sentence: &str) -> (i64, i64) {
    let byte = DOC.find(sentence).unwrap();
    let start = DOC[..byte].chars().count() as i64;
    (start, start + sentence.chars().count() as i64)
}

fn tiny_kb() -> Kb {
    let sentences = [
        "The Velda Basin Authority (VBA) runs the Harlow gauge.",
        "Mara Quint chairs the VBA.",
        "The gauge measured 7.9 cubic metres per second in August.",
        "Quint signed the compact in 2009.",
        "Rain fell in May.",
    ];
    let spans: Vec<(i64, i64)> = sentences.iter().map(|s| span_of(s)).collect();
    let hyperedges = Hyperedges {
        id: strings(&["h0", "h1", "h2", "h3", "h4"]),
        doc_id: strings(&["d"; 5]),
        item_idx: Int32Array::from(vec![0, 1, 2, 3, 4]),
        text: strings(&sentences),
        ref_text: strings(&sentences),
        ref_start: Int64Array::from(spans.iter().map(|s| s.0).collect::<Vec<_>>()),
        ref_end: Int64Array::from(spans.iter().map(|s| s.1).collect::<Vec<_>>()),
        vectors: at_cosines(&[0.95, 0.8, 0.6, 0.4, -0.2]),
    };
    let entities = Entities {
        id: strings(&["e0", "e1", "e2"]),
        doc_id: strings(&["d"; 3]),
        name: strings(&["Velda Basin Authority", "Mara Quint", "Harlow gauge"]),
        norm_name: strings(&["velda basin authority", "mara quint", "harlow gauge"]),
        summary: strings(&[sentences[0], "Mara Quint chairs the VBA. Quint signed the compact in 2009.", sentences[0]]),
        vectors: at_cosines(&[0.5, 0.3, 0.1]),
    };
    let edges = Edges {
        id: strings(&["g0", "g1"]),
        doc_id: strings(&["d", "d"]),
        text: strings(&["Velda Basin Authority runs the Harlow gauge", "Mara Quint chairs the Velda Basin Authority"]),
        hyperedge: vec![Some(0), Some(1)],
        ends: vec![[Some(0), Some(2)], [Some(1), Some(0)]],
        vectors: at_cosines(&[0.9, 0.5]),
    };
    let (c0, c1) = (span_of(sentences[0]), span_of(sentences[2]));
    let chunks = Chunks {
        doc_id: strings(&["d", "d"]),
        chunk_idx: Int32Array::from(vec![0, 1]),
        text: strings(&[&DOC[..DOC.find("The gauge").unwrap() - 1], &DOC[DOC.find("The gauge").unwrap()..]]),
        char_start: Int64Array::from(vec![c0.0, c1.0]),
        char_end: Int64Array::from(vec![c1.0 - 1, DOC.chars().count() as i64]),
        vectors: at_cosines(&[0.7, 0.3]),
    };
    let clusters = Clusters {
        id: strings(&["c0", "c1"]),
        doc_id: strings(&["d", "d"]),
        text: strings(&[&format!("{}\n{}", sentences[0], sentences[1]), sentences[3]]),
        members: vec![vec![0, 1], vec![3]],
    };
    let by_name: HashMap<String, Vec<u32>> = [("velda basin authority", 0), ("mara quint", 1), ("harlow gauge", 2)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), vec![v]))
        .collect();
    let by_alias: HashMap<String, Vec<u32>> =
        [("vba", 0), ("quint", 1)].into_iter().map(|(k, v)| (k.to_owned(), vec![v])).collect();
    let (hyperedge_chunk, chunk_has_hyperedges) = chunk_links(&hyperedges, &chunks);
    Kb {
        model: "test".into(),
        entities,
        hyperedges,
        edges,
        chunks,
        clusters,
        by_name,
        by_alias,
        by_title: HashMap::new(),
        entity_hyperedges: vec![vec![0, 1], vec![1, 3], vec![0, 2]],
        hyperedge_entities: vec![vec![0, 2], vec![0, 1], vec![2], vec![1], vec![]],
        hyperedge_clusters: vec![vec![0], vec![0], vec![], vec![1], vec![]],
        hyperedge_chunk,
        chunk_has_hyperedges,
        lexical: Default::default(),
        derived_thresholds: HashMap::new(),
        fingerprint: String::new(),
        load_times: Default::default(),
        searches: Vec::new(),
        notes: Vec::new(),
    }
}

const OPEN: Thresholds = Thresholds { hyperedge: 0.0, edge: 0.0, chunk: 0.0 };
const QUERY: [f32; 3] = [1.0, 0.0, 0.0];

fn ids(kb: &Kb, config: &QueryConfig, entities: &[&str], thresholds: Thresholds) -> Vec<String> {
    let entities: Vec<String> = entities.iter().map(|s| s.to_string()).collect();
    let input = QueryInput { text: "", vector: &QUERY, entities: &entities, entity_vectors: &[] };
    let r = retrieve(kb, config, thresholds, input);
    r.rows.iter().map(|r| id_of(kb, r)).collect()
}

fn id_of(kb: &Kb, r: &Retrieved) -> String {
    let row = r.row as usize;
    match r.unit {
        Unit::Entity => kb.entities.id.value(row).to_owned(),
        Unit::Hyperedge => kb.hyperedges.id.value(row).to_owned(),
        Unit::Edge => kb.edges.id.value(row).to_owned(),
        Unit::Cluster => kb.clusters.id.value(row).to_owned(),
        Unit::Chunk => format!("k{}", kb.chunks.chunk_idx.value(row)),
        Unit::Passage => format!("p{}+{}", kb.hyperedges.id.value(row), r.len),
    }
}

/// The paper's modules and assembly (no bridge retrieval), so that each module's ids are known.
fn config(mode: Mode, n_eh: usize, n_e: usize) -> QueryConfig {
    QueryConfig { mode, n_eh, n_e, bridges: false, assembly: Assembly::Paper, ..QueryConfig::default() }
}

/// [`tiny_kb`] with its lexical index.
fn tiny_kb_indexed() -> Kb {
    let mut kb = tiny_kb();
    kb.lexical = lexical_index(&kb.hyperedges, &kb.hyperedge_entities, &kb.entities);
    kb
}

/// The rows a question retrieves, with each one's unit, row and focus.
fn fused_rows(kb: &Kb, config: &QueryConfig, question: &str, entities: &[&str]) -> Vec<(Unit, u32, Option<u32>)> {
    let entities: Vec<String> = entities.iter().map(|s| s.to_string()).collect();
    let input = QueryInput { text: question, vector: &QUERY, entities: &entities, entity_vectors: &[] };
    retrieve(kb, config, OPEN, input).rows.iter().map(|r| (r.unit, r.row, r.focus)).collect()
}

#[test]
fn the_fused_assembly_ranks_hyperedges_by_every_module_and_gives_their_windows() {
    let kb = tiny_kb_indexed();
    // Every module weighing 1 (BM25 weighs 2 by default), so that the ranks below add up simply.
    let weights = FusionWeights { lexical: 1.0, ..FusionWeights::default() };
    let fused = QueryConfig { assembly: Assembly::Fused, window_k: 0, weights, ..config(Mode::Hybrid, 7, 3) };
    let q = "When did Quint sign the compact?";
    let h = Unit::Hyperedge;
    // Reciprocal ranks (k = 60): h1 is 1st of Mara Quint's facts, 2nd by cosine and 2nd by BM25;
    // h3 2nd, 4th and 1st; h0 and h2 are 1st and 3rd by cosine only (h4's cosine is below τ_EH).
    // Edges weigh 0 by default.
    assert_eq!(fused_rows(&kb, &fused, q, &["Mara Quint"]), [(h, 1, None), (h, 3, None), (h, 0, None), (h, 2, None)]);
    let input = QueryInput { text: q, vector: &QUERY, entities: &["Mara Quint".to_owned()], entity_vectors: &[] };
    let scores: Vec<f32> = retrieve(&kb, &fused, OPEN, input).rows.iter().map(|r| r.score).collect();
    let rrf = |ranks: &[f32]| ranks.iter().map(|r| 1.0 / (60.0 + r)).sum::<f32>();
    assert!((scores[0] - rrf(&[1.0, 2.0, 2.0])).abs() < 1e-6, "{scores:?}");
    assert!((scores[1] - rrf(&[2.0, 4.0, 1.0])).abs() < 1e-6, "{scores:?}");
    // Without entity retrieval, cosine and BM25 decide (h1: 2nd and 2nd, ahead of h3: 4th and
    // 1st); without either, cosine alone; weights move the fusion.
    let no_entities = QueryConfig { entities: false, ..fused.clone() };
    assert_eq!(fused_rows(&kb, &no_entities, q, &[]), [(h, 1, None), (h, 3, None), (h, 0, None), (h, 2, None)]);
    let cosine_only = QueryConfig { lexical: false, ..no_entities.clone() };
    assert_eq!(fused_rows(&kb, &cosine_only, q, &[]), [(h, 0, None), (h, 1, None), (h, 2, None), (h, 3, None)]);
    assert_eq!(super::variant(&cosine_only), "hybrid w/o EnR+BR+LR");
    let lexical_first = QueryConfig { weights: FusionWeights { lexical: 3.0, ..fused.weights }, ..fused.clone() };
    assert_eq!(fused_rows(&kb, &lexical_first, q, &["Mara Quint"])[0], (h, 3, None));
    // Edges weighing 1: the hyperedges behind g0 (h0) and g1 (h1) gain a rank each.
    let with_edges = QueryConfig { weights: FusionWeights { edges: 1.0, ..fused.weights }, ..fused.clone() };
    let input = QueryInput { text: q, vector: &QUERY, entities: &["Mara Quint".to_owned()], entity_vectors: &[] };
    let r = retrieve(&kb, &with_edges, OPEN, input);
    assert!((r.rows[0].score - rrf(&[1.0, 2.0, 2.0, 2.0])).abs() < 1e-6, "{:?}", r.rows);
    // Windows: each hyperedge with its neighbours in the document (`window_k` a side), or, with
    // `window_in = cluster`, its fellow members of its cluster (c0 holds h0 and h1, c1 holds h3;
    // h2 is in none and takes its document neighbours).
    let windows = QueryConfig { window_k: 1, ..fused.clone() };
    let p = Unit::Passage;
    assert_eq!(fused_rows(&kb, &windows, q, &["Mara Quint"]), [(p, 0, None), (p, 2, None), (p, 0, None), (p, 1, None)]);
    let in_clusters = QueryConfig { window_in: WindowIn::Cluster, ..windows.clone() };
    let c = Unit::Cluster;
    assert_eq!(
        fused_rows(&kb, &in_clusters, q, &["Mara Quint"]),
        [(c, 0, Some(1)), (c, 1, Some(3)), (c, 0, Some(0)), (p, 1, None)]
    );
    // In the context, windows that overlap or touch are one passage, each sentence once.
    let counter = TokenCounter::cl100k();
    let r = retrieve(&kb, &windows, OPEN, input);
    let context = Context::assemble_with(&kb, &r.rows, 0, windows.merges(), &counter);
    let texts: Vec<&str> = context.evidence.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(
        texts,
        ["The Velda Basin Authority (VBA) runs the Harlow gauge. Mara Quint chairs the VBA. \
             The gauge measured 7.9 cubic metres per second in August. Quint signed the compact in 2009. \
             Rain fell in May."]
    );
    assert_eq!(context.evidence[0].spans.len(), 1);
    assert_eq!(context.evidence[0].pieces.len(), 5, "each sentence stays a piece of its own");
    // A cluster window: the member and `len` members a side; the whole cluster without `len`.
    let window = |focus: u32, len: u32| {
        let r = Retrieved { unit: Unit::Cluster, row: 0, score: 1.0, len, tier: 0, focus: Some(focus) };
        Context::assemble(&kb, &[r], 0, &counter).evidence[0].text.clone()
    };
    assert_eq!(window(0, 1), "The Velda Basin Authority (VBA) runs the Harlow gauge. Mara Quint chairs the VBA.");
    assert_eq!(window(0, 0), kb.clusters.text.value(0));
}

#[test]
fn a_question_that_follows_a_relation_weighs_entities_and_bridges_more() {
    let kb = tiny_kb_indexed();
    // Entities weigh so little that h2 (3rd by cosine) stays ahead of h3 (4th by cosine, 2nd of
    // Mara Quint's facts) unless the question follows a relation (`father of …`).
    let weights = FusionWeights { entities: 0.01, lexical: 0.0, ..FusionWeights::default() };
    let c = QueryConfig { assembly: Assembly::Fused, window_k: 0, weights, ..config(Mode::Hybrid, 7, 3) };
    let order = |q: &str| -> Vec<u32> {
        let entities = ["Mara Quint".to_owned()];
        let input = QueryInput { text: q, vector: &QUERY, entities: &entities, entity_vectors: &[] };
        retrieve(&kb, &c, OPEN, input).rows.iter().map(|r| r.row).filter(|r| [2, 3].contains(r)).collect()
    };
    assert_eq!(order("Where was Mara Quint born?"), [2, 3]);
    assert_eq!(order("Where was the father of Mara Quint born?"), [3, 2]);
    assert_eq!(order("Where was Mara Quint's mother-in-law born?"), [3, 2]);
    let unboosted = QueryConfig { hop_boost: 1.0, ..c.clone() };
    let entities = ["Mara Quint".to_owned()];
    let input = QueryInput {
        text: "Where was the father of Mara Quint born?",
        vector: &QUERY,
        entities: &entities,
        entity_vectors: &[],
    };
    let rows: Vec<u32> =
        retrieve(&kb, &unboosted, OPEN, input).rows.iter().map(|r| r.row).filter(|r| [2, 3].contains(r)).collect();
    assert_eq!(rows, [2, 3]);
}

#[test]
fn the_fused_assembly_fills_a_cap_after_what_its_breadths_give() {
    let kb = tiny_kb_indexed();
    // N_EH = 1: cosine's first (h0) and BM25's first (h3) are what the breadths give; every rank
    // of the pools counts, so h3 (4th by cosine as well) comes first. Filling, the rest follows
    // as tier 1.
    let c = QueryConfig {
        assembly: Assembly::Fused,
        clusters: false,
        entities: false,
        window_k: 0,
        weights: FusionWeights { lexical: 1.0, ..FusionWeights::default() },
        ..config(Mode::Hybrid, 1, 0)
    };
    let input =
        QueryInput { text: "When did Quint sign the compact?", vector: &QUERY, entities: &[], entity_vectors: &[] };
    let tiers = |c: &QueryConfig| -> Vec<(u32, u8)> {
        retrieve(&kb, c, OPEN, input).rows.iter().map(|r| (r.row, r.tier)).collect()
    };
    assert_eq!(tiers(&c), [(3, 0), (0, 0)]);
    let filling = QueryConfig { fill: true, max_context_tokens: 1000, ..c.clone() };
    assert_eq!(tiers(&filling), [(3, 0), (0, 0), (1, 1), (2, 1)]);
}

/// `kb` plus a second document, titled "Mara Quint": entity e3 (same name as e1) with hyperedge
/// h5 ("born in Ostend", cosine 0.45), and h6 (cosine 0.1), which names nobody; and `hub_nodes`
/// more nodes named like the authority.
fn with_second_document(mut kb: Kb, hub_nodes: usize) -> Kb {
    fn append(a: &StringArray, more: &[&str]) -> StringArray {
        a.iter()
            .map(|v| v.unwrap_or_default().to_owned())
            .chain(more.iter().map(|s| s.to_string()))
            .collect::<Vec<_>>()
            .into()
    }
    fn extend(v: &Vectors, cosines: &[f32]) -> Vectors {
        let mut values = v.to_f32();
        values.extend(cosines.iter().flat_map(|&c| [c, (1.0 - c * c).max(0.0).sqrt(), 0.0]));
        Vectors::new(3, values.into())
    }
    let h = &mut kb.hyperedges;
    let texts = ["Mara Quint was born in Ostend.", "Quint rowed."];
    h.id = append(&h.id, &["h5", "h6"]);
    h.doc_id = append(&h.doc_id, &["d2", "d2"]);
    h.item_idx = Int32Array::from(h.item_idx.values().iter().copied().chain([0, 1]).collect::<Vec<_>>());
    h.text = append(&h.text, &texts);
    h.ref_text = append(&h.ref_text, &texts);
    h.ref_start = Int64Array::from(h.ref_start.values().iter().copied().chain([0, 31]).collect::<Vec<_>>());
    h.ref_end = Int64Array::from(h.ref_end.values().iter().copied().chain([30, 43]).collect::<Vec<_>>());
    h.vectors = extend(&h.vectors, &[0.45, 0.1]);
    let e = &mut kb.entities;
    e.id = append(&e.id, &["e3"]);
    e.doc_id = append(&e.doc_id, &["d2"]);
    e.name = append(&e.name, &["Mara Quint"]);
    e.norm_name = append(&e.norm_name, &["mara quint"]);
    e.summary = append(&e.summary, &[texts[0]]);
    e.vectors = extend(&e.vectors, &[0.2]);
    kb.by_name.get_mut("mara quint").unwrap().push(3);
    kb.entity_hyperedges.push(vec![5]);
    kb.hyperedge_entities.extend([vec![3], vec![]]);
    kb.by_title.insert("mara quint".into(), vec![5, 6]);
    kb.hyperedge_clusters.extend([vec![], vec![]]);
    kb.hyperedge_chunk.extend([None, None]);
    // A hub: the name of the authority given to many other nodes.
    let hub = kb.by_name.get_mut("velda basin authority").unwrap();
    hub.extend((0..hub_nodes as u32).map(|_| 0));
    kb
}

#[test]
fn every_mode_retrieves_its_modules() {
    let kb = tiny_kb();
    let q = ["Velda Basin Authority"];
    assert_eq!(ids(&kb, &config(Mode::Hybrid, 2, 1), &q, OPEN), ["e0", "c0", "h0", "h1", "g0"]);
    assert_eq!(ids(&kb, &config(Mode::Hypergraph, 2, 1), &q, OPEN), ["e0", "c0", "h0", "h1"]);
    assert_eq!(ids(&kb, &config(Mode::Graph, 2, 1), &q, OPEN), ["e0", "g0"]);
    assert_eq!(ids(&kb, &config(Mode::Chunks, 2, 1), &q, OPEN), ["k0", "k1"]);
    assert!(ids(&kb, &config(Mode::None, 2, 1), &q, OPEN).is_empty());
}

#[test]
fn chunks_maxsim_ranks_chunks_by_their_best_sentence() {
    let mut kb = tiny_kb();
    // The chunks' own vectors prefer chunk 1; its best sentence (h2, 0.6) is below chunk 0's (h0, 0.95).
    kb.chunks.vectors = at_cosines(&[0.2, 0.9]);
    let q = ["Velda Basin Authority"];
    assert_eq!(ids(&kb, &config(Mode::Chunks, 2, 1), &q, OPEN), ["k1", "k0"]);
    assert_eq!(ids(&kb, &config(Mode::ChunksMaxsim, 2, 1), &q, OPEN), ["k0", "k1"]);
    let c = QueryConfig { chunk_k: 1, ..config(Mode::ChunksMaxsim, 2, 1) };
    assert_eq!(ids(&kb, &c, &q, OPEN), ["k0"]);
    // A chunk without a located hyperedge competes with its own vector.
    kb.hyperedge_chunk = vec![Some(0), Some(0), None, None, None];
    kb.chunk_has_hyperedges = vec![true, false];
    kb.chunks.vectors = at_cosines(&[0.2, 0.97]);
    assert_eq!(ids(&kb, &config(Mode::ChunksMaxsim, 2, 1), &q, OPEN), ["k1", "k0"]);
}

#[test]
fn sentence_windows_widen_merge_and_stay_in_their_document() {
    let kb = with_second_document(tiny_kb(), 0);
    let window = |n_eh: usize, window_k: usize| {
        let c = QueryConfig { window_k, ..config(Mode::SentenceWindow, n_eh, 1) };
        ids(&kb, &c, &[], OPEN)
    };
    // The best hyperedge (h0) with one neighbour on each side: h0, h1; then h1's: h0–h2.
    assert_eq!(window(1, 1), ["ph0+2"]);
    assert_eq!(window(2, 1), ["ph0+2", "ph0+3"]);
    assert_eq!(window(3, 0), ["ph0+1", "ph1+1", "ph2+1"]);
    // No window crosses into the other document: h4's stops at its last row, h5's starts at h5.
    let all = window(7, 2);
    assert!(all.contains(&"ph2+3".to_owned()) && all.contains(&"ph5+2".to_owned()), "{all:?}");
    // In the context, overlapping or touching windows are one passage, each sentence once.
    let counter = TokenCounter::cl100k();
    let c = QueryConfig { window_k: 1, ..config(Mode::SentenceWindow, 2, 1) };
    let input = QueryInput { text: "", vector: &QUERY, entities: &[], entity_vectors: &[] };
    let r = retrieve(&kb, &c, OPEN, input);
    let context = Context::assemble_with(&kb, &r.rows, 0, true, &counter);
    assert_eq!(context.evidence.len(), 1);
    let e = &context.evidence[0];
    assert_eq!(
        e.text,
        "The Velda Basin Authority (VBA) runs the Harlow gauge. Mara Quint chairs the VBA. \
         The gauge measured 7.9 cubic metres per second in August."
    );
    assert_eq!(e.spans.len(), 1);
    assert_eq!(
        (e.start, e.end),
        (Some(0), Some(span_of("The gauge measured 7.9 cubic metres per second in August.").1))
    );
}

#[test]
fn widened_hyperedges_are_passages_of_their_neighbours() {
    let kb = tiny_kb();
    let c = QueryConfig { widen: 1, ..config(Mode::Hypergraph, 2, 1) };
    // The clusters and entities stay; each retrieved hyperedge comes with one neighbour a side.
    assert_eq!(ids(&kb, &c, &["Velda Basin Authority"], OPEN), ["e0", "c0", "ph0+2", "ph0+3"]);
}

#[test]
fn filling_a_cap_takes_evidence_past_the_breadths() {
    let kb = tiny_kb();
    let q = ["Velda Basin Authority"];
    let counter = TokenCounter::cl100k();
    let tokens = |c: &QueryConfig| {
        let input = QueryInput { text: "", vector: &QUERY, entities: &[q[0].to_owned()], entity_vectors: &[] };
        let r = retrieve(&kb, c, OPEN, input);
        Context::assemble(&kb, &r.rows, c.max_context_tokens, &counter).evidence.len()
    };
    let capped = QueryConfig { max_context_tokens: 10_000, chunk_k: 1, ..config(Mode::Chunks, 1, 1) };
    assert_eq!(tokens(&capped), 1);
    assert_eq!(tokens(&QueryConfig { fill: true, ..capped.clone() }), 2);
    let hybrid = QueryConfig { max_context_tokens: 10_000, ..config(Mode::Hybrid, 1, 1) };
    assert!(tokens(&QueryConfig { fill: true, ..hybrid.clone() }) > tokens(&hybrid));
    // Without a cap there is nothing to fill: the breadths hold.
    let uncapped = QueryConfig { max_context_tokens: 0, fill: true, chunk_k: 1, ..config(Mode::Chunks, 1, 1) };
    assert_eq!(uncapped.breadths().chunks, 1);
}

#[test]
fn merged_contexts_say_each_thing_once() {
    let kb = tiny_kb();
    let counter = TokenCounter::cl100k();
    let at = |unit, row, score| Retrieved { unit, row, score, len: 1, tier: 0, focus: None };
    // h0 ranks first; the cluster holding it and h1 comes next; then h2, which touches h1.
    let rows =
        [at(Unit::Hyperedge, 0, 0.95), at(Unit::Cluster, 0, 0.95), at(Unit::Hyperedge, 2, 0.6), at(Unit::Edge, 0, 0.5)];
    let plain = Context::assemble_with(&kb, &rows, 0, false, &counter);
    let merged = Context::assemble_with(&kb, &rows, 0, true, &counter);
    // Without merging h0 is given twice (alone and in the cluster).
    assert_eq!(plain.evidence.iter().filter(|e| e.text.contains("runs the Harlow gauge")).count(), 2);
    assert_eq!(merged.evidence.len(), 1, "{:?}", merged.evidence);
    let p = &merged.evidence[0];
    assert_eq!(p.unit, Unit::Passage);
    assert_eq!(
        p.text,
        "The Velda Basin Authority (VBA) runs the Harlow gauge. Mara Quint chairs the VBA. \
         The gauge measured 7.9 cubic metres per second in August."
    );
    let sentence = |s: &str| span_of(s);
    assert_eq!(
        (p.start, p.end),
        (Some(0), Some(sentence("The gauge measured 7.9 cubic metres per second in August.").1))
    );
    assert_eq!(p.spans.len(), 1);
    // The edge's source sentence is inside the passage: it adds nothing. Tokens count what is rendered.
    assert!(merged.tokens < plain.tokens);
    assert_eq!(merged.tokens, counter.count(&merged.render()));
    // A budget the merged passage does not fit in keeps what came before it.
    let small = Context::assemble_with(&kb, &rows, merged.tokens - 1, true, &counter);
    assert!(small.tokens < merged.tokens && !small.evidence.is_empty());
}

#[test]
fn toggles_reproduce_the_ablation_rows() {
    let kb = tiny_kb();
    let q = ["Mara Quint"];
    let with = |f: fn(&mut QueryConfig)| {
        // Bridges on: in this one-document kb they find nothing beyond the first hop.
        let mut c = QueryConfig { bridges: true, ..config(Mode::Hybrid, 4, 1) };
        f(&mut c);
        (super::variant(&c), ids(&kb, &c, &q, OPEN))
    };
    assert_eq!(
        with(|_| {}),
        (
            "hybrid-paper".into(),
            vec!["e1", "c0", "c1", "h0", "h1", "h2", "h3", "g0"].into_iter().map(String::from).collect::<Vec<_>>()
        )
    );
    // w/o HR: clusters are still found through the scanned hyperedges.
    assert_eq!(
        with(|c| c.hyperedges = false),
        ("hybrid-paper w/o HR".into(), ["e1", "c0", "c1", "g0"].map(String::from).to_vec())
    );
    assert_eq!(
        with(|c| c.clusters = false),
        ("hybrid-paper w/o SSC".into(), ["e1", "h0", "h1", "h2", "h3", "g0"].map(String::from).to_vec())
    );
    assert_eq!(with(|c| c.edges = false).1, ["e1", "c0", "c1", "h0", "h1", "h2", "h3"]);
    assert_eq!(with(|c| c.entities = false).1, ["c0", "c1", "h0", "h1", "h2", "h3", "g0"]);
    assert_eq!(
        with(|c| {
            c.hyperedges = false;
            c.clusters = false;
            c.edges = false;
        }),
        ("hybrid-paper w/o HR+SSC+ER".into(), vec!["e1".to_owned()])
    );
    assert_eq!(
        with(|c| {
            c.hyperedges = false;
            c.clusters = false;
            c.entities = false;
        })
        .1,
        ["g0"]
    );
    // A toggle outside its mode changes nothing, and the label says only what the mode lost.
    let mut graph = config(Mode::Graph, 4, 1);
    graph.clusters = false;
    assert_eq!(super::variant(&graph), "graph");
}

#[test]
fn bridges_reach_the_facts_of_a_neighbour_in_its_own_document() {
    let kb = with_second_document(tiny_kb(), 0);
    let mut c = config(Mode::Hybrid, 2, 0);
    c.clusters = false;
    c.bridges = true;
    c.n_b = 1;
    // The question names the authority; its hyperedges (h0, h1) name the Harlow gauge and Mara
    // Quint. The gauge's other fact (h2, 0.6) comes first; then Mara Quint's node in d2, which
    // states where she was born (h5, 0.45), beats her d1 node's other fact (h3, 0.40).
    assert_eq!(ids(&kb, &c, &["Velda Basin Authority"], OPEN), ["e0", "h2", "h0", "h1"]);
    c.n_b = 2;
    assert_eq!(ids(&kb, &c, &["Velda Basin Authority"], OPEN), ["e0", "h2", "h5", "h0", "h1"]);
    // h6 names nobody: it is reached through the document titled with the neighbour's name.
    c.n_b = 5;
    assert_eq!(ids(&kb, &c, &["Velda Basin Authority"], OPEN), ["e0", "h2", "h5", "h3", "h6", "h0", "h1"]);
    let mut untitled = with_second_document(tiny_kb(), 0);
    untitled.by_title.clear();
    assert_eq!(ids(&untitled, &c, &["Velda Basin Authority"], OPEN), ["e0", "h2", "h5", "h3", "h0", "h1"]);
    // A name the rules backend joined with "and" stands for its parts too.
    let mut joined = with_second_document(tiny_kb(), 0);
    joined.entities.norm_name =
        strings(&["velda basin authority", "mara quint and harlow", "harlow gauge", "mara quint"]);
    assert_eq!(ids(&joined, &c, &["Velda Basin Authority"], OPEN), ["e0", "h2", "h5", "h3", "h6", "h0", "h1"]);
    // τ_EH applies to bridges too; the question's own entity is no bridge; the toggle and N_B = 0
    // switch the module off.
    let at = |t: f32| Thresholds { hyperedge: t, edge: t, chunk: t };
    assert_eq!(ids(&kb, &c, &["Velda Basin Authority"], at(0.42)), ["e0", "h2", "h5", "h0", "h1"]);
    // The first hop is what the question names (Mara Quint's hyperedges and her document): it
    // leads to the authority, whose facts h0 and h1 were retrieved already.
    assert_eq!(ids(&kb, &c, &["Mara Quint"], OPEN), ["e1", "e3", "h0", "h1"]);
    // With no entity matched, the retrieved hyperedges are the first hop.
    assert_eq!(ids(&kb, &c, &["Nobody"], OPEN), ["h2", "h5", "h3", "h6", "h0", "h1"]);
    c.n_b = 0;
    assert_eq!(ids(&kb, &c, &["Velda Basin Authority"], OPEN), ["e0", "h0", "h1"]);
    c.n_b = 3;
    c.bridges = false;
    assert_eq!(ids(&kb, &c, &["Velda Basin Authority"], OPEN), ["e0", "h0", "h1"]);
    // A hub name is not followed: the Mara Quint question's first hop names the authority, but
    // with more than MAX_BRIDGE_NODES nodes it bridges to nothing.
    let hub = with_second_document(tiny_kb(), super::strategy::MAX_BRIDGE_NODES);
    c.bridges = true;
    c.n_eh = 0;
    assert_eq!(ids(&kb, &c, &["Mara Quint"], OPEN), ["e1", "e3", "h0"]);
    assert_eq!(ids(&hub, &c, &["Mara Quint"], OPEN), ["e1", "e3"]);
    assert_eq!(super::variant(&QueryConfig { bridges: false, ..QueryConfig::default() }), "hybrid w/o BR");
}

#[test]
fn thresholds_and_breadths() {
    let kb = tiny_kb();
    let mut c = config(Mode::Hypergraph, 7, 3);
    c.clusters = false;
    c.entities = false;
    let at = |t: f32| Thresholds { hyperedge: t, edge: t, chunk: t };
    // Fewer than N_EH pass τ_EH: all of those that pass, best first.
    assert_eq!(ids(&kb, &c, &[], at(0.7)), ["h0", "h1"]);
    // Strictly above τ.
    assert_eq!(ids(&kb, &c, &[], at(0.8)), ["h0"]);
    assert!(ids(&kb, &c, &[], at(0.99)).is_empty());
    c.n_eh = 1;
    assert_eq!(ids(&kb, &c, &[], at(-1.0)), ["h0"]);
    c.n_eh = 0;
    assert!(ids(&kb, &c, &[], at(-1.0)).is_empty());
    // Nothing asked for is said as such, not blamed on the threshold; nothing passing is.
    let notes = |c: &QueryConfig, t: f32| {
        let input = QueryInput { text: "", vector: &QUERY, entities: &[], entity_vectors: &[] };
        retrieve(&kb, c, at(t), input).notes
    };
    let none_asked = notes(&c, 0.5);
    assert_eq!(none_asked.len(), 1, "{none_asked:?}");
    assert!(none_asked[0].contains("query.n_eh") && !none_asked[0].contains("tau_eh"), "{none_asked:?}");
    c.n_eh = 7;
    let none_pass = notes(&c, 0.99);
    assert!(none_pass[0].contains("query.tau_eh") && !none_pass[0].contains("n_eh"), "{none_pass:?}");
    let mut g = config(Mode::Graph, 7, 3);
    g.entities = false;
    assert_eq!(ids(&kb, &g, &[], at(0.6)), ["g0"]);
    let mut k = config(Mode::Chunks, 7, 3);
    k.chunk_k = 5;
    assert_eq!(ids(&kb, &k, &[], at(0.5)), ["k0"]);
}

#[test]
fn entity_retrieval_falls_back_to_aliases() {
    let kb = tiny_kb();
    let mut c = config(Mode::Graph, 7, 3);
    c.edges = false;
    // Names match after normalisation (case, articles, punctuation).
    assert_eq!(ids(&kb, &c, &["the velda basin authority's"], OPEN), ["e0"]);
    // No name matches: the alias table.
    assert_eq!(ids(&kb, &c, &["VBA"], OPEN), ["e0"]);
    assert_eq!(ids(&kb, &c, &["Quint", "Harlow Gauge"], OPEN), ["e1", "e2"]);
    assert!(ids(&kb, &c, &["Nobody", ""], OPEN).is_empty());
    let matches = super::strategy::match_entities(&kb, &["VBA".into(), "Mara Quint".into(), "x".into()]);
    let via: Vec<&str> = matches.iter().map(|m| m.via).collect();
    assert_eq!(via, ["alias", "name", "none"]);
}

#[test]
fn hypergraphrag_expands_both_ways_and_fuses_chunks() {
    let kb = tiny_kb();
    let mut c = config(Mode::Hypergraphrag, 7, 3);
    c.hgr_k_v = 1;
    c.hgr_k_h = 1;
    c.chunk_k = 1;
    let got = ids(&kb, &c, &[], OPEN);
    // k_V = 1 entity (e0, probed with the question), k_H = 1 hyperedge (h0); h0's entities
    // (e0, e2); e0's hyperedges (h0, h1); one chunk.
    assert_eq!(got, ["e0", "e2", "h0", "h1", "k0"]);
}

#[test]
fn context_is_deduplicated_ranked_cited_and_trimmed() {
    let kb = tiny_kb();
    let counter = TokenCounter::cl100k();
    let rows = [
        Retrieved { unit: Unit::Hyperedge, row: 1, score: 0.8, len: 1, tier: 0, focus: None },
        Retrieved { unit: Unit::Cluster, row: 0, score: 0.95, len: 1, tier: 0, focus: None },
        Retrieved { unit: Unit::Hyperedge, row: 0, score: 0.95, len: 1, tier: 0, focus: None },
        Retrieved { unit: Unit::Hyperedge, row: 1, score: 0.8, len: 1, tier: 0, focus: None },
        Retrieved { unit: Unit::Edge, row: 0, score: 0.9, len: 1, tier: 0, focus: None },
    ];
    let full = Context::assemble(&kb, &rows, 0, &counter);
    let order: Vec<(&str, &str)> = full.evidence.iter().map(|e| (e.unit.name(), e.id.as_str())).collect();
    // g0 rests on h0's span and h1 lies inside c0, both given before them: left out.
    assert_eq!(order, [("hyperedge", "h0"), ("cluster", "c0")]);
    let ids = |rows: &[Retrieved]| {
        Context::assemble(&kb, rows, 0, &counter).evidence.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    };
    let at = |unit, row, score| Retrieved { unit, row, score, len: 1, tier: 0, focus: None };
    assert_eq!(ids(&[at(Unit::Cluster, 0, 0.9), at(Unit::Hyperedge, 1, 0.8), at(Unit::Edge, 1, 0.7)]), ["c0"]);
    // A cluster after one of its members still adds the others.
    assert_eq!(ids(&[at(Unit::Hyperedge, 1, 0.9), at(Unit::Cluster, 0, 0.8), at(Unit::Edge, 1, 0.7)]), ["h1", "c0"]);
    assert_eq!(full.tokens, counter.count(&full.render()));
    // A cluster cites each member's span; its covering span runs from the first to the last.
    let cluster = &full.evidence[1];
    assert_eq!(cluster.spans.len(), 2);
    assert_eq!((cluster.start, cluster.end), (Some(cluster.spans[0].start), Some(cluster.spans[1].end)));
    // Every span is the verbatim source text of the piece behind it.
    for e in &full.evidence {
        for p in &e.pieces {
            let s = p.span.as_ref().unwrap();
            let text: String = DOC.chars().skip(s.start as usize).take((s.end - s.start) as usize).collect();
            assert_eq!(text, p.text);
        }
    }
    // A budget drops the lowest-ranked evidence first.
    let budget = full.evidence[0].tokens;
    let cut = Context::assemble(&kb, &rows, budget, &counter);
    assert_eq!(cut.evidence.len(), 1);
    assert_eq!(cut.trimmed, 3);
    assert!(cut.tokens <= budget, "{} > {budget}", cut.tokens);
    // With room for part of the next piece (at least 48 tokens), it is shortened to fill the
    // budget; with less room it is dropped.
    let long = Retrieved { unit: Unit::Chunk, row: 1, score: 0.5, len: 1, tier: 0, focus: None };
    let with_chunk = [rows[2], long];
    let first = Context::assemble(&kb, &rows[2..3], 0, &counter).tokens;
    let chunk_tokens = Context::assemble(&kb, &[long], 0, &counter).tokens;
    assert!(chunk_tokens > 48, "{chunk_tokens}");
    let filled = Context::assemble(&kb, &with_chunk, first + 48, &counter);
    assert_eq!(filled.evidence.len(), 2);
    assert!(filled.evidence[1].text.len() < kb.chunks.text.value(1).len());
    assert!(filled.tokens <= first + 48 && filled.tokens + 8 >= first + 48, "{} of {}", filled.tokens, first + 48);
    assert_eq!(Context::assemble(&kb, &with_chunk, first + 47, &counter).evidence.len(), 1);
    // A first piece larger than the whole budget is cut to fit.
    let tiny = Context::assemble(&kb, &rows, 20, &counter);
    assert_eq!(tiny.evidence.len(), 1);
    assert!(tiny.tokens <= 20 && !tiny.evidence[0].text.is_empty(), "{tiny:?}");
    // The reported count is the count of the rendered context, for every context built here.
    for c in [&full, &cut, &filled, &tiny] {
        assert_eq!(c.tokens, counter.count(&c.render()), "{c:?}");
    }
}

#[test]
fn extractive_answers_quote_the_best_supported_sentence() {
    let kb = tiny_kb();
    let counter = TokenCounter::cl100k();
    let rows: Vec<Retrieved> = (0..5)
        .map(|row| Retrieved {
            unit: Unit::Hyperedge,
            row,
            score: 1.0 - row as f32 / 10.0,
            len: 1,
            tier: 0,
            focus: None,
        })
        .collect();
    let context = Context::assemble(&kb, &rows, 0, &counter);
    let check = |question: &str, expected: &str| {
        let g = generate::extractive(question, &context, false);
        assert_eq!(g.answer, expected, "{question}");
        let s = &g.citations[0];
        let quoted: String = DOC.chars().skip(s.start as usize).take((s.end - s.start) as usize).collect();
        assert_eq!(quoted, expected);
    };
    check("Who chairs the VBA?", "Mara Quint chairs the VBA.");
    check("When did Quint sign the compact?", "Quint signed the compact in 2009.");
    check("How fast was the flow at the gauge in August?", "The gauge measured 7.9 cubic metres per second in August.");
    // Chunk evidence is split into sentences with exact offsets.
    let chunk = Context::assemble(
        &kb,
        &[Retrieved { unit: Unit::Chunk, row: 1, score: 0.5, len: 1, tier: 0, focus: None }],
        0,
        &counter,
    );
    let g = generate::extractive("When did Quint sign the compact?", &chunk, false);
    assert_eq!(g.answer, "Quint signed the compact in 2009.");
    let s = &g.citations[0];
    assert_eq!(DOC.chars().skip(s.start as usize).take((s.end - s.start) as usize).collect::<String>(), g.answer);
    // Nothing retrieved: no answer.
    assert!(generate::extractive("Anything?", &Context::default(), true).answer.is_empty());
    // Evidence with no source span (derived text) is never the answer: the best sentence that
    // can be cited is, and with none, there is no answer.
    let mut uncited = context.clone();
    for e in &mut uncited.evidence {
        e.spans.clear();
        e.pieces.iter_mut().for_each(|p| p.span = None);
    }
    assert!(generate::extractive("Who chairs the VBA?", &uncited, true).answer.is_empty());
    let mut mixed = context.clone();
    let first = mixed.evidence.iter().position(|e| e.text.contains("Mara Quint chairs")).unwrap();
    mixed.evidence[first].spans.clear();
    mixed.evidence[first].pieces.iter_mut().for_each(|p| p.span = None);
    let g = generate::extractive("Who chairs the VBA?", &mixed, false);
    assert!(!g.citations.is_empty() && g.answer != "Mara Quint chairs the VBA.", "{g:?}");
    // A question of two asks gets the best sentence of each, in the order asked, each cited.
    for short in [false, true] {
        let g = generate::extractive("Who chairs the VBA, and what did the gauge measure in August?", &context, short);
        assert_eq!(
            g.answer, "Mara Quint chairs the VBA. The gauge measured 7.9 cubic metres per second in August.",
            "short: {short}"
        );
        assert_eq!(g.citations.len(), 2);
        for (s, sentence) in g.citations.iter().zip(["Mara Quint chairs the VBA.", "The gauge measured"]) {
            let quoted: String = DOC.chars().skip(s.start as usize).take((s.end - s.start) as usize).collect();
            assert!(quoted.starts_with(sentence), "{quoted}");
        }
    }
    // An `and` that no question word follows, or a second ask without words of its own, is one
    // ask: one answer, as before.
    assert_eq!(generate::extractive("Who chairs the VBA and the gauge?", &context, true).answer, "Mara Quint");
    let one = generate::extractive("When was the compact signed, and by whom?", &context, true);
    assert_eq!((one.answer.as_str(), one.citations.len()), ("Quint signed the compact in 2009.", 1));
}

#[test]
fn rules_query_entities_split_joined_names_and_skip_openers() {
    let q = super::rules_query_entities("Who was born first out of Aivar Kuusmaa and Andy Summers?");
    assert_eq!(q, ["Aivar Kuusmaa and Andy Summers", "Aivar Kuusmaa", "Andy Summers"]);
    let q = super::rules_query_entities(
        "According to the minutes, what did Kestrel Optics offer the Larkspur Observatory?",
    );
    assert_eq!(q, ["Kestrel Optics", "Larkspur Observatory"]);
    assert!(super::rules_query_entities("what is this?").is_empty());
}
