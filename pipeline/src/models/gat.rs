//! Training SG-RAG's GAT dominant embeddings (seed 002) over candle: the star encoder of
//! [`GatEncoder`] with candle's autograd and AdamW, on star pairs drawn from the graph itself.
//!
//! A training pair is a star g of the graph (a node and up to [`MAX_STAR`] of its neighbours)
//! and a star s: **positive** when s is a sub-star of g (a subset of g's neighbours, some of them
//! made unknown, the centre kept or made unknown — the stars a query graph has), **negative**
//! when it is not (the same with one neighbour g does not have, or more neighbours than g has).
//! The loss is the dominance loss: with E(s, g) = Σ_d max(0, o(s)_d − o(g)_d)², positives cost
//! E and negatives max(0, margin − E) — violations of dominance where it should hold, and
//! dominance where it should not, which is what makes the filter prune. The seed gives the
//! loss's purpose, not its constants: the margin, the pair mix and the sizes are ours.
//!
//! Training runs in candle; the trained parameters become a [`GatEncoder`], whose plain-Rust
//! forward pass is what the index and the queries use (the same arithmetic on both sides).

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::Optimizer;
use serde::{Deserialize, Serialize};

use crate::core::dominance::{ATTENTION_SLOPE, GatEncoder, SketchShape};
use crate::core::{Error, Result};

/// Most neighbours of a training star (larger stars are sampled down: a sample is a sub-star
/// too, so every pair stays true).
pub const MAX_STAR: usize = 16;

/// What a positive pair's embeddings should keep between them in every dimension: the filter
/// tests dominance exactly, so a positive that training leaves at a violation of 10⁻⁶ still
/// fails; asking for a little room makes exact dominance hold on more of the unseen pairs.
const SLACK: f32 = 0.05;

/// How the encoder is trained (the `[paths.gat]` section).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GatTraining {
    /// Width of the hidden features.
    pub hidden: usize,
    /// Width of the encoding.
    pub dims: usize,
    /// Optimiser steps.
    pub steps: usize,
    /// Star pairs per step (half positive, half negative).
    pub batch: usize,
    /// The negatives' margin.
    pub margin: f32,
    /// AdamW's learning rate.
    pub learning_rate: f64,
    /// Seed of the initial weights and the pairs.
    pub seed: u64,
}

impl GatTraining {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        for (key, value) in [("hidden", self.hidden), ("dims", self.dims), ("steps", self.steps), ("batch", self.batch)]
        {
            if value == 0 {
                return Err(Error::config(format!("paths.gat.{key}"), "must be at least 1"));
            }
        }
        if self.dims < 2 {
            return Err(Error::config("paths.gat.dims", "must be at least 2 (the R*-tree reduces it to two halves)"));
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(f64::from(self.margin)) || !positive(self.learning_rate) {
            return Err(Error::config("paths.gat", "margin and learning_rate must be positive"));
        }
        Ok(())
    }
}

impl Default for GatTraining {
    fn default() -> Self {
        GatTraining { hidden: 64, dims: 64, steps: 1000, batch: 256, margin: 1.0, learning_rate: 0.01, seed: 17 }
    }
}

/// What a training run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrainStats {
    /// Seconds spent training.
    pub seconds: f64,
    /// Steps taken.
    pub steps: usize,
    /// Loss of the first and the last step.
    pub first_loss: f32,
    /// Loss of the last step.
    pub last_loss: f32,
}

/// One star: its centre (`None`: unknown), its known neighbours, and a count of unknown ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Star {
    /// The centre's node, or unknown.
    pub centre: Option<u32>,
    /// Neighbours by node.
    pub known: Vec<u32>,
    /// Neighbours of any name.
    pub unknown: usize,
}

/// A sub-star of `g` drawn at random: each neighbour kept with probability ½, a kept one made
/// unknown with probability ⅖, the centre made unknown with probability ½.
pub fn sub_star(g: &Star, rng: &mut fastrand::Rng) -> Star {
    let mut s = Star { centre: if rng.bool() { g.centre } else { None }, known: Vec::new(), unknown: 0 };
    for &u in &g.known {
        if rng.bool() {
            if rng.f32() < 0.4 {
                s.unknown += 1;
            } else {
                s.known.push(u);
            }
        }
    }
    s
}

