//! The merges experiment: small neighbouring ranges merged by the directory leader's
//! planner while clients keep updating their keys, on real node processes over TCP. It
//! records how many merges happened and when (the range count polled from the directory),
//! and the clients' throughput, latency and retries while ranges merged and after.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cluster::{finish_load, Config, LabCluster};
use crate::experiments::{config, phase};
use crate::load::{PhaseResult, Spec, Workload};
use crate::setup::Setup;

/// What the merges experiment measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MergeRun {
    pub ranges_before: usize,
    pub ranges_after: usize,
    /// `(seconds since the load started, ranges in the directory)` at each change.
    pub range_counts: Vec<(f64, usize)>,
    pub phases: Vec<PhaseResult>,
}

impl MergeRun {
    pub fn merges(&self) -> usize {
        self.ranges_before.saturating_sub(self.ranges_after)
    }
}

pub async fn merges(s: &Setup, work: &Path, port: u16) -> Result<MergeRun> {
    let cfg = Config {
        keys: s.merge_preload,
        merge_keys: s.merge_preload,
        ..config(s, s.merge_partitions, s.capacity_default)
    };
    let c = LabCluster::start(&work.join("merges"), port, cfg)?;
    let before = c.wait_ready(Duration::from_secs(60)).await?.len();
    let [during, after] = s.merge_phase_s;
    let n = s.split_clients;
    let spec = Spec {
        peers: c.peers.clone(),
        no_cache: false,
        clients_per_connection: s.clients_per_connection,
        keys: s.merge_preload,
        phases: vec![
            phase("warmup".into(), Workload::Update, n, 0.5),
            phase("merging".into(), Workload::Update, n, during),
            phase("after".into(), Workload::Update, n, after),
        ],
        history: None,
        seed: 500,
    };
    let child = c.spawn_load(&spec)?;
    let load = tokio::spawn(finish_load(child));
    let t = Instant::now();
    let mut counts = vec![(0.0, before)];
    while !load.is_finished() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Some(n) = c.ranges().await.map(|r| r.len()) {
            if counts.last().is_none_or(|l| l.1 != n) {
                counts.push((t.elapsed().as_secs_f64(), n));
            }
        }
    }
    let res = load.await.context("the load task")??;
    let after = c.ranges().await.map_or(0, |r| r.len());
    Ok(MergeRun {
        ranges_before: before,
        ranges_after: after,
        range_counts: counts,
        phases: res.phases,
    })
}
