//! The modules of FlexStructRAG's modes (hybrid, hypergraph, graph) and the two ways they make a
//! context: the paper's (§3.2), each module's units as they are, and ours, the modules' rankings
//! fused.
//!
//! - entity retrieval: query entities → normalised name match → alias table when no name matches;
//! - hyperedge retrieval: cosine > τ_EH, the top N_EH (all that pass when fewer do);
//! - edge retrieval: cosine > τ_E, the top N_E;
//! - cluster retrieval: every cluster with at least one retrieved hyperedge;
//! - bridge retrieval (ours): the facts one hop past what the question names;
//! - lexical retrieval (ours, fused only): hyperedges by BM25.

use std::collections::HashMap;

use super::{
    Ask, Modules, QueryInput, Retrieval, Retrieved, Scan, ScanPlan, Scanned, Strategy, hits, matched_rows, sorted,
    tiered, widen,
};
use crate::core::units::Unit;
use crate::query::config::{QueryConfig, Thresholds, WindowIn};
use crate::query::kb::Kb;
use crate::query::scan::Hit;
use crate::rules::question::{Hop, hop_phrases};

/// What the modules of `config`'s strategy scan: hyperedges for hyperedge, cluster and bridge
/// retrieval (clusters and bridges are found through the retrieved hyperedges), edges for edge
/// retrieval, each above its threshold.
fn plan(config: &QueryConfig, thresholds: Thresholds) -> ScanPlan {
    let modules = Modules::active(config);
    let b = config.breadths();
    ScanPlan {
        hyperedges: (modules.hyperedges || modules.clusters || modules.bridges)
            .then_some(Scan { threshold: thresholds.hyperedge, k: b.hyperedges }),
        edges: modules.edges.then_some(Scan { threshold: thresholds.edge, k: b.edges }),
        ..ScanPlan::default()
    }
}

/// One of FlexStructRAG's modes: the modules it runs, and whether its context may be fused.
#[derive(Debug)]
pub(super) struct ModuleMode {
    /// Its modules before the toggles.
    pub(super) modules: Modules,
    /// Whether `query.assembly = "fused"` fuses it (else it is always assembled as the paper).
    pub(super) fusable: bool,
}

impl Strategy for ModuleMode {
    fn modules(&self) -> Modules {
        self.modules
    }

    fn fusable(&self) -> bool {
        self.fusable
    }

    fn plan(&self, config: &QueryConfig, thresholds: Thresholds) -> ScanPlan {
        plan(config, thresholds)
    }

    /// One question's retrieval by the modules, assembled as configured.
    fn retrieve(&self, ask: Ask<'_>, scanned: Scanned) -> Retrieval {
        let Ask { kb, config, thresholds, query } = ask;
        if config.fuses() { fused(kb, config, query, scanned) } else { paper(kb, config, thresholds, query, scanned) }
    }
}

/// The paper's assembly: each module's units as they are (entity summaries, whole clusters,
/// hyperedges, edges), each module cut at its own breadth.
fn paper(kb: &Kb, config: &QueryConfig, thresholds: Thresholds, query: QueryInput<'_>, scanned: Scanned) -> Retrieval {
    let modules = Modules::of(config);
    let mut out = Retrieval::default();
    // The matched entity rows, for entity retrieval and as the first hop of bridge retrieval.
    let mut matched: Vec<u32> = Vec::new();
    if modules.entities {
        (out.entity_matches, matched) = matched_rows(kb, query.entities);
        let scored = kb.entities.vectors.scores(query.vector, &matched);
        out.rows.extend(hits(Unit::Entity, sorted(scored)));
    }
    // The hyperedges the breadth N_EH retrieves; those beyond it only fill a cap (tier 1).
    let first = &scanned.hyperedges[..config.n_eh.min(scanned.hyperedges.len())];
    if modules.clusters {
        // A cluster's score is its best retrieved member, its tier that of its best member.
        let mut best: HashMap<u32, (u8, f32)> = HashMap::new();
        for (i, h) in scanned.hyperedges.iter().enumerate() {
            let tier = u8::from(i >= first.len());
            for &c in &kb.hyperedge_clusters[h.row] {
                best.entry(c).or_insert((tier, h.score));
            }
        }
        let mut clusters: Vec<Retrieved> = best
            .into_iter()
            .map(|(row, (tier, score))| Retrieved { unit: Unit::Cluster, row, score, len: 1, tier, focus: None })
            .collect();
        clusters.sort_by(|a, b| a.tier.cmp(&b.tier).then(b.score.total_cmp(&a.score)).then(a.row.cmp(&b.row)));
        out.rows.extend(clusters);
    }
    if modules.bridges {
        // Bridges start from (and skip) what the breadths retrieve, so that filling a cap adds
        // bridges after the usual ones instead of replacing them.
        let found = bridges(kb, query.vector, &matched, first, thresholds.hyperedge, config.breadths().bridges);
        out.rows.extend(tiered(Unit::Hyperedge, found, config.n_b));
    }
    if modules.hyperedges {
        let retrieved = tiered(Unit::Hyperedge, scanned.hyperedges, config.n_eh);
        match config.widen {
            0 => out.rows.extend(retrieved),
            k => out.rows.extend(retrieved.map(|r| widen(kb, r, k))),
        }
    }
    if modules.edges {
        out.rows.extend(tiered(Unit::Edge, scanned.edges, config.n_e));
    }
    out
}

