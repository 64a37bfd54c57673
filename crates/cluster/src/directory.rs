//! The directory's node list, and how a group's descriptor follows its Raft membership.
//!
//! Guarantees: both are deterministic functions of the log, so every replica holds the same
//! node list and the same descriptor at the same applied index. The node list lives in the
//! directory's bavl tree under the prefix [`DIR_NODE_PREFIX`] (then the node id, 8 bytes big
//! endian), each value the JSON of a [`NodeInfo`]; the descriptors live under `r` (see
//! [`crate::range`]). A membership entry that changes a group's voters or learners bumps
//! the descriptor's `conf_ver` (TiKV's rule: one bump per configuration change). The
//! descriptor's voters are those of every half of a joint configuration, so a move bumps
//! `conf_ver` three times: the learner added, the joint configuration that makes it a voter
//! (its uniform successor changes nothing), the uniform configuration without the old
//! voter (its joint predecessor changes nothing).

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::range::RangeState;
use crate::types::{NodeId, NodeInfo, Response};

/// Key prefix of the node list in the directory's tree.
pub const DIR_NODE_PREFIX: &[u8] = b"n";

fn node_key(id: NodeId) -> Vec<u8> {
    [DIR_NODE_PREFIX, &id.to_be_bytes()].concat()
}

impl RangeState {
    /// Directory: registers `node` (a known node keeps its draining flag unless re-added,
    /// which clears it: adding a drained node back makes it a target again).
    pub(crate) fn add_node(&mut self, node: &NodeInfo) -> Response {
        if node.id == 0 {
            return Response::Refused("node id 0 is reserved".into());
        }
        let info = NodeInfo { draining: false, ..node.clone() };
        let value = serde_json::to_vec(&info).expect("node info serializes");
        self.tree.insert(&node_key(node.id), &value).expect("node info fits");
        Response::Done
    }

    /// Directory: marks node `id` as draining; refused for an unknown node.
    pub(crate) fn drain(&mut self, id: NodeId) -> Response {
        let Some(mut info) = self.node(id) else {
            return Response::Refused(format!("node {id} is not registered"));
        };
        info.draining = true;
        let value = serde_json::to_vec(&info).expect("node info serializes");
        self.tree.insert(&node_key(id), &value).expect("node info fits");
        Response::Done
    }

    /// Directory: one registered node.
    pub fn node(&self, id: NodeId) -> Option<NodeInfo> {
        let value = self.tree.get(&node_key(id)).expect("the directory's tree is resident")?;
        serde_json::from_slice(value).ok()
    }

    /// Directory: every registered node, by id.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.tree
            .range(Bound::Included(DIR_NODE_PREFIX), Bound::Unbounded)
            .expect("the directory's tree is resident")
            .take_while(|(k, _)| k.starts_with(DIR_NODE_PREFIX))
            .filter_map(|(_, v)| serde_json::from_slice(v).ok())
            .collect()
    }

    /// Follows an applied membership entry: the descriptor's voters and learners become the
    /// configuration's, and `conf_ver` is bumped if either changed.
    pub fn set_membership(&mut self, voters: BTreeSet<NodeId>, learners: BTreeSet<NodeId>) {
        if voters == self.desc.replicas && learners == self.desc.learners {
            return;
        }
        self.desc.replicas = voters;
        self.desc.learners = learners;
        self.desc.epoch.conf_ver += 1;
    }
}

/// The voters (of every half of a joint configuration) and the learners of a membership.
pub fn members(m: &openraft::Membership<NodeId, openraft::BasicNode>) -> [BTreeSet<NodeId>; 2] {
    let voters: BTreeSet<NodeId> = m.voter_ids().collect();
    let learners: BTreeSet<NodeId> = m.learner_ids().collect();
    [voters, learners]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{RangeDesc, DIRECTORY_GROUP};

    #[test]
    fn nodes_are_registered_drained_and_listed_in_order() {
        let mut d = RangeState::new(RangeDesc::whole(DIRECTORY_GROUP, BTreeSet::new()), 8).unwrap();
        let info = |id, draining| NodeInfo { id, addr: format!("a{id}"), draining };
        assert!(matches!(d.drain(4), Response::Refused(_)));
        for id in [300, 2, 1] {
            assert_eq!(d.add_node(&info(id, true)), Response::Done);
        }
        assert!(matches!(d.add_node(&info(0, false)), Response::Refused(_)));
        assert_eq!(d.drain(2), Response::Done);
        assert_eq!(d.nodes(), vec![info(1, false), info(2, true), info(300, false)]);
        // The node list does not leak into the descriptors or lookups.
        assert!(d.descriptors().is_empty());
        assert_eq!(d.lookup(b"n"), None);
    }

    #[test]
    fn conf_ver_is_bumped_only_by_a_change() {
        let mut r = RangeState::new(RangeDesc::whole(1, [1, 2, 3].into()), 8).unwrap();
        r.set_membership([1, 2, 3].into(), BTreeSet::new());
        assert_eq!(r.desc.epoch.conf_ver, 0);
        r.set_membership([1, 2, 3].into(), [4].into());
        r.set_membership([1, 2, 3, 4].into(), BTreeSet::new());
        assert_eq!(r.desc.epoch.conf_ver, 2);
        assert_eq!(r.desc.epoch.version, 0);
        assert_eq!(r.desc.replicas, [1, 2, 3, 4].into());
    }
}
