//! The sizes and durations of a run (`--quick` or full), recorded in the JSON.

use serde::Serialize;

use crate::RunArgs;

/// Sizes and durations of a run.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    pub quick: bool,
    pub keys: u64,
    pub partitions: Vec<u64>,
    pub latency_s: f64,
    pub throughput_s: f64,
    pub idle_s: f64,
    /// Concurrent clients of a throughput phase, per partition
    /// ([`crate::experiments::peak_clients`]).
    pub throughput_clients: u32,
    /// Clients sharing one multiplexed connection per node (`load::Spec`): one client
    /// machine per `throughput_clients` clients, so a group sees as many connections at
    /// every P. The `own_connections` setting gives every client its own (0).
    pub clients_per_connection: u32,
    pub cache_partitions: Vec<u64>,
    pub capacities: Vec<u32>,
    pub capacity_partitions: u64,
    pub capacity_default: u32,
    pub split_preload: u64,
    pub split_keys: u64,
    pub split_phase_s: [f64; 3],
    pub split_clients: u32,
    /// The merges experiment: ranges cut over `merge_preload` keys, merged (planner's
    /// `merge_keys` = all of them) under an update load of `split_clients` clients for
    /// `merge_phase_s[0]` s, then `merge_phase_s[1]` s more of the load on what is left.
    pub merge_partitions: u64,
    pub merge_preload: u64,
    pub merge_phase_s: [f64; 2],
    pub histories: usize,
    pub history_s: f64,
    pub history_hot_keys: u64,
    pub history_split_keys: u64,
    pub history_clients: u32,
    pub no_fsync: bool,
    /// `bavl-cluster node`'s log-compaction snapshot interval (entries).
    pub snapshot_every: u64,
    /// Partition counts run again (search and update) in the other settings: `no_snapshots`
    /// (no log-compaction snapshot during the load, separating the snapshot's cost, which
    /// grows with a range's size) and `no_fsync` (no fsync wait: the leaders become
    /// CPU-bound, the premise of the model, instead of bound by one fsync per Raft round),
    /// `fixed_clients` (as default, but `throughput_clients` clients in all whatever P: the
    /// rule of the runs before 2026-11-29, under which a group of P = 8 sees an eighth of the
    /// clients) and `double_clients` (twice the default's clients: if throughput rises
    /// much, the default does not saturate).
    pub setting_partitions: Vec<u64>,
    pub settings: Vec<String>,
    pub no_snapshot_every: u64,
}

impl Setup {
    pub fn new(a: &RunArgs) -> Setup {
        let q = a.quick;
        Setup {
            quick: q,
            keys: if q { 5_000 } else { 100_000 },
            partitions: if q { vec![1, 2] } else { vec![1, 2, 4, 8] },
            latency_s: if q { 0.4 } else { 3.0 },
            throughput_s: if q { 0.8 } else { 8.0 },
            idle_s: if q { 0.5 } else { 4.0 },
            throughput_clients: 64,
            clients_per_connection: 64,
            cache_partitions: if q { vec![2] } else { vec![4, 8] },
            capacities: if q { vec![16] } else { vec![16, 64, 256, 1024] },
            capacity_partitions: if q { 2 } else { 8 },
            capacity_default: bavl_cluster::node::NodeOptions::default().capacity,
            split_preload: if q { 1_000 } else { 2_000 },
            split_keys: if q { 1_200 } else { 2_400 },
            split_phase_s: if q { [0.5, 3.0, 0.5] } else { [4.0, 10.0, 4.0] },
            split_clients: 8,
            merge_partitions: if q { 2 } else { 4 },
            merge_preload: if q { 400 } else { 1_000 },
            merge_phase_s: if q { [10.0, 1.0] } else { [36.0, 4.0] },
            histories: if q { 1 } else { 3 },
            history_s: if q { 5.0 } else { 12.0 },
            history_hot_keys: 64,
            history_split_keys: if q { 150 } else { 300 },
            history_clients: 8,
            no_fsync: a.no_fsync,
            snapshot_every: bavl_cluster::node::SNAPSHOT_EVERY,
            setting_partitions: if q { vec![1, 2] } else { vec![1, 8] },
            settings: if q {
                vec!["one_partition".into(), "fixed_clients".into()]
            } else {
                [
                    "one_partition",
                    "no_snapshots",
                    "no_fsync",
                    "fixed_clients",
                    "double_clients",
                    "own_connections",
                ]
                .map(String::from)
                .to_vec()
            },
            no_snapshot_every: 1 << 40,
        }
    }
}