/// A star of node `v` in the graph (`neighbours` by node), sampled down to [`MAX_STAR`].
fn star_of(v: usize, neighbours: &[Vec<u32>], rng: &mut fastrand::Rng) -> Star {
    let mut known = neighbours[v].clone();
    if known.len() > MAX_STAR {
        rng.shuffle(&mut known);
        known.truncate(MAX_STAR);
    }
    Star { centre: Some(v as u32), known, unknown: 0 }
}

/// A star that is not a sub-star of `g`: a sub-star of it with one neighbour `g` lacks, or
/// with more neighbours than `g` has.
fn not_sub_star(g: &Star, nodes: usize, rng: &mut fastrand::Rng) -> Star {
    let mut s = sub_star(g, rng);
    if nodes > g.known.len() + 1 && rng.f32() < 0.75 {
        loop {
            let w = rng.u32(0..nodes as u32);
            if Some(w) != g.centre && !g.known.contains(&w) {
                s.known.push(w);
                return s;
            }
        }
    }
    s.unknown += g.known.len() + g.unknown + 1 - s.known.len() - s.unknown;
    s
}

/// A batch of stars as dense inputs: centres (B × F), neighbours ((B·K) × F) and a mask (B × K),
/// every node as the sketch of its name alone.
fn inputs(
    stars: &[Star],
    names: &[String],
    features: SketchShape,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let (b, f) = (stars.len(), features.len());
    let k = stars.iter().map(|s| s.known.len() + s.unknown).max().unwrap_or(0).max(1);
    let mut centres = vec![0.0f32; b * f];
    let mut members = vec![0.0f32; b * k * f];
    let mut mask = vec![0.0f32; b * k];
    let put = |row: &mut [f32], node: Option<u32>| {
        row[features.dims] = 1.0;
        if let Some(v) = node {
            for p in features.positions(&names[v as usize]) {
                row[p] = 1.0;
            }
        }
    };
    for (i, s) in stars.iter().enumerate() {
        put(&mut centres[i * f..(i + 1) * f], s.centre);
        let all = s.known.iter().map(|&u| Some(u)).chain(std::iter::repeat_n(None, s.unknown));
        for (j, node) in all.enumerate() {
            put(&mut members[(i * k + j) * f..(i * k + j + 1) * f], node);
            mask[i * k + j] = 1.0;
        }
    }
    Ok((
        Tensor::from_vec(centres, (b, f), device)?,
        Tensor::from_vec(members, (b * k, f), device)?,
        Tensor::from_vec(mask, (b, k), device)?,
    ))
}

/// [`GatEncoder::encode`] of a batch, in candle (the graph autograd differentiates): `params`
/// are w, a_centre, a_neighbour, w_out and b_out (1 × dims).
fn forward(params: [&Tensor; 5], centres: &Tensor, members: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let [w, a_centre, a_neighbour, w_out, b_out] = params;
    let (b, k) = mask.dims2()?;
    let h = w.dim(1)?;
    let z = members.matmul(w)?; // (B·K) × H
    let centre_score = centres.matmul(w)?.matmul(a_centre)?; // B × 1
    let scores = z.matmul(a_neighbour)?.reshape((b, k))?.broadcast_add(&centre_score)?;
    let slope = f64::from(ATTENTION_SLOPE);
    let gates = (candle_nn::ops::sigmoid(&candle_nn::ops::leaky_relu(&scores, slope)?)? * mask)?;
    let pooled = z.relu()?.reshape((b, k, h))?.broadcast_mul(&gates.unsqueeze(2)?)?.sum(1)?; // B × H
    pooled.matmul(w_out)?.broadcast_add(b_out)?.relu()
}

