//! The simulator end to end: the real `slurm-energy simulate` binary on the first jobs of the
//! Philly trace, and on a trace with a corrupt row.

use std::path::PathBuf;
use std::process::Command;

fn data_dir() -> PathBuf {
    std::env::var_os("SLURM_ENERGY_DATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")))
}

fn simulate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_slurm-energy"))
        .arg("simulate")
        .arg("--data")
        .arg(data_dir())
        .args(args)
        .output()
        .expect("run slurm-energy")
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json written")).expect("valid json")
}

#[test]
fn replays_a_slice_of_philly_under_every_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("r.json");
    let plots = dir.path().join("plots");
    let out = simulate(&["--jobs", "1500", "--json", out_json.to_str().expect("utf8"), "--plots", plots.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("ratios to slurm"), "{table}");
    let v = json(&out_json);
    let policies = v["policies"].as_object().expect("policies");
    for name in ["slurm", "slurm-powersave", "eaco", "powerflow", "greenflow", "synergy", "energy"] {
        let p = &policies[name];
        assert_eq!(p["jobs"].as_u64(), Some(1500), "{name}: every job finishes");
        let total = p["energy_kwh"].as_f64().expect("energy");
        let parts = p["gpu_energy_kwh"].as_f64().expect("gpu") + p["idle_energy_kwh"].as_f64().expect("idle") + p["base_energy_kwh"].as_f64().expect("base");
        assert!((total - parts).abs() < 1e-6 * total.max(1.0), "{name}: categories add up");
        assert!(p["mean_jct_s"].as_f64().expect("jct") >= p["mean_wait_s"].as_f64().expect("wait"));
        let util = p["gpu_utilization"].as_f64().expect("util");
        assert!(util > 0.0 && util <= 1.0, "{name}: utilisation {util}");
        assert!(p["carbon_kg"].as_f64().expect("carbon") > 0.0);
    }
    // Power saving saves energy on a cluster that is often idle, and never more than it spent.
    let e = |n: &str| policies[n]["energy_kwh"].as_f64().expect("energy");
    assert!(e("slurm-powersave") < e("slurm"));
    assert!(policies["slurm"]["shared_starts"].as_u64() == Some(0));
    for f in ["jct_cdf.svg", "energy_by_category.svg", "cluster_power.svg"] {
        let svg = std::fs::read_to_string(plots.join(f)).expect("plot written");
        assert!(svg.starts_with("<svg") && svg.contains("energy"), "{f}");
    }
}

#[test]
fn the_same_seed_gives_the_same_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    for p in [&a, &b] {
        let out = simulate(&["--jobs", "800", "--policies", "energy,eaco", "--seed", "7", "--json", p.to_str().expect("utf8")]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let strip = |mut v: serde_json::Value| {
        for p in v["policies"].as_object_mut().expect("policies").values_mut() {
            let o = p.as_object_mut().expect("object");
            o.remove("wall_s");
            o.remove("mean_cycle_us");
        }
        v["run"].as_object_mut().expect("run").remove("simulate_s");
        v
    };
    assert_eq!(strip(json(&a)), strip(json(&b)));
}

#[test]
fn a_corrupt_row_is_reported_with_its_line_and_the_run_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("bad.csv");
    std::fs::write(&trace, "submit_time_s,duration_s,num_gpus\n0,100,1\n10,abc,1\n").expect("write");
    let out = simulate(&["--trace", trace.to_str().expect("utf8")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":3:") && err.contains("duration_s"), "{err}");
}

#[test]
fn a_bad_cluster_spec_names_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = dir.path().join("c.toml");
    std::fs::write(&spec, "[cluster]\nnodes = 4\ngpus_per_nod = 8\n").expect("write");
    let out = simulate(&["--cluster", spec.to_str().expect("utf8"), "--jobs", "10"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && err.contains("gpus_per_nod"), "{err}");
}
