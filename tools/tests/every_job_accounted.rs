//! Every policy finishes or accounts for every job of every trace, on several trace shapes the
//! project was not tuned on (heavy, light, long jobs, bursty), and none is pathological on any
//! of them: the audit of the simulator (issue 23) found re-implementations that, on a trace of
//! long, lightly loaded jobs, used 3x `slurm-powersave`'s energy, killed 31 % of their jobs and
//! counted 3 jobs fewer than the trace held.
//!
//! The bounds below are sanity bounds against such pathologies, not claims: on these traces
//! (2026-11-28) every policy but `slurm` used at most 1.02x `slurm-powersave`'s energy, had a
//! mean JCT at most 1.28x its (the oracle's aside) and killed at most 2 of 120 jobs (1.7 %, at
//! the limit the planner extended); the bounds (1.1x, 1.5x, 5 %) leave room for honest changes
//! of the truth or the policies and catch what the audit found.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn data_dir() -> PathBuf {
    std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")))
}

/// A small deterministic generator (SplitMix64), so that each shape is the same on every run.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn gpus(&mut self) -> u64 {
        [1, 1, 1, 2, 4, 8][(self.next() % 6) as usize]
    }
}

/// A trace shape: how many jobs, the gap between arrivals (or bursts) and the run times.
struct Shape {
    name: &'static str,
    jobs: u64,
    /// Jobs per burst (1: steady arrivals).
    burst: u64,
    gap_s: (u64, u64),
    duration_s: (u64, u64),
}

const SHAPES: [Shape; 4] = [
    // The cluster (etc/cluster-philly.toml) stays busy: a queue forms.
    Shape { name: "heavy", jobs: 300, burst: 1, gap_s: (40, 80), duration_s: (1800, 4 * 3600) },
    // Mostly idle: short jobs hours apart.
    Shape { name: "light", jobs: 120, burst: 1, gap_s: (3600, 3 * 3600), duration_s: (600, 3600) },
    // Long jobs (one to three days), lightly loaded: where the audit found the pathologies.
    Shape { name: "long", jobs: 120, burst: 1, gap_s: (1800, 5400), duration_s: (86_400, 3 * 86_400) },
    // Fifty jobs within a minute, every twelve hours.
    Shape { name: "bursty", jobs: 250, burst: 50, gap_s: (43_200, 43_200), duration_s: (300, 6 * 3600) },
];

fn write_trace(shape: &Shape, path: &Path) {
    let mut d = Draws(0x5eed ^ shape.jobs);
    let mut csv = String::from("submit_time_s,duration_s,num_gpus\n");
    let mut t = 0;
    for i in 0..shape.jobs {
        if i % shape.burst == 0 && i > 0 {
            t += d.between(shape.gap_s.0, shape.gap_s.1);
        }
        let submit = if shape.burst > 1 { t + d.between(0, 60) } else { t };
        let _ = writeln!(csv, "{submit},{},{}", d.between(shape.duration_s.0, shape.duration_s.1), d.gpus());
    }
    std::fs::write(path, csv).expect("trace written");
}

#[test]
fn every_policy_accounts_for_every_job_of_every_trace_shape_and_none_is_pathological() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    for shape in &SHAPES {
        let trace = dir.path().join(format!("{}.csv", shape.name));
        let json = dir.path().join(format!("{}.json", shape.name));
        write_trace(shape, &trace);
        let out = Command::new(env!("CARGO_BIN_EXE_slurm-energy"))
            .arg("simulate")
            .arg("--data")
            .arg(data_dir())
            .arg("--trace")
            .arg(&trace)
            .arg("--json")
            .arg(&json)
            .output()
            .expect("run slurm-energy");
        assert!(out.status.success(), "{}: {}", shape.name, String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("valid json");
        let policies = v["policies"].as_object().expect("policies");
        let metric = |policy: &str, key: &str| policies[policy][key]["mean"].as_f64().unwrap_or_else(|| panic!("{}: {policy}: {key}", shape.name));
        let base_kwh = metric("slurm-powersave", "energy_kwh");
        let base_jct_s = metric("slurm-powersave", "mean_jct_s");
        assert_eq!(policies.len(), tools::sim::policies::ALL.len(), "{}: every policy ran", shape.name);
        for name in policies.keys() {
            let jobs = metric(name, "jobs");
            let killed = metric(name, "killed_at_time_limit");
            let energy = metric(name, "energy_kwh") / base_kwh;
            let jct = metric(name, "mean_jct_s") / base_jct_s;
            println!("{:<7} {name:<16} jobs {jobs:>4} killed {killed:>2} energy x{energy:.3} mean JCT x{jct:.3}", shape.name);
            if jobs != shape.jobs as f64 {
                failures.push(format!("{}: {name} accounts for {jobs} jobs of {}", shape.name, shape.jobs));
            }
            if killed > 0.05 * shape.jobs as f64 {
                failures.push(format!("{}: {name} killed {killed} of {} jobs at their time limit", shape.name, shape.jobs));
            }
            // `slurm` keeps idle hosts on (it uses many times slurm-powersave's energy on a
            // light trace by design); the oracle's JCT is no bound (it runs every job at its
            // least energy, however slow).
            if name != "slurm" && energy > 1.1 {
                failures.push(format!("{}: {name} uses {energy:.2}x slurm-powersave's energy", shape.name));
            }
            if name != "oracle" && jct > 1.5 {
                failures.push(format!("{}: {name}'s mean JCT is {jct:.2}x slurm-powersave's", shape.name));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
