//! The harness's command line: its help texts and argument errors.

use std::process::Output;

use crate::common::harness;

fn run(args: &[&str]) -> Output {
    std::process::Command::new(harness()).args(args).output().expect("run bavl-harness")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_lists_every_subcommand() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for sub in ["demo", "crashtest", "loadtest", "vectors", "serve-liar"] {
        assert!(text.contains(&format!("  {sub} ")), "--help lacks {sub}:\n{text}");
    }
}

#[test]
fn demo_help_shows_every_default() {
    let out = run(&["demo", "--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for default in [
        "[default: 1000000]",
        "[default: 64]",
        "[default: 1]",
        "[default: 10]",
        "[default: 4]",
        "[default: 2]",
    ] {
        assert!(text.contains(default), "demo --help lacks {default}:\n{text}");
    }
}

#[test]
fn other_helps_succeed() {
    for sub in ["vectors", "serve-liar"] {
        let out = run(&[sub, "--help"]);
        assert!(out.status.success(), "{sub} --help failed");
    }
    assert!(stdout(&run(&["vectors", "--help"])).contains("[default: docs/vectors/core.json]"));
    // serve-liar takes every argument of `bavl serve`.
    let text = stdout(&run(&["serve-liar", "--help"]));
    for flag in ["--byzantine <KIND>", "--db <PATH>", "--dir <DIR>", "--listen <ADDR>", "--keep"] {
        assert!(text.contains(flag), "serve-liar --help lacks {flag}:\n{text}");
    }
}

#[test]
fn bad_arguments_are_refused() {
    assert!(!run(&["demo", "--capacity", "3"]).status.success());
    assert!(!run(&["demo", "--liars", "11"]).status.success());
    assert!(!run(&["serve-liar", "--dir", "/nonexistent"]).status.success(), "no --byzantine");
    let out = run(&["serve-liar", "--byzantine", "honest", "--dir", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrong-bytes"), "kinds listed");
}
