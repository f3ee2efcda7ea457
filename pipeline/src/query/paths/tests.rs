//! δ: subgraph assembly from candidate paths.

use super::*;

fn candidates(paths: &[&[u32]]) -> Vec<Candidate> {
    paths.iter().map(|p| Candidate { nodes: p.to_vec(), score: 0.0 }).collect()
}

#[test]
fn assembly_joins_paths_on_shared_query_nodes_and_never_maps_two_query_nodes_to_one_kb_node() {
    // Query graph: X(0) — ?1 — ?2 and X(0) — ?3, as two query paths [0, 1, 2] and [0, 3].
    let paths = vec![vec![0, 1, 2], vec![0, 3]];
    let mapped = vec![Some(10), None, None, None];
    let per_path = vec![candidates(&[&[10, 11, 12], &[10, 13, 14]]), candidates(&[&[10, 11], &[10, 15]])];
    let found = assemble(4, &paths, &per_path, &mapped);
    // [10, 11, 12] + [10, 11] would map ?3 to 11, which ?1 already is: refused.
    assert_eq!(found, vec![vec![10, 11, 12, 15], vec![10, 13, 14, 11], vec![10, 13, 14, 15]]);
    // A candidate that contradicts a known node is refused too.
    let per_path = vec![candidates(&[&[99, 11, 12]]), candidates(&[&[10, 15]])];
    assert!(assemble(4, &paths, &per_path, &mapped).is_empty());
    // A query path without candidates: no subgraph.
    assert!(assemble(4, &paths, &[candidates(&[&[10, 11, 12]]), Vec::new()], &mapped).is_empty());
}