/// The fused assembly (ours): every module ranks hyperedges — entity retrieval the hyperedges
/// of the matched entities and of the documents titled with their names (by cosine), bridge
/// retrieval its bridges (by cosine plus their link, [`bridge_candidates`]), hyperedge retrieval
/// by cosine, lexical retrieval by BM25, edge retrieval the hyperedges behind its edges — and
/// the rankings are fused by weighted reciprocal rank (`query.weights`, `query.rrf_k`; the
/// entity and bridge weights times `query.hop_boost` when the question follows a relation).
/// Each hyperedge, in fused order, comes with its `query.window_k` neighbours on each side, in
/// its document or (`query.window_in = "cluster"`, with cluster retrieval) in its SSC cluster;
/// the context merges what overlaps. Each module ranks a pool of [`crate::query::config::FILL_POOL`]
/// candidates (every rank counts in the fusion); those within some module's breadth (N_EH for
/// cosine, BM25 and entities, N_B, N_E) are what the strategy retrieves (tier 0), and a strategy
/// that fills a cap takes the others after them (tier 1).
fn fused(kb: &Kb, config: &QueryConfig, query: QueryInput<'_>, scanned: Scanned) -> Retrieval {
    let modules = Modules::fused(config);
    let pool = config.breadths();
    let w = config.weights;
    let boost = if follows_relation(query.text) { config.hop_boost } else { 1.0 };
    let mut out = Retrieval::default();
    // Each module's ranking, with its weight and the breadth within which it is tier 0.
    let mut rankings: Vec<(Vec<usize>, f32, usize)> = Vec::new();
    let mut named = Named::default();
    if modules.entities {
        let matched;
        (out.entity_matches, matched) = matched_rows(kb, query.entities);
        named = Named::of(kb, &matched);
        let mut ranked = sorted(kb.hyperedges.vectors.scores(query.vector, &named.hyperedges));
        ranked.truncate(pool.hyperedges);
        rankings.push((ranked.into_iter().map(|h| h.row).collect(), w.entities * boost, config.n_eh));
    }
    if modules.bridges {
        let first = &scanned.hyperedges[..config.n_eh.min(scanned.hyperedges.len())];
        let candidates = bridge_candidates(kb, query.vector, &named, first);
        let rows: Vec<u32> = candidates.iter().map(|c| c.0).collect();
        let cosines = kb.hyperedges.vectors.scores(query.vector, &rows);
        let scored = cosines.into_iter().zip(&candidates).map(|(h, c)| Hit { score: h.score + c.1, ..h }).collect();
        let found = flexstruct_scan::keep_best(scored, pool.bridges);
        rankings.push((found.into_iter().map(|h| h.row).collect(), w.bridges * boost, config.n_b));
    }
    if modules.hyperedges {
        rankings.push((scanned.hyperedges.iter().map(|h| h.row).collect(), w.hyperedges, config.n_eh));
    }
    if modules.lexical {
        let found = kb.lexical.search(query.text, pool.hyperedges);
        rankings.push((found.into_iter().map(|h| h.row).collect(), w.lexical, config.n_eh));
    }
    if modules.edges {
        let mut rows: Vec<usize> = Vec::new();
        for g in &scanned.edges {
            if let Some(h) = kb.edges.hyperedge[g.row].map(|h| h as usize).filter(|h| !rows.contains(h)) {
                rows.push(h);
            }
        }
        rankings.push((rows, w.edges, config.n_e));
    }
    // Weighted reciprocal-rank fusion over every module's whole pool; a hyperedge is tier 0 when
    // some module ranks it within its breadth. Without filling, only tier 0 is taken.
    let mut fused: HashMap<usize, (u8, f32)> = HashMap::new();
    for (ranking, weight, breadth) in &rankings {
        for (rank, &h) in ranking.iter().enumerate() {
            let entry = fused.entry(h).or_insert((1, 0.0));
            entry.0 = entry.0.min(u8::from(rank >= *breadth));
            entry.1 += weight / (config.rrf_k + rank as f32 + 1.0);
        }
    }
    let fills = config.fills();
    let mut seeds: Vec<(usize, (u8, f32))> = fused.into_iter().filter(|s| fills || s.1.0 == 0).collect();
    seeds.sort_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.total_cmp(&a.1.1)).then(a.0.cmp(&b.0)));
    let k = config.window_k;
    out.rows = seeds
        .into_iter()
        .map(|(h, (tier, score))| {
            let seed = Retrieved { unit: Unit::Hyperedge, row: h as u32, score, len: 1, tier, focus: None };
            let cluster =
                kb.hyperedge_clusters[h].first().filter(|_| modules.clusters && config.window_in == WindowIn::Cluster);
            match cluster {
                Some(&c) => Retrieved { unit: Unit::Cluster, row: c, len: k as u32, focus: Some(h as u32), ..seed },
                None if k > 0 => widen(kb, seed, k),
                None => seed,
            }
        })
        .collect();
    out
}

