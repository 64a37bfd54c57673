//! `Tree::for_each_chunk_from`, the walk an eviction sweep picks its chunks with: from
//! any start it visits exactly the chunks a whole walk visits from that index on, in
//! order, resident and absent alike, and stops where its callback breaks.

use std::ops::ControlFlow;

use bavl_core::Tree;

/// A tree of many small chunks, every third one absent.
fn tree() -> Tree {
    let mut tree = Tree::with_capacity(8).unwrap();
    for k in 0..2000u32 {
        let key = format!("key{:05}", k * 7919 % 2000);
        tree.insert(key.as_bytes(), &k.to_le_bytes()).unwrap();
    }
    tree.root_hash();
    let snap = tree.snapshot();
    snap.for_each_chunk(|c| {
        c.set_location(c.index + 1);
    });
    for i in (0..tree.chunk_count()).step_by(3) {
        assert!(tree.page_out(i).is_some(), "chunk {i} is clean");
    }
    tree
}

/// What a walk shows of a chunk: index, first key, whether resident.
type Seen = (u64, Vec<u8>, bool);

#[test]
fn a_walk_from_any_start_is_the_tail_of_the_whole_walk() {
    let mut tree = tree();
    let n = tree.chunk_count();
    assert!(n > 100, "{n} chunks");
    let mut whole: Vec<Seen> = Vec::new();
    tree.snapshot().for_each_chunk(|c| {
        whole.push((c.index, c.first_key().to_vec(), c.body_id().is_some()));
    });
    assert!(whole.iter().any(|s| s.2) && whole.iter().any(|s| !s.2));
    for start in 0..n + 2 {
        let mut seen: Vec<Seen> = Vec::new();
        tree.for_each_chunk_from(start, |c| {
            seen.push((c.index, c.first_key().to_vec(), c.body_id().is_some()));
            ControlFlow::Continue(())
        });
        let tail = &whole[(start as usize).min(whole.len())..];
        assert_eq!(seen, tail, "start {start}");
    }
}

#[test]
fn a_walk_stops_where_its_callback_breaks() {
    let tree = tree();
    for (start, take) in [(0, 1), (5, 3), (40, 17), (tree.chunk_count() - 2, 5)] {
        let mut seen = Vec::new();
        tree.for_each_chunk_from(start, |c| {
            seen.push(c.index);
            if seen.len() == take {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        let end = (start + take as u64).min(tree.chunk_count());
        assert_eq!(seen, (start..end).collect::<Vec<_>>(), "start {start}");
    }
}
