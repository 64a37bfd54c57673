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

    /// Directory: forgets node `id`, which then receives nothing and is weighed nowhere.
    /// Refused unless it is registered and draining, is no voter or learner of the
    /// directory and no range's descriptor names it (its drain finished: the rebalancer
    /// moves the directory's replicas off draining nodes too, see `plan`). A replica the node still holds that no descriptor names (a move to it
    /// under way when it was drained, not yet reported) is moved away by the rebalancer
    /// once reported: a node the list does not hold counts as leaving (`plan`).
    pub(crate) fn remove_node(&mut self, id: NodeId) -> Response {
        let Some(info) = self.node(id) else {
            return Response::Refused(format!("node {id} is not registered"));
        };
        if !info.draining {
            return Response::Refused(format!("node {id} is not draining: drain it first"));
        }
        if self.desc.replicas.contains(&id) || self.desc.learners.contains(&id) {
            return Response::Refused(format!(
                "node {id} still holds a replica of the directory: its drain has not finished"
            ));
        }
        let named: Vec<_> = self
            .descriptors()
            .into_iter()
            .filter(|d| d.replicas.contains(&id) || d.learners.contains(&id))
            .map(|d| d.id)
            .collect();
        if !named.is_empty() {
            return Response::Refused(format!(
                "node {id} still holds replicas of groups {named:?}: its drain has not finished"
            ));
        }
        self.tree.remove(&node_key(id));
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
    use crate::types::{Command, RangeDesc, DIRECTORY_GROUP};

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
    fn only_a_drained_node_nothing_names_is_forgotten() {
        let mut d =
            RangeState::new(RangeDesc::whole(DIRECTORY_GROUP, [1, 2, 3].into()), 8).unwrap();
        let refused = |r: Response, why: &str| match r {
            Response::Refused(e) => assert!(e.contains(why), "{e}"),
            other => panic!("{other:?}, not refused for {why}"),
        };
        for id in [1, 2, 3, 4, 5] {
            d.add_node(&NodeInfo { id, addr: String::new(), draining: false });
        }
        refused(d.remove_node(9), "not registered");
        refused(d.remove_node(4), "not draining");
        d.drain(3);
        refused(d.remove_node(3), "directory");
        // A range on 4 and 5 (5 a learner): neither goes while named.
        let mut r = RangeDesc::whole(7, [1, 2, 4].into());
        r.learners = [5].into();
        r.epoch.conf_ver = 1;
        d.report(&[r.clone()]);
        d.drain(4);
        d.drain(5);
        refused(d.remove_node(4), "[7]");
        refused(d.remove_node(5), "[7]");
        // The drain done (the range reported without them): both are forgotten.
        r.replicas = [1, 2, 3].into();
        r.learners.clear();
        r.epoch.conf_ver = 4;
        d.report(&[r]);
        assert_eq!(d.remove_node(4), Response::Done);
        assert_eq!(d.remove_node(5), Response::Done);
        assert_eq!(d.nodes().iter().map(|n| n.id).collect::<Vec<_>>(), vec![1, 2, 3]);
        refused(d.remove_node(4), "not registered");
    }

    /// The new variants come last in their enums (docs/cluster.md section 3): the encodings
    /// of every older command and request are unchanged.
    #[test]
    fn removal_encodes_as_the_docs_say() {
        use crate::codec::encode;
        use crate::msg::ClientOp;
        assert_eq!(encode(&Command::RemoveNode { id: 5 }).unwrap(), [13, 5]);
        assert_eq!(encode(&ClientOp::RemoveNode(5)).unwrap(), [20, 5]);
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
