//! What the evaluation varies: the paper's ablation rows (Table 2) as query-time variants of
//! one index, and the parameters of sensitivity sweeps (Figure 3) — query-time breadths, or
//! construction settings (τ_s, τ_e) that need a sibling index rebuilt from the stage they
//! affect.

use super::Variant;
use crate::config::{Assembly, Config, FusionWeights, QueryConfig, WindowIn};
use crate::core::{Error, Result};
use crate::stages::Stage;

/// The label of the paper's full system (the paper's assembly, no bridges), after which the
/// ablation puts its w/o SW row.
pub const PAPER_ROW: &str = "FlexStructRAG (paper)";

/// The ablation table on top of `base` (whose mode should be hybrid): our default (the fused
/// assembly) and what each of its pieces contributes, then the paper's system (its assembly,
/// no bridge retrieval) and the module removals of the paper's Table 2.
pub fn ablation_variants(base: &QueryConfig) -> Vec<Variant> {
    let fused = QueryConfig { assembly: Assembly::Fused, ..base.clone() };
    let row = |label: &str, config: QueryConfig| Variant { label: label.to_owned(), config };
    let mut rows = vec![
        row("FlexStructRAG, fused (default)", fused.clone()),
        row("fused w/o LR (BM25)", QueryConfig { lexical: false, ..fused.clone() }),
        row("fused w/o BR", QueryConfig { bridges: false, ..fused.clone() }),
        row("fused w/o EnR", QueryConfig { entities: false, ..fused.clone() }),
        row("fused w/o HR", QueryConfig { hyperedges: false, ..fused.clone() }),
        row("fused, no relation boost", QueryConfig { hop_boost: 1.0, ..fused.clone() }),
        row("fused w/o second hop", QueryConfig { second_hop: 0, ..fused.clone() }),
        row("fused, hyperedges without windows", QueryConfig { window_k: 0, ..fused.clone() }),
        row("fused, windows in SSC clusters", QueryConfig { window_in: WindowIn::Cluster, ..fused.clone() }),
        row(
            "fused + ER (edge weight 1)",
            QueryConfig { weights: FusionWeights { edges: 1.0, ..fused.weights }, ..fused.clone() },
        ),
        row("FlexStructRAG + BR, paper assembly", QueryConfig { assembly: Assembly::Paper, ..base.clone() }),
    ];
    // The paper's rows (its assembly, no bridge retrieval): (label, entities, hyperedges, edges,
    // clusters).
    let paper: [(&str, bool, bool, bool, bool); 11] = [
        (PAPER_ROW, true, true, true, true),
        ("w/o SSC", true, true, true, false),
        ("w/o HR", true, false, true, true),
        ("w/o EnR", false, true, true, true),
        ("w/o ER", true, true, false, true),
        ("w/o ER+SSC", true, true, false, false),
        ("w/o ER+HR", true, false, false, true),
        ("w/o ER+EnR", false, true, false, true),
        ("w/o HR+SSC", true, false, true, false),
        ("w/o HR+SSC+ER", true, false, false, false),
        ("w/o HR+SSC+EnR", false, false, true, false),
    ];
    rows.extend(paper.iter().map(|&(label, entities, hyperedges, edges, clusters)| {
        let config = QueryConfig {
            assembly: Assembly::Paper,
            entities,
            hyperedges,
            edges,
            clusters,
            bridges: false,
            ..base.clone()
        };
        row(label, config)
    }));
    rows
}

/// A parameter a sweep can vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parameter {
    /// N_EH (query time).
    NEh,
    /// N_E (query time).
    NE,
    /// τ_s (rebuilds hypergraph and what follows).
    TauS,
    /// τ_e (rebuilds graph and what follows).
    TauE,
    /// N_B, bridge hyperedges (query time; ours, beyond the paper).
    NB,
}

impl Parameter {
    /// Parses `n_eh`, `n_e`, `tau_s`, `tau_e` or `n_b`.
    pub fn parse(s: &str) -> Result<Parameter> {
        match s {
            "n_eh" => Ok(Parameter::NEh),
            "n_e" => Ok(Parameter::NE),
            "tau_s" => Ok(Parameter::TauS),
            "tau_e" => Ok(Parameter::TauE),
            "n_b" => Ok(Parameter::NB),
            other => Err(Error::config(
                "--param",
                format!("unknown sweep parameter `{other}` (n_eh, n_e, tau_s, tau_e, n_b)"),
            )),
        }
    }

