//! The `one_partition` setting: what one partition costs in a cluster of P, with its leader
//! not sharing its process's CPU with the other partitions' loads (the model's premise:
//! every leader on a core of its own).
//!
//! In the default sweep every partition is loaded at once, and here all P leaders share the
//! same 3 node processes on 2 cores: at P = 8 a process runs about 8/3 partitions' loads,
//! and the measured CPU per operation carries what that sharing costs (more runnable
//! threads than cores, caches shared by 8/3 the working set, fewer requests per wake-up on
//! each of more connections). This setting loads the partitions **one at a time**: for each
//! partition `i` of P, a throughput phase of `throughput_clients` clients (one client
//! machine) whose keys all fall in partition `i`'s range, while the other P - 1 groups run
//! idle beside it (heartbeats, reports: the background the model removes). The phases are
//! then summed into one (operations, seconds, CPU, messages), so `c(P)` averages over
//! every partition and wherever its leader was elected. At P = 1 it is the default's
//! measurement with one client machine.
//!
//! The clusters of every partition count run side by side, and the slices measured on them
//! alternate ([`side_by_side`]): on this shared machine two measurements minutes apart
//! differ by ±20% (probes of the same code), which a ratio of two such measurements
//! would carry whole.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::cluster::LabCluster;
use crate::experiments::{background, config, phase, rows, Background, Results, SweepRow};
use crate::load::{PhaseResult, PhaseSpec, Spec, Workload};
use crate::setup::Setup;
use crate::wire::NodeStats;

/// The phases `parts` as one: counts, seconds and CPU summed, node counters summed per
/// node and class (a node missing from any part is left out); latencies of the first part.
pub fn merge(name: &str, parts: &[PhaseResult]) -> PhaseResult {
    let Some(first) = parts.first() else { return PhaseResult::default() };
    let mut m = PhaseResult {
        name: name.to_string(),
        workload: first.workload,
        clients: first.clients,
        latency: first.latency.clone(),
        ..PhaseResult::default()
    };
    let mut nodes: BTreeMap<_, NodeStats> = first.nodes.clone();
    nodes.retain(|id, _| parts.iter().all(|p| p.nodes.contains_key(id)));
    for n in nodes.values_mut() {
        *n = NodeStats { pid: n.pid, ..NodeStats::default() };
    }
    for p in parts {
        m.wall_s += p.wall_s;
        m.ok += p.ok;
        m.unknown += p.unknown;
        m.failed += p.failed;
        m.client_cpu_s += p.client_cpu_s;
        m.client.retries += p.client.retries;
        m.client.stale += p.client.stale;
        m.client.not_leader += p.client.not_leader;
        m.client.directory_lookups += p.client.directory_lookups;
        for (id, n) in nodes.iter_mut() {
            n.add(&p.nodes[id]);
        }
    }
    m.nodes = nodes;
    m
}

/// Search and update at each partition count of `ps`, one partition loaded at a time,
/// the clusters side by side: all of them run from start to end, and the measured slices
/// alternate between them (round `k` loads partition `k mod P` of each cluster in turn,
/// the order reversed every round), so this shared machine's drifts fall on every
/// partition count alike.
pub async fn side_by_side(
    s: &Setup,
    work: &Path,
    port: u16,
    ps: &[u64],
    r: &mut Results,
) -> Result<()> {
    let mut clusters = vec![];
    for (k, &p) in ps.iter().enumerate() {
        let dir = work.join(format!("one_partition-p{p}"));
        let c = LabCluster::start(&dir, port + 10 * k as u16, config(s, p, s.capacity_default))?;
        c.wait_ready(Duration::from_secs(60)).await?;
        clusters.push(c);
    }
    let mut bgs = vec![];
    for c in &clusters {
        bgs.push(background(c, s.idle_s).await);
    }
    // Every partition of the largest P is loaded once per pass; two passes in a full run
    // (16 rounds at P = 8), so the targets' interval rests on twice as many rounds.
    let passes = if s.quick { 1 } else { 2 };
    let rounds = passes * ps.iter().copied().max().unwrap_or(1);
    let (slice, warm) = if s.quick { (0.5, 0.2) } else { (2.0, 0.3) };
    let wl = vec![Workload::Search, Workload::Update];
    let mut kept =
        Rounds { ps: ps.to_vec(), workloads: wl.clone(), backgrounds: bgs, ..Rounds::default() };
    kept.latency = vec![vec![]; ps.len()];
    for (wi, &w) in wl.iter().enumerate() {
        for (k, c) in clusters.iter().enumerate() {
            let lat = vec![
                phase("warmup".into(), w, 1, warm),
                phase("latency".into(), w, 1, s.latency_s),
            ];
            let res = c.load(&spec(s, c, lat, 700 + k as u64)).await?;
            kept.latency[k].push(res.phases.get(1).cloned().unwrap_or_default());
        }
        let mut slices: Vec<Vec<PhaseResult>> = vec![vec![]; ps.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..ps.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for k in order {
                let (c, p) = (&clusters[k], ps[k]);
                let part = Some((round % p, p));
                let phases = vec![
                    PhaseSpec {
                        partition: part,
                        ..phase("warmup".into(), w, s.throughput_clients, warm)
                    },
                    PhaseSpec {
                        partition: part,
                        ..phase(format!("{w:?}-{round}"), w, s.throughput_clients, slice)
                    },
                ];
                let seed = 800 + 1000 * wi as u64 + 10 * round + k as u64;
                let res = c.load(&spec(s, c, phases, seed)).await?;
                // A slice lost is lost from every cluster, so the rounds stay paired.
                slices[k].push(res.phases.get(1).cloned().unwrap_or_default());
            }
        }
        kept.slices.push(slices);
    }
    r.sweep.extend(kept.rows(&(0..kept.rounds()).collect::<Vec<_>>()));
    r.one_partition = Some(kept);
    Ok(())
}

