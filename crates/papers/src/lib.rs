//! The papers' structures behind one trait with bavl (issue 5; work in progress).
#![forbid(unsafe_code)]
