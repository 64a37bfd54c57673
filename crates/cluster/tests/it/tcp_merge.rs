//! Merges over real TCP, planned by the directory leader with the rebalancer on (as
//! `bavl-cluster node` runs): ranges split while keys are written, most keys are deleted,
//! and the planner merges the small, cold ranges back into one; every key left reads back
//! and a deleted one reads absent.

use crate::tcpnet::{wait_ranges, Net};
use bavl_cluster::load::LoadOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_cold_ranges_merge_back_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let load = LoadOptions { merge_keys: 30, window_ticks: 5, ..Default::default() };
    let net = Net::start(dir.path(), load).await;
    let mut client = net.client();
    let key = |i: u32| format!("k{i:05}").into_bytes();
    for i in 0..150 {
        client.put(&key(i), &i.to_le_bytes()).await.unwrap();
    }
    let ranges = wait_ranges(&mut client, 100, |r| r.len() >= 3).await;
    assert!(ranges.len() >= 3, "expected splits, got {ranges:?}");
    for i in 0..140 {
        client.delete(&key(i)).await.unwrap();
    }
    // Three report rounds (every fourth tick of 100 ms) per merge, one merge at a time.
    let ranges = wait_ranges(&mut client, 600, |r| r.len() == 1).await;
    assert_eq!(ranges.len(), 1, "the ranges were not merged back: {ranges:?}");
    assert!(ranges[0].start.is_empty() && ranges[0].end.is_empty(), "{ranges:?}");
    for i in 140..150 {
        assert_eq!(client.get(&key(i)).await.unwrap(), Some(i.to_le_bytes().to_vec()), "key {i}");
    }
    assert_eq!(client.get(&key(7)).await.unwrap(), None);
    net.stop().await;
}
