//! The R*-tree I_l over the paths of one length (seed 002), with MBR pruning and a heap-based
//! best-first traversal.
//!
//! Each path is a point of reduced coordinates, four per node in path order: two of a fixed
//! random projection of the node's label embedding o₀(v), and two monotone reductions of its
//! dominant embedding o(v) (the sum of its hashed positions, and its neighbour count). Being sums
//! of non-negative parts, the reductions keep dominance: o(q) ⪯ o(v) implies r(o(q)) ⪯ r(o(v)),
//! so pruning on them never drops a true match. A query path becomes a box: at a labelled
//! position its projection (a point), at an unknown one everything; at every position the
//! dominance region [r(o(q)), ∞). A tree node is visited only when its MBR intersects that box
//! (the semantic and the structural constraint at once), nodes nearest the query's structure
//! first; at the leaves the full vectors decide: the same labelled nodes (o₀ equal) and o(q) ⪯
//! o(p) at every position.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rstar::primitives::GeomWithData;
use rstar::{AABB, Envelope, ParentNode, Point, RTree, RTreeNode, RTreeObject};

use crate::core::heap::HeapSize;

/// Reduced coordinates per path node.
pub const PER_NODE: usize = 4;

/// A point of `N` reduced coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coords<const N: usize>(pub [f32; N]);

impl<const N: usize> Point for Coords<N> {
    type Scalar = f32;
    const DIMENSIONS: usize = N;

    fn generate(mut generator: impl FnMut(usize) -> f32) -> Self {
        Coords(std::array::from_fn(&mut generator))
    }

    fn nth(&self, index: usize) -> f32 {
        self.0[index]
    }

    fn nth_mut(&mut self, index: usize) -> &mut f32 {
        &mut self.0[index]
    }
}

type Entry<const N: usize> = GeomWithData<Coords<N>, u32>;

/// A query box: per coordinate its lower and upper bound.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryBox {
    /// Lower bounds.
    pub lower: Vec<f32>,
    /// Upper bounds.
    pub upper: Vec<f32>,
}

/// What a traversal did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Visit {
    /// Tree nodes whose MBR intersected the box (and so were opened).
    pub opened: usize,
    /// Tree nodes pruned by their MBR.
    pub pruned: usize,
    /// Leaf entries tested against the full vectors.
    pub tested: usize,
}

/// The tree of one path length.
pub enum PathTree {
    /// Paths of one edge (two nodes).
    One(RTree<Entry<8>>),
    /// Two edges.
    Two(RTree<Entry<12>>),
    /// Three edges.
    Three(RTree<Entry<16>>),
}

impl std::fmt::Debug for PathTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathTree").field("paths", &self.len()).field("depth", &self.depth()).finish()
    }
}

fn bulk<const N: usize>(points: &[f32], ids: &[u32]) -> RTree<Entry<N>> {
    let entries = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| GeomWithData::new(Coords(std::array::from_fn(|d| points[i * N + d])), id));
    RTree::bulk_load(entries.collect())
}

/// Its nodes (each node's children counted by length).
impl HeapSize for PathTree {
    fn heap_size(&self) -> usize {
        match self {
            PathTree::One(t) => node_bytes(t.root()),
            PathTree::Two(t) => node_bytes(t.root()),
            PathTree::Three(t) => node_bytes(t.root()),
        }
    }
}

impl PathTree {
    /// A tree of paths of `length` edges from their reduced points (`PER_NODE · (length + 1)`
    /// floats each, row-major) and their ids (positions in the caller's path list).
    pub fn build(length: usize, points: &[f32], ids: &[u32]) -> PathTree {
        match length {
            1 => PathTree::One(bulk(points, ids)),
            2 => PathTree::Two(bulk(points, ids)),
            _ => PathTree::Three(bulk(points, ids)),
        }
    }

    /// Paths in the tree.
    pub fn len(&self) -> usize {
        match self {
            PathTree::One(t) => t.size(),
            PathTree::Two(t) => t.size(),
            PathTree::Three(t) => t.size(),
        }
    }

    /// Whether the tree holds no path.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Levels from the root to the leaves (1: the root holds the entries).
    pub fn depth(&self) -> usize {
        match self {
            PathTree::One(t) => depth(t.root()),
            PathTree::Two(t) => depth(t.root()),
            PathTree::Three(t) => depth(t.root()),
        }
    }

    /// Best-first traversal: the ids of the entries inside `query` for which `accept` holds, in
    /// the order found, at most `limit`.
    pub fn search(&self, query: &QueryBox, limit: usize, accept: impl FnMut(u32) -> bool) -> (Vec<u32>, Visit) {
        match self {
            PathTree::One(t) => best_first(t, query, limit, accept),
            PathTree::Two(t) => best_first(t, query, limit, accept),
            PathTree::Three(t) => best_first(t, query, limit, accept),
        }
    }
}

