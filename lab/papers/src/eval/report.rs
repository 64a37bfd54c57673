//! Writes the results: CSV files, the Markdown report with our Table III beside the
//! paper's, and `papers.json`.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use bavl_labkit::stats::{mean_std, percentile_sorted};
use bavl_labkit::Machine;
use serde_json::json;

use super::{Options, Results};
use crate::{AuthStructure, AvlPlus, AvlStar, Bavl, MerkleBTree};

/// The four structures in the paper's column order.
pub const ORDER: [&str; 4] = [AvlPlus::NAME, AvlStar::NAME, MerkleBTree::NAME, Bavl::NAME];
/// JSON field names, same order.
const FIELDS: [&str; 4] = ["baseline", "avl_star", "merkle_btree", "bavl"];

/// The paper's Table III (standalone rows), normalised to the baseline.
const PAPER: [(&str, &str, [f64; 4]); 8] = [
    ("Search", "Small tree", [1.0, 2.86, 1.95, 1.68]),
    ("Search", "Large tree", [1.0, 1.04, 0.76, 0.32]),
    ("Insert", "Small tree", [1.0, 1.10, 1.64, 2.05]),
    ("Insert", "Large tree", [1.0, 0.86, 0.83, 0.89]),
    ("Proof size", "Small chunk", [1.0, 1.0, 2.85, 0.99]),
    ("Proof size", "Large chunk", [1.0, 0.99, 192.20, 0.98]),
    ("Space efficiency", "Small chunk", [1.0, 1.58, 1.42, 1.42]),
    ("Space efficiency", "Large chunk", [1.0, 1.48, 1.40, 1.41]),
];

/// The paper's Table II: mean space efficiency at chunk sizes 16, 64, 256, 1024, 4096.
const PAPER_TABLE_II: [(&str, [f64; 5]); 3] = [
    ("AVL*", [1.58, 1.56, 1.50, 1.51, 1.48]),
    ("Merkle B+tree", [1.42, 1.43, 1.43, 1.41, 1.40]),
    ("B+AVL (bavl)", [1.42, 1.44, 1.44, 1.43, 1.41]),
];

/// The closing section: the discussion is written by hand for the committed run.
const DISCUSSION: &str = "## Where our figures differ from the paper's, and why\n\n\
    See [`discussion.md`](discussion.md), written for the committed full run (if this \
    report comes from another run, check its figures against the ones quoted there).\n";

/// Mean time (insert, search) of `structure` at `n` elements.
fn perf_mean(r: &Results, structure: &str, n: usize) -> (f64, f64, f64, f64) {
    let s: Vec<_> = r.perf.iter().filter(|p| p.structure == structure && p.elements == n).collect();
    let (im, is) = mean_std(&s.iter().map(|p| p.insert_s).collect::<Vec<_>>());
    let (sm, ss) = mean_std(&s.iter().map(|p| p.search_s).collect::<Vec<_>>());
    (im, is, sm, ss)
}

fn sweep<'a>(r: &'a Results, structure: &str, chunk: usize) -> &'a super::measure::SweepResult {
    r.sweeps.iter().find(|s| s.structure == structure && s.chunk == chunk).expect("measured")
}

fn mean_hashes(s: &super::measure::SweepResult) -> f64 {
    s.proof_hashes.iter().map(|&h| f64::from(h)).sum::<f64>() / s.proof_hashes.len().max(1) as f64
}

/// Our Table III, normalised to the baseline, in `PAPER`'s row order.
fn table_iii(o: &Options, r: &Results) -> Vec<[f64; 4]> {
    let (small, large) = (o.sizes[0], *o.sizes.last().expect("sizes"));
    let (c_small, c_large) = (o.chunks[0], *o.chunks.last().expect("chunks"));
    let time = |n: usize, search: bool| {
        let v = ORDER.map(|s| {
            let (i, _, q, _) = perf_mean(r, s, n);
            if search {
                q
            } else {
                i
            }
        });
        v.map(|x| x / v[0])
    };
    let proof = |c: usize| {
        let v = ORDER.map(|s| mean_hashes(sweep(r, s, c)));
        v.map(|x| x / v[0])
    };
    let space = |c: usize| ORDER.map(|s| sweep(r, s, c).space_mean);
    vec![
        time(small, true),
        time(large, true),
        time(small, false),
        time(large, false),
        proof(c_small),
        proof(c_large),
        space(c_small),
        space(c_large),
    ]
}