    /// Name in labels and file names.
    pub fn name(self) -> &'static str {
        match self {
            Parameter::NEh => "n_eh",
            Parameter::NE => "n_e",
            Parameter::TauS => "tau_s",
            Parameter::TauE => "tau_e",
            Parameter::NB => "n_b",
        }
    }

    /// The values swept when none are given (around the paper's defaults).
    pub fn default_values(self) -> Vec<usize> {
        match self {
            Parameter::NEh => vec![1, 3, 5, 7, 10, 15],
            Parameter::NE => vec![1, 3, 5, 7, 10],
            Parameter::TauS => vec![3, 6, 9, 12, 15],
            Parameter::TauE => vec![1, 2, 3, 5, 8],
            Parameter::NB => vec![0, 1, 3, 5, 8],
        }
    }

    /// Whether a new value needs a rebuilt index.
    pub fn rebuilds(self) -> bool {
        self.first_stage().is_some()
    }

    /// The first construction stage a new value changes (None: a query-time parameter).
    pub fn first_stage(self) -> Option<Stage> {
        match self {
            Parameter::TauS => Some(Stage::Hypergraph),
            Parameter::TauE => Some(Stage::Graph),
            Parameter::NEh | Parameter::NE | Parameter::NB => None,
        }
    }

    /// The configuration with this parameter set to `value`.
    pub fn apply(self, config: &Config, value: usize) -> Config {
        let mut c = config.clone();
        match self {
            Parameter::NEh => c.query.n_eh = value,
            Parameter::NE => c.query.n_e = value,
            Parameter::TauS => c.hypergraph.tau_s = value,
            Parameter::TauE => c.graph.tau_e = value,
            Parameter::NB => c.query.n_b = value,
        }
        c
    }

    /// The variants evaluated at each point: the full system, and the single module the
    /// parameter acts on (hyperedges only for N_EH, edges only for N_E and τ_e, entities only
    /// for τ_s, each in the paper's assembly), as in the paper's figure; N_B acts on the full
    /// system only (N_B = 0 is the paper's).
    pub fn variants(self, base: &QueryConfig) -> Vec<Variant> {
        let only = |entities, hyperedges, edges| QueryConfig {
            assembly: Assembly::Paper,
            entities,
            hyperedges,
            edges,
            clusters: false,
            bridges: false,
            ..base.clone()
        };
        let hybrid = Variant { label: "hybrid".into(), config: base.clone() };
        let (label, isolated) = match self {
            Parameter::NEh => ("hyperedges only", only(false, true, false)),
            Parameter::NE | Parameter::TauE => ("edges only", only(false, false, true)),
            Parameter::TauS => ("entities only", only(true, false, false)),
            Parameter::NB => return vec![hybrid],
        };
        vec![hybrid, Variant { label: label.into(), config: isolated }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mode;

    #[test]
    fn ablation_rows_are_ours_then_the_papers() {
        let rows = ablation_variants(&QueryConfig::default());
        assert_eq!(rows.len(), 22);
        let labels: Vec<String> = rows.iter().map(|v| crate::query::variant(&v.config)).collect();
        assert_eq!(labels[0], "hybrid");
        assert_eq!(labels[1], "hybrid w/o LR");
        assert_eq!(labels[6], "hybrid w/o 2nd hop");
        assert_eq!(labels[10], "hybrid-paper");
        // The paper's rows know no bridge retrieval and use its assembly.
        assert_eq!(rows[11].label, PAPER_ROW);
        assert_eq!(labels[11], "hybrid-paper w/o BR");
        assert_eq!(labels[12], "hybrid-paper w/o SSC+BR");
        assert_eq!(labels[20], "hybrid-paper w/o HR+SSC+ER+BR");
        assert_eq!(labels[21], "hybrid-paper w/o HR+SSC+EnR+BR");
        // Every row is a different configuration, under a label of its own.
        for (i, a) in rows.iter().enumerate() {
            assert!(rows[i + 1..].iter().all(|b| b.config != a.config && b.label != a.label), "{}", a.label);
        }
        assert!(rows.iter().all(|v| v.config.mode == Mode::Hybrid));
    }

    #[test]
    fn sweeps_set_their_parameter() {
        let c = Config::default();
        assert_eq!(Parameter::parse("tau_s").unwrap().apply(&c, 4).hypergraph.tau_s, 4);
        assert_eq!(Parameter::parse("n_e").unwrap().apply(&c, 8).query.n_e, 8);
        assert!(Parameter::parse("alpha").unwrap_err().to_string().contains("n_eh, n_e, tau_s, tau_e, n_b"));
        assert!(Parameter::TauE.rebuilds() && !Parameter::NEh.rebuilds());
        assert_eq!(
            Parameter::TauE.first_stage().unwrap().and_after(),
            &[Stage::Graph, Stage::Embed, Stage::Cluster, Stage::Merge]
        );
        let v = Parameter::TauS.variants(&QueryConfig::default());
        assert_eq!(crate::query::variant(&v[1].config), "hybrid-paper w/o HR+SSC+ER+BR");
        assert_eq!(Parameter::NB.apply(&c, 0).query.n_b, 0);
        assert_eq!(crate::query::variant(&Parameter::NB.apply(&c, 0).query), "hybrid w/o BR");
        assert_eq!(Parameter::NB.variants(&QueryConfig::default()).len(), 1);
    }
}
