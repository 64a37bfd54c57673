//! Scans across ranges and proofs against a range's root, on a simulated cluster that split.

use std::collections::BTreeMap;
use std::time::Duration;

use bavl_cluster::client::ClientOptions;
use bavl_cluster::sim::{runtime, SimOptions};
use bavl_cluster::simcluster::SimCluster;
use bavl_cluster::simnet::Faults;

fn options(dir: &std::path::Path) -> SimOptions {
    SimOptions {
        split_keys: 40,
        faults: Faults { loss: 0.01, max_delay_ms: 3 },
        ..SimOptions::new(3, dir)
    }
}

#[test]
fn scans_cross_ranges_and_proofs_verify() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = SimCluster::start(options(dir.path())).await.unwrap();
        let mut c = cluster.client(1, ClientOptions::default());
        let mut model = BTreeMap::new();
        for i in (0..400u32).step_by(2) {
            let (k, v) = (format!("k{i:04}").into_bytes(), i.to_be_bytes().to_vec());
            match c.put(&k, &v).await {
                Ok(()) => {
                    model.insert(k, v);
                }
                // Outcome unknown: a linearizable read settles it before the scans.
                Err(_) => {
                    if let Some(v) = c.get(&k).await.unwrap() {
                        model.insert(k, v);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (ranges, problems) = cluster.ranges();
        assert!(problems.is_empty(), "{problems:?}");
        assert!(ranges.len() >= 3, "expected splits: {ranges:?}");
        // The whole key space, in pages smaller than a range.
        let all = c.scan(b"", b"", u32::MAX).await.unwrap();
        assert_eq!(all, model.clone().into_iter().collect::<Vec<_>>());
        let mut paged = Vec::new();
        let mut cursor = b"".to_vec();
        loop {
            let page = c.scan(&cursor, b"", 7).await.unwrap();
            let Some((last, _)) = page.last() else { break };
            cursor = [last.as_slice(), &[0]].concat();
            paged.extend(page);
        }
        assert_eq!(paged, all);
        // A window crossing range boundaries, with an odd start key (absent).
        let lo = b"k0101".to_vec();
        let hi = b"k0333".to_vec();
        let want: Vec<_> =
            model.range(lo.clone()..hi.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(c.scan(&lo, &hi, u32::MAX).await.unwrap(), want);
        // Proofs: present keys and absent ones, in several ranges.
        for i in [0u32, 1, 150, 151, 398, 399, 1000] {
            let key = format!("k{i:04}").into_bytes();
            let proven = c.prove(&key).await.unwrap();
            assert_eq!(proven.value, model.get(&key).cloned(), "key {i}");
        }
        cluster.shutdown().await;
    });
}