fn write_csvs(dir: &Path, r: &Results) -> Result<()> {
    let mut perf = String::from("structure,elements,chunk,rep,insert_s,search_s\n");
    for p in &r.perf {
        let (s, n, c, rep) = (p.structure, p.elements, p.chunk, p.rep);
        writeln!(perf, "{s},{n},{c},{rep},{:.6},{:.6}", p.insert_s, p.search_s)?;
    }
    fs::write(dir.join("perf.csv"), perf)?;
    let mut proof = String::from(
        "structure,chunk,elements,proofs,min,p25,median,p75,max,mean_hashes,mean_bytes\n",
    );
    let mut hist = String::from("structure,chunk,hashes,proofs\n");
    let mut space =
        String::from("structure,chunk,elements,space_mean,space_std,space_final,chunks\n");
    let mut series = String::from("structure,chunk,elements,space_efficiency\n");
    for s in &r.sweeps {
        let mut h = s.proof_hashes.clone();
        h.sort_unstable();
        let q = |x: f64| percentile_sorted(&h, 100.0 * x);
        let mb = s.proof_bytes.iter().map(|&b| f64::from(b)).sum::<f64>() / h.len().max(1) as f64;
        writeln!(
            proof,
            "{},{},{},{},{},{},{},{},{},{:.3},{:.1}",
            s.structure,
            s.chunk,
            s.elements,
            h.len(),
            q(0.0),
            q(0.25),
            q(0.5),
            q(0.75),
            q(1.0),
            mean_hashes(s),
            mb
        )?;
        let mut i = 0;
        while i < h.len() {
            let j = h.partition_point(|&x| x <= h[i]);
            writeln!(hist, "{},{},{},{}", s.structure, s.chunk, h[i], j - i)?;
            i = j;
        }
        let (n, c) = (s.elements, s.chunk);
        writeln!(
            space,
            "{},{c},{n},{:.4},{:.4},{:.4},{}",
            s.structure, s.space_mean, s.space_std, s.space_final, s.chunks_final
        )?;
        for (k, e) in &s.series {
            writeln!(series, "{},{c},{k},{e:.4}", s.structure)?;
        }
    }
    fs::write(dir.join("proof-size.csv"), proof)?;
    fs::write(dir.join("proof-histogram.csv"), hist)?;
    fs::write(dir.join("space.csv"), space)?;
    fs::write(dir.join("space-series.csv"), series)?;
    Ok(())
}

fn human_n(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}K", n / 1_000)
    } else {
        n.to_string()
    }
}

