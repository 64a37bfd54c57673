//! A test facility: the ways a lying snapshot server answers (`bavl-abci serve
//! --byzantine KIND`). Never enable it outside tests: the node then serves peers state
//! that a correct restorer must reject.
//!
//! - `wrong-bytes`: each bundle with one byte flipped in its middle;
//! - `other-height`: bundle `i` of another retained snapshot (of the next bundle of the
//!   same one when only one is retained);
//! - `truncated`: each bundle cut to half its length;
//! - `forged`: advertises, instead of the honest snapshots, snapshots of a different state
//!   (the true one plus a key) one height after each snapshot height, so a joiner (which
//!   tries the newest first) is offered a forgery first; their metadata, hash and chunks
//!   are all consistent with each other, only their root is not the chain's app hash.
//! - `forged-many`: the same at each of the [`FORGERIES`] heights after each snapshot
//!   height, so a joiner is offered that many forgeries, newest first, before the honest
//!   snapshot (CometBFT lists up to 10 snapshots per peer). A restorer that can only check
//!   a snapshot after downloading all of it downloads every forgery first.

use std::fmt;
use std::str::FromStr;

/// One way of lying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lie {
    WrongBytes,
    OtherHeight,
    Truncated,
    Forged,
    ForgedMany,
}

/// How many forgeries `forged-many` advertises after each snapshot height.
pub const FORGERIES: u64 = 4;

impl Lie {
    pub const ALL: [Lie; 5] =
        [Lie::WrongBytes, Lie::OtherHeight, Lie::Truncated, Lie::Forged, Lie::ForgedMany];

    /// The heights after a snapshot height at which this liar takes its (forged)
    /// snapshots: 0 for the honest heights.
    pub fn snapshot_offsets(lie: Option<Lie>) -> std::ops::RangeInclusive<u64> {
        match lie {
            Some(Lie::Forged) => 1..=1,
            Some(Lie::ForgedMany) => 1..=FORGERIES,
            _ => 0..=0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Lie::WrongBytes => "wrong-bytes",
            Lie::OtherHeight => "other-height",
            Lie::Truncated => "truncated",
            Lie::Forged => "forged",
            Lie::ForgedMany => "forged-many",
        }
    }
}

impl fmt::Display for Lie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Lie {
    type Err = String;
    fn from_str(s: &str) -> Result<Lie, String> {
        Lie::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            let names: Vec<_> = Lie::ALL.iter().map(|l| l.name()).collect();
            format!("unknown lie {s:?}: one of {}", names.join(", "))
        })
    }
}

/// The key the `forged` snapshot adds to the honest state.
pub const FORGED_KEY: &[u8] = b"\xffbavl-abci forged snapshot";

/// Alters an honest bundle the way `lie` says; `other` is the bundle a lie about another
/// height or index serves instead, if there is one.
pub fn corrupt(lie: Lie, mut honest: Vec<u8>, other: Option<Vec<u8>>) -> Vec<u8> {
    match lie {
        Lie::WrongBytes => {
            let mid = honest.len() / 2;
            if let Some(b) = honest.get_mut(mid) {
                *b ^= 0x40;
            }
            honest
        }
        Lie::OtherHeight => match other {
            Some(o) if o != honest => o,
            _ => corrupt(Lie::WrongBytes, honest, None),
        },
        Lie::Truncated => {
            honest.truncate(honest.len() / 2);
            honest
        }
        // The forged snapshot's bundles are served as they are.
        Lie::Forged | Lie::ForgedMany => honest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_every_chunk_lie_changes_the_bytes() {
        for lie in Lie::ALL {
            assert_eq!(lie.name().parse::<Lie>().unwrap(), lie);
        }
        assert!("honest".parse::<Lie>().is_err());
        let honest = vec![1u8, 2, 3, 4, 5, 6];
        for lie in [Lie::WrongBytes, Lie::OtherHeight, Lie::Truncated] {
            assert_ne!(corrupt(lie, honest.clone(), None), honest, "{lie}");
        }
        assert_eq!(corrupt(Lie::OtherHeight, honest.clone(), Some(vec![9])), vec![9]);
    }
}
