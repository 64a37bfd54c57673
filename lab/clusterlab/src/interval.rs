//! How sure the targets' figures are: a bootstrap over the `one_partition` setting's
//! rounds ([`crate::isolated::Rounds`]).
//!
//! The setting measures P = 1 and P = 8 side by side in rounds (round `k` loads partition
//! `k mod P` of each cluster, their slices next to each other in time). A resample draws as
//! many rounds as were measured, with replacement, the same rounds on both clusters (the
//! pairing is what removes this shared machine's drift), merges each cluster's slices of
//! those rounds and computes the targets from them exactly as from the whole run. The
//! interval is the 2.5th to 97.5th percentile over the resamples. What it covers: the
//! machine's variation between rounds and the partitions' differences (which partition a
//! round loads, where its leader was elected); not what changes between runs (the clusters'
//! placement of leaders is drawn once per run).

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::experiments::SweepRow;
use crate::isolated::Rounds;

/// Resamples drawn.
pub const RESAMPLES: usize = 2000;

/// The targets of one set of rows: (update efficiency, search efficiency, cost ratio) at 8.
pub type Targets<'a> = dyn Fn(&[SweepRow]) -> [Option<f64>; 3] + 'a;

/// The 95% bootstrap intervals of the three figures `targets` computes, as JSON (`null` with
/// fewer than 2 rounds).
pub fn intervals(rounds: &Rounds, targets: &Targets<'_>) -> Value {
    let n = rounds.rounds();
    if n < 2 {
        return Value::Null;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    let mut drawn: [Vec<f64>; 3] = Default::default();
    for _ in 0..RESAMPLES {
        let pick: Vec<usize> = (0..n).map(|_| rng.gen_range(0..n)).collect();
        for (d, v) in drawn.iter_mut().zip(targets(&rounds.rows(&pick))) {
            d.extend(v.filter(|x| x.is_finite()));
        }
    }
    let [u, s, c] = drawn.map(percentiles);
    json!({
        "kind": "bootstrap over the one_partition setting's paired rounds (lab/clusterlab/src/interval.rs)",
        "rounds": n, "resamples": RESAMPLES, "level": 0.95,
        "update_efficiency_8": u, "search_efficiency_8": s, "per_op_cost_ratio": c,
        "covers": "the variation between rounds (this machine's drift, which partition a round loads, where its leader is); not what differs between runs (leader placement is drawn once per run)",
    })
}

/// `[2.5th, 97.5th]` percentile of `v` (nearest rank), or `null` when empty.
fn percentiles(v: Vec<f64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    json!(bavl_labkit::stats::percentiles(&v, [2.5, 97.5]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_the_tails_of_what_was_drawn() {
        let v: Vec<f64> = (0..=1000).map(f64::from).collect();
        assert_eq!(percentiles(v), json!([25.0, 975.0]));
        assert_eq!(percentiles(vec![]), Value::Null);
        assert_eq!(percentiles(vec![3.0]), json!([3.0, 3.0]));
    }

    use crate::load::{PhaseResult, Workload};
    use crate::wire::NodeStats;

    /// A slice of `ok` operations costing `cpu` node CPU-s.
    fn slice(ok: u64, cpu: f64) -> PhaseResult {
        let node = NodeStats { pid: 1, cpu_s: cpu, ..NodeStats::default() };
        PhaseResult { ok, wall_s: 1.0, nodes: [(1, node)].into(), ..PhaseResult::default() }
    }

    /// Two clusters (P = 1, 8), one workload, the given slices per round.
    fn rounds(one: &[(u64, f64)], eight: &[(u64, f64)]) -> Rounds {
        let cut = |v: &[(u64, f64)]| v.iter().map(|&(o, c)| slice(o, c)).collect::<Vec<_>>();
        Rounds {
            ps: vec![1, 8],
            workloads: vec![Workload::Update],
            latency: vec![vec![PhaseResult::default()]; 2],
            slices: vec![vec![cut(one), cut(eight)]],
            backgrounds: vec![Default::default(); 2],
        }
    }

    /// CPU per operation at 8 over the same at 1, from the merged rows.
    fn ratio(rows: &[SweepRow]) -> [Option<f64>; 3] {
        let per_op = |p: u64| {
            let r = rows.iter().find(|r| r.partitions == p)?;
            let cpu: f64 = r.throughput.nodes.values().map(|n| n.cpu_s).sum();
            Some(cpu / r.throughput.ok as f64)
        };
        [per_op(8).zip(per_op(1)).map(|(a, b)| a / b), None, None]
    }

    #[test]
    fn the_interval_holds_the_whole_runs_figure_and_widens_with_the_rounds_spread() {
        let same = rounds(&[(100, 1.0); 6], &[(100, 1.2); 6]);
        let v = intervals(&same, &ratio);
        let [lo, hi] = [v["update_efficiency_8"][0].as_f64(), v["update_efficiency_8"][1].as_f64()];
        assert!((lo.unwrap() - 1.2).abs() < 1e-9 && (hi.unwrap() - 1.2).abs() < 1e-9, "{v}");
        assert_eq!(v["search_efficiency_8"], Value::Null, "nothing drawn: no interval");
        let spread = [(100, 0.8), (100, 1.6), (100, 1.0), (100, 1.4), (100, 1.1), (100, 1.3)];
        let v = intervals(&rounds(&[(100, 1.0); 6], &spread), &ratio);
        let (lo, hi) = (
            v["update_efficiency_8"][0].as_f64().unwrap(),
            v["update_efficiency_8"][1].as_f64().unwrap(),
        );
        assert!(lo < 1.2 && 1.2 < hi && hi - lo > 0.1, "{v}");
        // A round lost on one cluster is left out on both: the pairing holds.
        let mut lost = rounds(&[(100, 1.0); 3], &[(100, 1.2); 3]);
        lost.slices[0][1][1] = PhaseResult::default();
        lost.slices[0][0][1] = slice(100, 50.0);
        let v = intervals(&lost, &ratio);
        for end in 0..2 {
            let x = v["update_efficiency_8"][end].as_f64().unwrap();
            assert!((x - 1.2).abs() < 1e-9, "{v}");
        }
    }

    #[test]
    fn too_few_rounds_give_no_interval() {
        let none = |_: &[SweepRow]| [Some(1.0); 3];
        assert_eq!(intervals(&Rounds::default(), &none), Value::Null);
    }
}