/// Whether a question follows a relation from the entity it names to the one it asks about
/// (`the place of birth of the director of film X`, `X's paternal grandmother`). A child alone
/// does not count: `son` and `daughter` are common words of questions about stories, and the
/// boost cost the novels' tune half half a point of answer-token recall with them, while on
/// 2wiki it changed nothing.
fn follows_relation(question: &str) -> bool {
    hop_phrases(question).iter().any(|(_, hops)| hops.iter().any(|h| *h != Hop::Child))
}

/// Names shared by more entity nodes than this are hubs (a country, a common word), not
/// bridges: following them would pull in facts from everywhere.
pub const MAX_BRIDGE_NODES: usize = 64;

/// Bridge retrieval (BR; ours, beyond the paper's four modules). A multi-hop question names one
/// end of a chain ("the birthplace of the performer of *Changed It*"): the first hop names the
/// entity in the middle (the performer), and the answer is a fact about that entity, stated in
/// its own document, that the question's wording alone rarely ranks high.
///
/// The first hop is what the question names: the hyperedges of its matched entities and of the
/// documents titled with their names (or, when no entity matched, the retrieved hyperedges).
/// The entities those hyperedges name are the neighbours; each offers the hyperedges of its
/// nodes (the same name in every document) and of the documents titled with its name. Those not
/// in the first hop (nor retrieved already) are scored by cosine with the question, and the `n`
/// best above `threshold` are retrieved. Numbers and dates are not followed, nor hub names
/// (more than [`MAX_BRIDGE_NODES`] nodes).
fn bridges(kb: &Kb, query: &[f32], matched: &[u32], found: &[Hit], threshold: f32, n: usize) -> Vec<Hit> {
    let named = Named::of(kb, matched);
    let candidates: Vec<u32> = bridge_candidates(kb, query, &named, found).into_iter().map(|(h, _)| h).collect();
    let scored = kb.hyperedges.vectors.scores(query, &candidates);
    flexstruct_scan::keep_best(scored.into_iter().filter(|h| h.score > threshold).collect(), n)
}

/// The hyperedge rows of the documents titled `name` (normalised).
fn titled<'a>(kb: &'a Kb, name: &str) -> impl Iterator<Item = u32> + 'a {
    kb.by_title.get(name).into_iter().flatten().copied()
}