fn markdown(o: &Options, r: &Results, t3: &[[f64; 4]], m: &Machine) -> Result<String> {
    let mut s = String::new();
    let (small, large) = (human_n(o.sizes[0]), human_n(*o.sizes.last().expect("sizes")));
    let (c_small, c_large) = (o.chunks[0], *o.chunks.last().expect("chunks"));
    writeln!(s, "# The B+AVL paper's evaluation, reproduced\n")?;
    writeln!(
        s,
        "Written by `{}` in {:.0} s{} on {} ({} cores, {} GiB), {}, commit `{}`{}, {}; load \
         average at the end {}.\n",
        o.command,
        r.seconds,
        if o.quick { " (**quick mode: small trees, not the paper's sizes**)" } else { "" },
        m.cpu,
        m.nproc,
        m.mem_total_gib,
        m.rustc,
        m.short_commit(12),
        if m.git_dirty { " (uncommitted changes)" } else { "" },
        m.date,
        m.load_avg_end
    )?;
    writeln!(
        s,
        "Workload (section V of `b-plus-avl-trees.txt`): elements of 512 bytes (4-byte distinct \
         pseudo-random keys, {}-byte values), inserted in the same order into every structure; \
         insert and search at chunk size {} on trees of {} elements (insert: every element, \
         the root hash computed every {} inserts and at the end; search: 10% of the keys in \
         random order); proof sizes and space efficiency on {} elements at chunk sizes {}. \
         Proof size is the paper's unit, the number of hashes a proof carries ({} sampled keys \
         per structure and chunk size, 200 of them also verified). Space efficiency is chunks \
         over `ceil(elements / chunk size)`, averaged over {} points during insertion (the \
         paper's Table II). Times are means over {} runs per size, the structures taking turns \
         in a rotating order within each run, on one pinned core.\n",
        super::measure::VALUE_LEN,
        o.perf_chunk,
        o.sizes.iter().map(|&n| human_n(n)).collect::<Vec<_>>().join(", "),
        o.commit_every,
        human_n(o.sweep_elements),
        o.chunks.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "),
        o.proof_sample.min(o.sweep_elements),
        o.space_samples,
        o.sizes.iter().map(|&n| format!("{}", o.reps(n))).collect::<Vec<_>>().join("/"),
    )?;
    writeln!(s, "## Table III (standalone rows), normalised to the baseline: paper / ours\n")?;
    writeln!(s, "Smaller is better. Small tree = {small}, large tree = {large} elements; small chunk = {c_small}, large chunk = {c_large}.\n")?;
    writeln!(s, "| metric | case | Baseline (AVL+) | AVL* | Merkle B+tree | B+AVL (bavl) |")?;
    writeln!(s, "|---|---|---|---|---|---|")?;
    for ((metric, case, paper), ours) in PAPER.iter().zip(t3) {
        let cells: Vec<String> =
            (0..4).map(|i| format!("{} / **{}**", fmt(paper[i]), fmt(ours[i]))).collect();
        writeln!(s, "| {metric} | {case} | {} |", cells.join(" | "))?;
    }
    writeln!(s, "\n## Insert and search times (chunk size {})\n", o.perf_chunk)?;
    writeln!(s, "Mean ± standard deviation over the runs, milliseconds.\n")?;
    writeln!(s, "| elements | runs | operation | {} |", ORDER.join(" | "))?;
    writeln!(s, "|---|---|---|---|---|---|---|")?;
    for &n in &o.sizes {
        for (op, search) in [("insert all", false), ("search 10%", true)] {
            let cells: Vec<String> = ORDER
                .iter()
                .map(|st| {
                    let (im, is, sm, ss) = perf_mean(r, st, n);
                    let (mu, sd) = if search { (sm, ss) } else { (im, is) };
                    format!("{:.2} ± {:.2}", mu * 1e3, sd * 1e3)
                })
                .collect();
            writeln!(s, "| {} | {} | {op} | {} |", human_n(n), o.reps(n), cells.join(" | "))?;
        }
    }
    writeln!(
        s,
        "\n## Proof sizes ({} elements): hashes per proof, median [min..max] (mean bytes)\n",
        human_n(o.sweep_elements)
    )?;
    writeln!(s, "| chunk | {} |", ORDER.join(" | "))?;
    writeln!(s, "|---|---|---|---|---|")?;
    for &c in &o.chunks {
        let cells: Vec<String> = ORDER
            .iter()
            .map(|st| {
                let sw = sweep(r, st, c);
                let mut h = sw.proof_hashes.clone();
                h.sort_unstable();
                let mb = sw.proof_bytes.iter().map(|&b| f64::from(b)).sum::<f64>()
                    / h.len().max(1) as f64;
                format!(
                    "{} [{}..{}] ({:.0} B)",
                    percentile_sorted(&h, 50.0),
                    h[0],
                    h[h.len() - 1],
                    mb
                )
            })
            .collect();
        writeln!(s, "| {c} | {} |", cells.join(" | "))?;
    }
    writeln!(s, "\n## Table II: mean (± std) space efficiency during insertion: paper / ours\n")?;
    writeln!(
        s,
        "| structure | {} |",
        o.chunks.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" | ")
    )?;
    writeln!(s, "|---|{}", "---|".repeat(o.chunks.len()))?;
    for (name, paper) in PAPER_TABLE_II {
        let cells: Vec<String> = o
            .chunks
            .iter()
            .map(|&c| {
                let sw = sweep(r, name, c);
                let p = [16, 64, 256, 1024, 4096].iter().position(|&x| x == c).map(|i| paper[i]);
                let p = p.map_or("—".into(), |v| format!("{v:.2}"));
                format!("{p} / **{:.2} (± {:.2})**", sw.space_mean, sw.space_std)
            })
            .collect();
        writeln!(s, "| {name} | {} |", cells.join(" | "))?;
    }
    writeln!(s, "\nAVL* splits made before rotations (paper, §3.7: \"around 4% of the total number of splits\"):\n")?;
    for (c, rot, all) in &r.avl_star_splits {
        let pct = 100.0 * *rot as f64 / (*all).max(1) as f64;
        writeln!(s, "- chunk {c}: {rot} of {all} splits ({pct:.1}%)")?;
    }
    writeln!(s, "\n## Plots\n")?;
    writeln!(s, "- `perf.png`: insert and search time against tree size (section V-B, Fig. 5)")?;
    writeln!(s, "- `proof-size.png`: proof-size distribution against chunk size, and the CDF at chunk 1024 (V-C, Fig. 6)")?;
    writeln!(s, "- `space.png`: space efficiency against chunk size and during insertion at the smallest and largest chunk (V-D, Fig. 7, Table II)")?;
    writeln!(s, "\nData: `perf.csv`, `proof-size.csv`, `proof-histogram.csv`, `space.csv`, `space-series.csv`; summary in `../papers.json`.\n")?;
    s.push_str(DISCUSSION);
    Ok(s)
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Writes every file of the report.
pub fn write(o: &Options, r: &Results) -> Result<()> {
    fs::create_dir_all(&o.out_dir).with_context(|| format!("{}", o.out_dir.display()))?;
    write_csvs(&o.out_dir, r)?;
    let m = Machine::at_end();
    let t3 = table_iii(o, r);
    fs::write(o.out_dir.join("README.md"), markdown(o, r, &t3, &m)?)?;
    let row = |v: &[f64; 4]| {
        let mut obj = serde_json::Map::new();
        for (f, x) in FIELDS.iter().zip(v) {
            obj.insert((*f).into(), json!((x * 1000.0).round() / 1000.0));
        }
        serde_json::Value::Object(obj)
    };
    let rows: Vec<_> = PAPER
        .iter()
        .zip(&t3)
        .map(|((metric, case, paper), ours)| {
            json!({"metric": metric, "case": case, "paper": row(paper), "ours": row(ours)})
        })
        .collect();
    let perf: Vec<_> = o
        .sizes
        .iter()
        .flat_map(|&n| {
            ORDER.iter().map(move |st| {
                let (im, is, sm, ss) = perf_mean(r, st, n);
                json!({"structure": st, "elements": n, "runs": o.reps(n),
                       "insert_s_mean": im, "insert_s_std": is,
                       "search_s_mean": sm, "search_s_std": ss})
            })
        })
        .collect();
    let doc = json!({
        "command": o.command,
        "quick": o.quick,
        "seconds": (r.seconds * 10.0).round() / 10.0,
        "machine": m,
        "workload": {
            "element_bytes": 512, "key_bytes": super::measure::KEY_LEN,
            "perf_sizes": o.sizes, "perf_chunk": o.perf_chunk, "commit_every": o.commit_every,
            "sweep_elements": o.sweep_elements, "chunks": o.chunks,
            "proof_sample": o.proof_sample.min(o.sweep_elements),
            "space_samples": o.space_samples, "seed": o.seed,
        },
        "table_iii": {
            "normalised_to": "baseline",
            "small_tree": o.sizes[0], "large_tree": o.sizes.last(),
            "small_chunk": o.chunks[0], "large_chunk": o.chunks.last(),
            "rows": rows,
        },
        "perf": perf,
        "sweeps": r.sweeps.iter().map(|s| {
            let mut h = s.proof_hashes.clone();
            h.sort_unstable();
            json!({"structure": s.structure, "chunk": s.chunk, "elements": s.elements,
                   "space_mean": s.space_mean, "space_std": s.space_std,
                   "space_final": s.space_final, "chunks": s.chunks_final,
                   "proof_hashes_mean": mean_hashes(s), "proof_hashes_median": percentile_sorted(&h, 50.0),
                   "proof_hashes_min": h.first(), "proof_hashes_max": h.last(),
                   "proofs_verified": s.proofs_verified})
        }).collect::<Vec<_>>(),
        "avl_star_rotation_splits": r.avl_star_splits.iter().map(|(c, rot, all)| {
            json!({"chunk": c, "rotation_splits": rot, "splits": all})
        }).collect::<Vec<_>>(),
    });
    if let Some(parent) = o.json.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(&o.json, serde_json::to_string_pretty(&doc)? + "\n")?;
    Ok(())
}
