//! State sync over a real network of namespaced hosts: the Cosmos/IAVL-style
//! baseline ([`baseline`], served and fetched over HTTP by [`http`]), the state both sides
//! serve ([`state`]), and the experiment runner that drives `bavl serve` / `bavl sync` and
//! the baseline in `scripts/netlab.sh` namespaces ([`runner`], [`plot`]), and the delay
//! proxy that gives the lab its latency ([`delay`]). Beside them, on loopback, the
//! adversarial benchmark ([`adversarial`]: one honest server beside a crowd of
//! lying ones, [`crowd`], the `bavl sync` client measured as a child, [`child`]).
#![forbid(unsafe_code)]

pub mod adversarial;
pub mod baseline;
pub mod child;
pub mod crowd;
pub mod delay;
pub mod http;
pub mod plot;
pub mod runner;
pub mod state;