/// Pushes `h` onto `rows` unless `seen` marks it, and marks it.
fn mark(seen: &mut [bool], rows: &mut Vec<u32>, h: u32) {
    if !std::mem::replace(&mut seen[h as usize], true) {
        rows.push(h);
    }
}

/// What a question names: the normalised names of its matched entities (sorted, once each), and
/// the hyperedges of those entities and of the documents titled with their names, each once.
#[derive(Debug, Default)]
struct Named<'a> {
    names: Vec<&'a str>,
    hyperedges: Vec<u32>,
}

impl<'a> Named<'a> {
    fn of(kb: &'a Kb, matched: &[u32]) -> Named<'a> {
        let mut names: Vec<&str> = matched.iter().map(|&e| kb.entities.norm_name.value(e as usize)).collect();
        names.sort_unstable();
        names.dedup();
        let mut seen = vec![false; kb.hyperedge_entities.len()];
        let mut hyperedges = Vec::new();
        let titled = names.iter().flat_map(|name| titled(kb, name));
        for h in matched.iter().flat_map(|&e| kb.entity_hyperedges[e as usize].iter().copied()).chain(titled) {
            mark(&mut seen, &mut hyperedges, h);
        }
        Named { names, hyperedges }
    }
}

/// What a bridge candidate in the document titled with its neighbour's name (the neighbour's
/// own article) adds to its link (set on the 2wiki tune half).
const OWN_ARTICLE_LINK: f32 = 0.2;

/// The bridge candidates of [`bridges`], each with its link: the best cosine with the question
/// of a first-hop hyperedge that names the neighbour it was reached through (how relevant the
/// fact is that leads to it: `… directed by Clarence Brown` for the director of the film asked
/// about, before `… released by Universal Pictures`), plus [`OWN_ARTICLE_LINK`] in the
/// neighbour's own article.
fn bridge_candidates(kb: &Kb, query: &[f32], named: &Named<'_>, found: &[Hit]) -> Vec<(u32, f32)> {
    // Sets as marks over the rows, not tree or hash sets: this runs per question, its lists
    // run to thousands of hyperedges on long documents, and the dev profile leaves this crate
    // unoptimised (sorting 3,000 ids there took 1.3 ms).
    let names = &kb.entities.norm_name;
    let own = &named.names;
    let mut seen = vec![false; kb.hyperedge_entities.len()];
    let mut first_hop = named.hyperedges.clone();
    for &h in &first_hop {
        seen[h as usize] = true;
    }
    if own.is_empty() {
        for h in found {
            mark(&mut seen, &mut first_hop, h.row as u32);
        }
    }
    // Retrieved already: not candidates either.
    for h in found {
        seen[h.row] = true;
    }
    // Each neighbour with its link: the best first-hop hyperedge naming it.
    let mut links: HashMap<&str, f32> = HashMap::new();
    for hop in kb.hyperedges.vectors.scores(query, &first_hop) {
        for &e in &kb.hyperedge_entities[hop.row] {
            let name = names.value(e as usize);
            // A name joined with `and` ("nicki minaj and american") also stands for its parts.
            let parts = name.contains(" and ").then(|| name.split(" and ")).into_iter().flatten();
            for name in std::iter::once(name).chain(parts) {
                if own.binary_search(&name).is_err() && name.chars().any(char::is_alphabetic) {
                    let link = links.entry(name).or_insert(f32::MIN);
                    *link = link.max(hop.score);
                }
            }
        }
    }
    let mut neighbours: Vec<(&str, f32)> = links.into_iter().collect();
    neighbours.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut candidates = Vec::new();
    let mut link_of: HashMap<u32, f32> = HashMap::new();
    for (name, link) in neighbours {
        let nodes = kb.by_name.get(name).filter(|nodes| nodes.len() <= MAX_BRIDGE_NODES).into_iter().flatten();
        let nodes = nodes.flat_map(|&e| kb.entity_hyperedges[e as usize].iter().map(move |&h| (h, link)));
        for (h, link) in nodes.chain(titled(kb, name).map(|h| (h, link + OWN_ARTICLE_LINK))) {
            mark(&mut seen, &mut candidates, h);
            let best = link_of.entry(h).or_insert(f32::MIN);
            *best = best.max(link);
        }
    }
    candidates.into_iter().map(|h| (h, link_of[&h])).collect()
}
