//! State sync from many untrusted sources (issue 4; work in progress).
#![forbid(unsafe_code)]