/// What the `one_partition` setting measured, slice by slice, so that its figures can be
/// given with an interval (the report resamples the rounds: [`Rounds::rows`]).
#[derive(Clone, Debug, Default)]
pub struct Rounds {
    pub ps: Vec<u64>,
    pub workloads: Vec<Workload>,
    /// Per cluster, per workload: the single-client phase.
    pub latency: Vec<Vec<PhaseResult>>,
    /// Per workload, per cluster, per round: the throughput slice (round `k` of every
    /// cluster ran next to each other in time).
    pub slices: Vec<Vec<Vec<PhaseResult>>>,
    /// Per cluster: the idle background.
    pub backgrounds: Vec<Background>,
}

impl Rounds {
    pub fn rounds(&self) -> usize {
        self.slices.iter().flatten().map(Vec::len).min().unwrap_or(0)
    }

    /// Whether round `i` of workload `wi` was measured on every cluster (a round lost on
    /// one is left out on all, so the rounds stay paired).
    fn whole(&self, wi: usize, i: usize) -> bool {
        self.slices[wi].iter().all(|c| c.get(i).is_some_and(|s| !s.nodes.is_empty()))
    }

    /// The sweep rows of the rounds `pick` (a round may be picked more than once, the same
    /// rounds on every cluster): each throughput row the slices of those rounds merged.
    pub fn rows(&self, pick: &[usize]) -> Vec<SweepRow> {
        let mut out = vec![];
        for (k, &p) in self.ps.iter().enumerate() {
            let mut laid = vec![PhaseResult::default()];
            for (wi, w) in self.workloads.iter().enumerate() {
                laid.push(self.latency[k].get(wi).cloned().unwrap_or_default());
                let slices = &self.slices[wi][k];
                let parts: Vec<PhaseResult> = pick
                    .iter()
                    .filter(|&&i| self.whole(wi, i))
                    .filter_map(|&i| slices.get(i).cloned())
                    .collect();
                laid.push(merge(&format!("{w:?}-throughput"), &parts));
            }
            let bg = self.backgrounds.get(k).cloned().unwrap_or_default();
            out.extend(rows(p, (true, "one_partition"), &self.workloads, &laid, &bg));
        }
        out
    }
}

fn spec(s: &Setup, c: &LabCluster, phases: Vec<PhaseSpec>, seed: u64) -> Spec {
    Spec {
        peers: c.peers.clone(),
        no_cache: false,
        clients_per_connection: s.clients_per_connection,
        keys: s.keys,
        phases,
        history: None,
        seed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Count;

    fn part(ok: u64, cpu: f64, rpcs: u64) -> PhaseResult {
        let classes = [("client_data".to_string(), Count { rpcs, bytes_in: 10, bytes_out: 20 })];
        let node = |pid| NodeStats { pid, cpu_s: cpu, classes: classes.clone().into() };
        PhaseResult {
            ok,
            wall_s: 2.0,
            client_cpu_s: 0.5,
            nodes: [(1, node(11)), (2, node(12))].into(),
            ..PhaseResult::default()
        }
    }

    #[test]
    fn merged_phases_sum_what_they_count() {
        let mut b = part(30, 2.0, 30);
        b.nodes.remove(&2);
        let m = merge("x", &[part(10, 1.0, 10), part(20, 1.5, 20), b]);
        assert_eq!(m.ok, 60);
        assert!((m.wall_s - 6.0).abs() < 1e-9 && (m.client_cpu_s - 1.5).abs() < 1e-9);
        // Node 2 missed a part: it is left out rather than undercounted.
        assert_eq!(m.nodes.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert!((m.nodes[&1].cpu_s - 4.5).abs() < 1e-9);
        assert_eq!(
            m.nodes[&1].classes["client_data"],
            Count { rpcs: 60, bytes_in: 30, bytes_out: 60 }
        );
    }

    #[test]
    fn a_partitions_keys_are_the_ones_its_range_was_cut_around() {
        use crate::load::key_window;
        assert_eq!(key_window(100, Some((1, 4))), 25..50);
        assert_eq!(key_window(100, Some((3, 4))), 75..100);
        assert_eq!(key_window(100, None), 0..100);
        // Nonsense falls back to every key rather than an empty range.
        assert_eq!(key_window(100, Some((4, 4))), 0..100);
        assert_eq!(key_window(3, Some((0, 8))), 0..3);
        // The windows tile the keys and start where `node::initial_ranges` cuts.
        let cuts = crate::node::initial_ranges(8, 1000, &[1, 2, 3].into());
        for (i, d) in cuts.iter().enumerate() {
            let w = key_window(1000, Some((i as u64, 8)));
            assert!(d.contains(&crate::keys::key(crate::keys::preloaded(w.start))));
            assert!(d.contains(&crate::keys::key(crate::keys::preloaded(w.end - 1) + 1)));
        }
    }
}