fn node_bytes<T: RTreeObject>(node: &ParentNode<T>) -> usize {
    let own = size_of_val(node.children());
    own + node
        .children()
        .iter()
        .map(|child| match child {
            RTreeNode::Parent(child) => node_bytes(child),
            RTreeNode::Leaf(_) => 0,
        })
        .sum::<usize>()
}

fn depth<T: RTreeObject>(node: &ParentNode<T>) -> usize {
    match node.children().first() {
        Some(RTreeNode::Parent(child)) => 1 + depth(child),
        _ => 1,
    }
}

/// A tree node waiting in the heap, by its priority (lower first).
struct Waiting<'a, T: RTreeObject> {
    priority: f32,
    node: &'a ParentNode<T>,
}

impl<T: RTreeObject> PartialEq for Waiting<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.priority == other.priority
    }
}
impl<T: RTreeObject> Eq for Waiting<'_, T> {}
impl<T: RTreeObject> PartialOrd for Waiting<'_, T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: RTreeObject> Ord for Waiting<'_, T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap pops the greatest: the lowest priority is the greatest.
        other.priority.total_cmp(&self.priority)
    }
}

fn best_first<const N: usize>(
    tree: &RTree<Entry<N>>,
    query: &QueryBox,
    limit: usize,
    mut accept: impl FnMut(u32) -> bool,
) -> (Vec<u32>, Visit) {
    let lower = Coords::<N>(std::array::from_fn(|d| query.lower[d]));
    let upper = Coords::<N>(std::array::from_fn(|d| query.upper[d]));
    let region = AABB::from_corners(lower, upper);
    // How far a box's lower corner lies above the query's structural bounds: nodes whose paths
    // are as specific as the query (low degrees) come first.
    let slack = |envelope: &AABB<Coords<N>>| -> f32 {
        (0..N).filter(|d| d % PER_NODE >= 2).map(|d| (envelope.lower().0[d] - query.lower[d]).max(0.0)).sum()
    };
    let mut visit = Visit::default();
    let mut found = Vec::new();
    let mut heap = BinaryHeap::new();
    heap.push(Waiting { priority: 0.0, node: tree.root() });
    while let Some(Waiting { node, .. }) = heap.pop() {
        visit.opened += 1;
        for child in node.children() {
            match child {
                RTreeNode::Parent(parent) => {
                    let envelope = parent.envelope();
                    if envelope.intersects(&region) {
                        heap.push(Waiting { priority: slack(&envelope), node: parent });
                    } else {
                        visit.pruned += 1;
                    }
                }
                RTreeNode::Leaf(entry) => {
                    if entry.envelope().intersects(&region) {
                        visit.tested += 1;
                        if accept(entry.data) {
                            found.push(entry.data);
                            if found.len() >= limit {
                                return (found, visit);
                            }
                        }
                    }
                }
            }
        }
    }
    (found, visit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_box_finds_exactly_the_points_inside_it_and_prunes_the_rest() {
        // 1,000 one-edge paths on a grid; the box asks for a labelled first node (coordinates
        // 0..2 fixed) and structure at least 3 at the last position's count.
        let mut points = Vec::new();
        let ids: Vec<u32> = (0..1000).collect();
        for i in 0..1000u32 {
            let (a, b) = ((i % 10) as f32, (i / 10 % 10) as f32);
            points.extend([a, b, 1.0, 1.0, 0.0, 0.0, 1.0, (i / 100) as f32]);
        }
        let tree = PathTree::build(1, &points, &ids);
        assert_eq!(tree.len(), 1000);
        assert!(tree.depth() >= 2);
        let (m, x) = (f32::MIN, f32::MAX);
        let query =
            QueryBox { lower: vec![3.0, 4.0, 0.0, 0.0, m, m, 0.0, 3.0], upper: vec![3.0, 4.0, x, x, x, x, x, x] };
        let (mut found, visit) = tree.search(&query, usize::MAX, |_| true);
        found.sort_unstable();
        let expected: Vec<u32> = (3..10).map(|h| h * 100 + 43).collect();
        assert_eq!(found, expected);
        assert!(visit.pruned > 0, "{visit:?}");
        assert!(visit.tested < 1000 / 4, "MBRs pruned most leaves: {visit:?}");
        // The leaf test decides, and the limit stops the traversal.
        let (odd, _) = tree.search(&query, usize::MAX, |id| id % 2 == 1);
        assert_eq!(odd.len(), 7);
        let (one, _) = tree.search(&query, 1, |_| true);
        assert_eq!(one.len(), 1);
        assert!(expected.contains(&one[0]));
    }
}
