//! The syncer on a simulated network: Byzantine sources, scheduling, memory, resume.

mod byzantine;
mod crowds;
mod scheduling;
mod sim;
