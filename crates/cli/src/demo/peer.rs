//! In-process peers for the demo: honest ones export chunks of the source snapshot, liars
//! each have one way of lying.
//!
//! A peer is an object that answers `fetch(index) -> bytes`; the syncing side trusts none
//! of them and verifies every answer against the root hash alone.

use anyhow::{ensure, Result};
use bavl_core::Snapshot;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::Serialize;

/// What a peer does when asked for chunk `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// Returns the exported chunk `i` of the source snapshot.
    Honest,
    /// Returns chunk `i` with one byte flipped.
    WrongBytes,
    /// Returns chunk `i + 1` (wrapping) instead of chunk `i`.
    WrongIndex,
    /// Returns chunk `i` of another version of the state (a later snapshot).
    OtherVersion,
    /// Returns chunk `i` cut short.
    Truncated,
}

impl Behaviour {
    /// The lies, in the order they are handed out to liars.
    pub const LIES: [Behaviour; 4] = [
        Behaviour::WrongBytes,
        Behaviour::WrongIndex,
        Behaviour::OtherVersion,
        Behaviour::Truncated,
    ];

    /// A short label for reports.
    pub fn label(self) -> &'static str {
        match self {
            Behaviour::Honest => "honest",
            Behaviour::WrongBytes => "wrong bytes",
            Behaviour::WrongIndex => "wrong index",
            Behaviour::OtherVersion => "other version",
            Behaviour::Truncated => "truncated",
        }
    }
}

/// Something that serves chunks by index.
pub trait Peer: Send + Sync {
    /// The bytes this peer claims are chunk `index` of the state.
    fn fetch(&self, index: u64) -> Vec<u8>;
    /// How this peer behaves (known to the report, never to the syncing side).
    fn behaviour(&self) -> Behaviour;
}

/// Serves the source snapshot faithfully.
pub struct Honest {
    snap: Snapshot,
}

impl Peer for Honest {
    fn fetch(&self, index: u64) -> Vec<u8> {
        self.snap.export_chunk(index).unwrap_or_default()
    }
    fn behaviour(&self) -> Behaviour {
        Behaviour::Honest
    }
}

/// Serves something else than what was asked for, in one fixed way.
pub struct Liar {
    behaviour: Behaviour,
    snap: Snapshot,
    /// A later version of the state, for [`Behaviour::OtherVersion`].
    other: Snapshot,
}

impl Liar {
    fn lie(&self, index: u64) -> Vec<u8> {
        let truth = || self.snap.export_chunk(index).unwrap_or_default();
        match self.behaviour {
            Behaviour::Honest => truth(),
            Behaviour::WrongBytes => {
                let mut bytes = truth();
                if !bytes.is_empty() {
                    // A position that varies with the index, so the lies hit different fields.
                    let at = ((index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize
                        % bytes.len();
                    bytes[at] ^= 0x20;
                }
                bytes
            }
            Behaviour::WrongIndex => {
                let next = (index + 1) % self.snap.chunk_count().max(1);
                self.snap.export_chunk(next).unwrap_or_default()
            }
            Behaviour::OtherVersion => self.other.export_chunk(index).unwrap_or_default(),
            Behaviour::Truncated => {
                let mut bytes = truth();
                bytes.truncate(bytes.len() * 2 / 3);
                bytes
            }
        }
    }
}

impl Peer for Liar {
    fn fetch(&self, index: u64) -> Vec<u8> {
        self.lie(index)
    }
    fn behaviour(&self) -> Behaviour {
        self.behaviour
    }
}

/// `peers` peers of which `liars` lie, at positions drawn from `rng`; liar behaviours
/// cycle through [`Behaviour::LIES`]. Fails if a liar's answer for the first or the last
/// chunk equals the truth (a lie that proves nothing).
pub fn make_peers(
    snap: &Snapshot,
    other: &Snapshot,
    peers: usize,
    liars: usize,
    rng: &mut impl Rng,
) -> Result<Vec<Box<dyn Peer>>> {
    let mut positions: Vec<usize> = (0..peers).collect();
    positions.shuffle(rng);
    let mut out: Vec<Option<Box<dyn Peer>>> = (0..peers).map(|_| None).collect();
    for (k, &p) in positions.iter().enumerate() {
        out[p] = Some(if k < liars {
            Box::new(Liar {
                behaviour: Behaviour::LIES[k % Behaviour::LIES.len()],
                snap: snap.clone(),
                other: other.clone(),
            })
        } else {
            Box::new(Honest { snap: snap.clone() })
        });
    }
    let out: Vec<Box<dyn Peer>> = out.into_iter().flatten().collect();
    let last = snap.chunk_count().saturating_sub(1);
    for p in out.iter().filter(|p| p.behaviour() != Behaviour::Honest) {
        for i in [0, last] {
            let lie = p.fetch(i);
            ensure!(
                snap.export_chunk(i) != Some(lie),
                "a {} lie equals chunk {i}",
                p.behaviour().label()
            );
        }
    }
    Ok(out)
}
