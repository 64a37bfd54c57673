//! The simulation's network: an in-process [`Transport`] with seeded loss, delay (hence
//! reordering), partitions, partitions between nodes only (clients still reach the node)
//! and crashed nodes.
//!
//! Guarantees: every fault decision is drawn from one seeded ChaCha generator; every message
//! and reply is encoded to JSON and decoded again, so the wire format is exercised. A message
//! to a crashed or isolated node is `Unreachable` at once (nothing was delivered); a lost
//! request or a lost reply is a `Timeout` after a pause, the reply case having taken effect.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::msg::{BoxFuture, Message, NetError, Reply, Transport};
use crate::node::Node;
use crate::types::NodeId;

/// Fault rates of the simulated network.
#[derive(Clone, Debug)]
pub struct Faults {
    /// Probability that a request, and separately its reply, is lost.
    pub loss: f64,
    /// Largest one-way delay, in milliseconds (uniform from 0).
    pub max_delay_ms: u64,
}

/// The simulated network.
pub struct SimNet {
    nodes: Mutex<HashMap<NodeId, Arc<Node>>>,
    isolated: Mutex<HashSet<NodeId>>,
    /// Nodes whose Raft messages are cut (client requests still pass).
    peer_cut: Mutex<HashSet<NodeId>>,
    rng: Mutex<ChaCha8Rng>,
    faults: Mutex<Faults>,
    pub messages: AtomicU64,
    pub lost: AtomicU64,
}

impl SimNet {
    pub fn new(seed: u64, faults: Faults) -> Arc<Self> {
        Arc::new(SimNet {
            nodes: Mutex::default(),
            isolated: Mutex::default(),
            peer_cut: Mutex::default(),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            faults: Mutex::new(faults),
            messages: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        })
    }

    pub fn attach(&self, node: Arc<Node>) {
        self.nodes.lock().expect("not poisoned").insert(node.id, node);
    }

    /// Takes a node off the network (before shutting it down: a crash).
    pub fn detach(&self, id: NodeId) -> Option<Arc<Node>> {
        self.nodes.lock().expect("not poisoned").remove(&id)
    }

    pub fn node(&self, id: NodeId) -> Option<Arc<Node>> {
        self.nodes.lock().expect("not poisoned").get(&id).cloned()
    }

    pub fn live(&self) -> Vec<Arc<Node>> {
        let mut v: Vec<_> = self.nodes.lock().expect("not poisoned").values().cloned().collect();
        v.sort_by_key(|n| n.id);
        v
    }

    /// Cuts `id` off from every other node and client (or heals it).
    pub fn isolate(&self, id: NodeId, cut: bool) {
        mark(&self.isolated, id, cut);
    }

    /// Cuts `id`'s Raft messages to and from every other node (or heals them), leaving
    /// client requests through: a leader so cut keeps answering the clients that reach it,
    /// which is what a leader lease must make safe.
    pub fn cut_from_peers(&self, id: NodeId, cut: bool) {
        mark(&self.peer_cut, id, cut);
    }

    pub fn set_faults(&self, f: Faults) {
        *self.faults.lock().expect("not poisoned") = f;
    }

    /// A draw from the seeded generator, for the simulation's own choices.
    pub fn draw<T>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
        f(&mut self.rng.lock().expect("not poisoned"))
    }

    fn plan(&self) -> (bool, bool, Duration, Duration) {
        let f = self.faults.lock().expect("not poisoned").clone();
        self.draw(|r| {
            let d = |r: &mut ChaCha8Rng| Duration::from_millis(r.gen_range(0..=f.max_delay_ms));
            (r.gen_bool(f.loss), r.gen_bool(f.loss), d(r), d(r))
        })
    }

    async fn deliver(&self, from: NodeId, to: NodeId, msg: Message) -> Result<Reply, NetError> {
        self.messages.fetch_add(1, Ordering::Relaxed);
        let cut = |a: NodeId| self.isolated.lock().expect("not poisoned").contains(&a);
        if cut(from) || cut(to) {
            return Err(NetError::Unreachable(to));
        }
        let peer_cut = |a: NodeId| self.peer_cut.lock().expect("not poisoned").contains(&a);
        if matches!(msg, Message::Raft { .. }) && (peer_cut(from) || peer_cut(to)) {
            return Err(NetError::Unreachable(to));
        }
        let Some(node) = self.node(to) else { return Err(NetError::Unreachable(to)) };
        let (lose_req, lose_reply, there, back) = self.plan();
        let bytes = crate::codec::encode(&msg).expect("messages encode");
        tokio::time::sleep(there).await;
        if lose_req {
            self.lost.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Err(NetError::Timeout(to));
        }
        let msg: Message = crate::codec::decode(&bytes).expect("what was encoded decodes");
        let reply = node.handle(msg).await;
        let bytes = crate::codec::encode(&reply).expect("replies encode");
        tokio::time::sleep(back).await;
        if lose_reply || cut(to) || self.node(to).is_none() {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return Err(NetError::Timeout(to));
        }
        Ok(crate::codec::decode(&bytes).expect("what was encoded decodes"))
    }
}

/// Adds `id` to `set` (`cut`) or takes it out.
fn mark(set: &Mutex<HashSet<NodeId>>, id: NodeId, cut: bool) {
    let mut set = set.lock().expect("not poisoned");
    if cut {
        set.insert(id);
    } else {
        set.remove(&id);
    }
}

impl Transport for SimNet {
    fn send(
        &self,
        from: NodeId,
        to: NodeId,
        msg: Message,
    ) -> BoxFuture<'_, Result<Reply, NetError>> {
        Box::pin(self.deliver(from, to, msg))
    }
}
