use bavl_core::Tree;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::time::Instant;
fn main() {
    let cap: u32 = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(64);
    let n = 1_000_000;
    let mut rng = SmallRng::seed_from_u64(1);
    let keys: Vec<[u8; 20]> = (0..n).map(|_| rng.gen()).collect();
    let val = [7u8; 100];
    let mut t: Tree = Tree::with_capacity(cap).unwrap();
    let s = Instant::now();
    for k in &keys {
        t.insert(k, &val).unwrap();
    }
    t.root_hash();
    println!(
        "bulk {:.0} ops/s, eff {:.3}",
        n as f64 / s.elapsed().as_secs_f64(),
        t.stats().space_efficiency()
    );
    let blocks = 20;
    let mut ops = Vec::new();
    for _ in 0..blocks * 10_000 {
        if rng.gen_bool(0.5) {
            ops.push(rng.gen::<[u8; 20]>())
        } else {
            ops.push(keys[rng.gen_range(0..n)])
        }
    }
    let s = Instant::now();
    let mut snaps = 0;
    for b in 0..blocks {
        for k in &ops[b * 10_000..(b + 1) * 10_000] {
            t.insert(k, &val).unwrap();
        }
        let sn = t.snapshot();
        snaps += sn.len();
    }
    println!("update {:.0} ops/s ({snaps})", (blocks * 10_000) as f64 / s.elapsed().as_secs_f64());
    let s = Instant::now();
    let mut found = 0;
    for k in keys.iter().take(500_000) {
        if t.get(k).is_some() {
            found += 1
        }
    }
    println!("get {:.0} ops/s {found}", 500_000f64 / s.elapsed().as_secs_f64());
}