/// Trains the encoder on the graph: `names` are the nodes' normalised names, `neighbours` each
/// node's neighbours, `features` the input sketch of a name.
pub fn train(
    names: &[String],
    neighbours: &[Vec<u32>],
    features: SketchShape,
    config: &GatTraining,
) -> Result<(GatEncoder, TrainStats)> {
    let started = std::time::Instant::now();
    let err = |what: &'static str| {
        move |e: candle_core::Error| Error::Model { model: "gat".into(), what: what.into(), source: Box::new(e) }
    };
    let with_edges: Vec<usize> = (0..names.len()).filter(|&v| !neighbours[v].is_empty()).collect();
    if with_edges.is_empty() || config.steps == 0 {
        return Err(Error::config("paths.dominance", "gat needs a graph with edges to train on (use sketch)"));
    }
    let mut rng = fastrand::Rng::with_seed(config.seed);
    let device = Device::Cpu;
    let f = features.len();
    let (h, d) = (config.hidden, config.dims);
    let init = |rng: &mut fastrand::Rng, rows: usize, cols: usize, scale: f32| -> Result<Var> {
        let values: Vec<f32> = (0..rows * cols).map(|_| (rng.f32() * 2.0 - 1.0) * scale).collect();
        Var::from_vec(values, (rows, cols), &device).map_err(err("initialising the weights"))
    };
    let w = init(&mut rng, f, h, (1.0 / 3.0f32).sqrt())?;
    let a_centre = init(&mut rng, h, 1, (1.0 / h as f32).sqrt())?;
    let a_neighbour = init(&mut rng, h, 1, (1.0 / h as f32).sqrt())?;
    // Non-negative at first: dominance holds at the start for gates that do not move.
    let w_out =
        Var::from_vec((0..h * d).map(|_| rng.f32() * (2.0 / h as f32).sqrt()).collect::<Vec<f32>>(), (h, d), &device)
            .map_err(err("initialising the weights"))?;
    let b_out = Var::zeros((1, d), DType::F32, &device).map_err(err("initialising the weights"))?;
    let vars = vec![w.clone(), a_centre.clone(), a_neighbour.clone(), w_out.clone(), b_out.clone()];
    let mut optimiser = candle_nn::AdamW::new(
        vars,
        candle_nn::ParamsAdamW { lr: config.learning_rate, weight_decay: 0.0, ..Default::default() },
    )
    .map_err(err("setting up the optimiser"))?;

    let mut stats = TrainStats::default();
    let half = (config.batch / 2).max(1);
    for step in 0..config.steps {
        // Stars g, then s for the positives, then s for the negatives: one forward pass.
        let mut stars = Vec::with_capacity(4 * half);
        let mut g = Vec::with_capacity(2 * half);
        for _ in 0..2 * half {
            g.push(star_of(with_edges[rng.usize(0..with_edges.len())], neighbours, &mut rng));
        }
        let positives: Vec<Star> = g[..half].iter().map(|g| sub_star(g, &mut rng)).collect();
        let negatives: Vec<Star> = g[half..].iter().map(|g| not_sub_star(g, names.len(), &mut rng)).collect();
        stars.extend(g);
        stars.extend(positives);
        stars.extend(negatives);
        let e = err("training");
        let (centres, members, mask) = inputs(&stars, names, features, &device).map_err(&e)?;
        let o =
            forward([&w, &a_centre, &a_neighbour, &w_out, &b_out].map(|v| v.as_tensor()), &centres, &members, &mask)
                .map_err(&e)?;
        let (og, os) = (o.narrow(0, 0, 2 * half).map_err(&e)?, o.narrow(0, 2 * half, 2 * half).map_err(&e)?);
        let difference = (os - og).map_err(&e)?;
        let violation = difference.relu().and_then(|x| x.sqr()).and_then(|x| x.sum(1)).map_err(&e)?;
        let positive = difference
            .narrow(0, 0, half)
            .and_then(|x| x.affine(1.0, f64::from(SLACK)))
            .and_then(|x| x.relu())
            .and_then(|x| x.sqr())
            .and_then(|x| x.sum(1))
            .and_then(|x| x.mean_all())
            .map_err(&e)?;
        let negative = violation
            .narrow(0, half, half)
            .and_then(|x| x.affine(-1.0, f64::from(config.margin)))
            .and_then(|x| x.relu())
            .and_then(|x| x.mean_all())
            .map_err(&e)?;
        let loss = (positive + negative).map_err(&e)?;
        let value = loss.to_scalar::<f32>().map_err(&e)?;
        if step == 0 {
            stats.first_loss = value;
        }
        stats.last_loss = value;
        optimiser.backward_step(&loss).map_err(&e)?;
        stats.steps = step + 1;
    }
    let e = err("reading the trained weights");
    let values = |v: &Var| v.as_tensor().flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(&e);
    let encoder = GatEncoder {
        features,
        hidden: h,
        dims: d,
        w: values(&w)?,
        a_centre: values(&a_centre)?,
        a_neighbour: values(&a_neighbour)?,
        w_out: values(&w_out)?,
        b_out: values(&b_out)?,
    };
    stats.seconds = started.elapsed().as_secs_f64();
    Ok((encoder, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::dominance::dominated;

    /// A small graph: a ring of 60 nodes, each also joined to the node 7 ahead.
    fn ring() -> (Vec<String>, Vec<Vec<u32>>) {
        let n = 60u32;
        let names: Vec<String> = (0..n).map(|i| format!("node {i}")).collect();
        let mut neighbours = vec![Vec::new(); n as usize];
        for i in 0..n {
            for j in [(i + 1) % n, (i + 7) % n] {
                neighbours[i as usize].push(j);
                neighbours[j as usize].push(i);
            }
        }
        (names, neighbours)
    }

    #[test]
    fn training_lowers_the_dominance_loss_and_the_encoder_matches_candle_s_forward_pass() {
        let (names, neighbours) = ring();
        let features = SketchShape { dims: 16 };
        let config =
            GatTraining { hidden: 16, dims: 16, steps: 600, batch: 64, learning_rate: 0.01, ..GatTraining::default() };
        let (gat, stats) = train(&names, &neighbours, features, &config).unwrap();
        assert_eq!(stats.steps, config.steps);
        assert!(stats.last_loss < stats.first_loss * 0.7, "{stats:?}");
        // The plain forward pass computes candle's, on stars of every kind.
        let name = |v: usize| names[v].as_str();
        let stars = [
            Star { centre: Some(3), known: neighbours[3].clone(), unknown: 0 },
            Star { centre: None, known: vec![4], unknown: 2 },
            Star { centre: Some(9), known: Vec::new(), unknown: 0 },
        ];
        let device = Device::Cpu;
        let (centres, members, mask) = inputs(&stars, &names, features, &device).unwrap();
        let params = gat
            .params()
            .map(|(_, rows, cols, values)| Tensor::from_vec(values.to_vec(), (rows, cols), &device).unwrap());
        let batch = forward([&params[0], &params[1], &params[2], &params[3], &params[4]], &centres, &members, &mask)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        for (s, expected) in stars.iter().zip(&batch) {
            let got =
                gat.encode(s.centre.map(|c| name(c as usize)), s.known.iter().map(|&u| name(u as usize)), s.unknown);
            assert_eq!(got.len(), 16);
            assert!(got.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-4), "{got:?} against {expected:?}");
        }
        assert!(batch[0].iter().any(|&x| x > 0.0), "a trained encoding is not all zero");
        // Trained, most true sub-stars are dominated and most false ones are not.
        let mut rng = fastrand::Rng::with_seed(5);
        let (mut held, mut told) = (0, 0);
        for v in 0..names.len() {
            let g = star_of(v, &neighbours, &mut rng);
            let o = |s: &Star| {
                gat.encode(s.centre.map(|c| name(c as usize)), s.known.iter().map(|&u| name(u as usize)), s.unknown)
            };
            held += usize::from(dominated(&o(&sub_star(&g, &mut rng)), &o(&g)));
            told += usize::from(!dominated(&o(&not_sub_star(&g, names.len(), &mut rng)), &o(&g)));
        }
        assert!(held >= 40, "true sub-stars dominated: {held} of 60 ({stats:?})");
        assert!(told >= 45, "false sub-stars told apart: {told} of 60 ({stats:?})");
    }

    #[test]
    fn pairs_are_what_they_claim() {
        let (_, neighbours) = ring();
        let mut rng = fastrand::Rng::with_seed(1);
        for v in 0..60 {
            let g = star_of(v, &neighbours, &mut rng);
            let s = sub_star(&g, &mut rng);
            assert!(s.known.iter().all(|u| g.known.contains(u)) && s.known.len() + s.unknown <= g.known.len());
            let n = not_sub_star(&g, 60, &mut rng);
            assert!(n.known.iter().any(|u| !g.known.contains(u)) || n.known.len() + n.unknown > g.known.len());
        }
    }
}
