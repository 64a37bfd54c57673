//! Today's stores beside bavl on Workload B (issue 5; work in progress).
#![forbid(unsafe_code)]
