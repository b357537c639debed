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
    assert!(table.contains("ratios to slurm-powersave") && table.contains("ratios to slurm "), "{table}");
    let v = json(&out_json);
    let policies = v["policies"].as_object().expect("policies");
    for name in ["slurm", "slurm-powersave", "eaco", "powerflow", "greenflow", "synergy", "union", "energy", "oracle"] {
        let p = &policies[name];
        let m = |k: &str| p[k]["mean"].as_f64().unwrap_or_else(|| panic!("{name}: {k}"));
        assert_eq!(m("jobs"), 1500.0, "{name}: every job finishes");
        assert!(p["jobs"]["ci95"].is_null(), "one seed has no interval");
        let total = m("energy_kwh");
        let parts = m("gpu_energy_kwh") + m("idle_energy_kwh") + m("base_energy_kwh") + m("cpu_energy_kwh");
        assert!(m("cpu_energy_kwh") > 0.0, "{name}: busy cores draw power");
        assert!((total - parts).abs() < 1e-6 * total.max(1.0), "{name}: categories add up");
        assert!(m("mean_jct_s") >= m("mean_wait_s"));
        let util = m("gpu_utilization");
        assert!(util > 0.0 && util <= 1.0, "{name}: utilisation {util}");
        assert!(m("carbon_kg") > 0.0);
        assert!(m("p50_slowdown") <= m("p90_slowdown") && m("p90_slowdown") <= m("p99_slowdown"), "{name}: slowdown percentiles");
    }
    // Power saving saves energy on a cluster that is often idle, and never more than it spent.
    let e = |n: &str| policies[n]["energy_kwh"]["mean"].as_f64().expect("energy");
    assert!(e("slurm-powersave") < e("slurm"));
    // The oracle bound: no policy uses less energy, counting the least energy of the work its
    // killed jobs left undone. (Its JCT is no bound: its jobs never wait but run at their
    // energy-optimal configuration.)
    for name in ["slurm", "slurm-powersave", "eaco", "powerflow", "greenflow", "synergy", "union", "energy"] {
        let charged = e(name) + policies[name]["unfinished_work_floor_kwh"]["mean"].as_f64().expect("floor");
        assert!(e("oracle") <= charged, "oracle {} > {name} {charged}", e("oracle"));
    }
    assert_eq!(policies["oracle"]["mean_wait_s"]["mean"].as_f64(), Some(0.0));
    assert_eq!(policies["oracle"]["idle_energy_kwh"]["mean"].as_f64(), Some(0.0));
    assert!(policies["slurm"]["shared_starts"]["mean"].as_f64() == Some(0.0));
    let r = v["vs_slurm-powersave"]["slurm"]["energy_kwh"]["ratio"]["mean"].as_f64().expect("paired ratio");
    assert!((r - e("slurm") / e("slurm-powersave")).abs() < 1e-9, "one seed: the ratio of the two runs");
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
        for runs in v["per_seed"].as_object_mut().expect("per_seed").values_mut() {
            for r in runs.as_array_mut().expect("runs") {
                let o = r.as_object_mut().expect("object");
                o.remove("wall_s");
                o.remove("mean_cycle_us");
            }
        }
        v["run"].as_object_mut().expect("run").remove("simulate_s");
        v
    };
    assert_eq!(strip(json(&a)), strip(json(&b)));
}

#[test]
fn seeds_give_means_with_intervals_and_paired_ratios() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("s.json");
    let out = simulate(&["--jobs", "600", "--seeds", "3", "--policies", "slurm-powersave,powerflow", "--json", out_json.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("means over 3 seed(s) [1, 2, 3]") && table.contains(" ± "), "{table}");
    let v = json(&out_json);
    assert_eq!(v["seeds"], serde_json::json!([1, 2, 3]));
    let energy = |name: &str| -> Vec<f64> {
        v["per_seed"][name].as_array().expect("runs").iter().map(|r| r["energy_kwh"].as_f64().expect("energy")).collect()
    };
    let (pf, ps) = (energy("powerflow"), energy("slurm-powersave"));
    assert_eq!(pf.len(), 3);
    assert!(ps.windows(2).any(|w| w[0] != w[1]), "seeds draw different jobs: {ps:?}");
    // The summary is the mean of the seeds, with a Student-t interval (t(2) = 4.303).
    let mean = pf.iter().sum::<f64>() / 3.0;
    let sd = (pf.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let est = &v["policies"]["powerflow"]["energy_kwh"];
    assert!((est["mean"].as_f64().expect("mean") - mean).abs() < 1e-6 * mean);
    assert!((est["ci95"].as_f64().expect("ci95") - 4.303 * sd / 3.0_f64.sqrt()).abs() < 1e-6 * mean);
    // The ratio is paired: the mean of per-seed ratios, not a ratio of means.
    let ratios: Vec<f64> = pf.iter().zip(&ps).map(|(a, b)| a / b).collect();
    let paired = &v["vs_slurm-powersave"]["powerflow"]["energy_kwh"];
    assert!((paired["ratio"]["mean"].as_f64().expect("ratio") - ratios.iter().sum::<f64>() / 3.0).abs() < 1e-12);
    assert!(paired["ratio"]["ci95"].as_f64().expect("ci") >= 0.0);
    assert!(paired["difference"]["mean"].as_f64().expect("difference") < 0.0, "clocks save energy");
    assert!(v["policies"]["powerflow"]["p99_jct_s"]["mean"].as_f64().expect("p99") > 0.0);
}

#[test]
fn jobs_are_killed_at_their_time_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Users who ask for half of what their jobs need, on a limit ladder of 30 min: the 1-hour
    // job gets 30 min and is killed, the 20-minute job gets 30 min and finishes.
    let spec = dir.path().join("c.toml");
    std::fs::write(
        &spec,
        "[cluster]\nnodes = 2\ngpus_per_node = 8\n[time_limits]\noverestimate_min = 0.5\noverestimate_max = 0.5\nround_up_to_s = [1800]\n[carbon]\nfile = \"\"\n",
    )
    .expect("write");
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "submit_time_s,duration_s,num_gpus\n0,3600,1\n0,1200,1\n").expect("write");
    let out_json = dir.path().join("k.json");
    let out = simulate(&["--cluster", spec.to_str().expect("utf8"), "--trace", trace.to_str().expect("utf8"), "--policies", "slurm", "--json", out_json.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out_json);
    let m = |k: &str| v["policies"]["slurm"][k]["mean"].as_f64().unwrap_or_else(|| panic!("{k}"));
    assert_eq!(m("jobs"), 2.0, "a killed job ends too");
    assert_eq!(m("killed_at_time_limit"), 1.0);
    assert!((m("killed_work_gpu_h") - 0.5).abs() < 1e-6, "half an hour of its work was left");
    assert!((m("makespan_s") - 1800.0).abs() < 1e-6, "nothing runs past a limit");
}

#[test]
fn a_pair_gavel_could_not_co_run_fails_instead_of_sharing() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One GPU: the second job can only start by sharing it. Gavel could not run two
    // Transformer (batch size 256) jobs on one V100 ([0, 0] in both files); with seed 2 both
    // carry their tag and the planner's family-level prediction lets them share.
    let spec = dir.path().join("c.toml");
    std::fs::write(&spec, "[cluster]\nnodes = 1\ngpus_per_node = 1\ncpus_per_node = 8\njob_mem_gb_per_gpu = 48.0\n[carbon]\nfile = \"\"\n").expect("write");
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "submit_time_s,duration_s,num_gpus,job_type\n0,3600,1,Transformer (batch size 256)\n10,600,1,Transformer (batch size 256)\n").expect("write");
    let out_json = dir.path().join("p.json");
    for truth in ["physical", "simulated"] {
        let out = simulate(&[
            "--cluster", spec.to_str().expect("utf8"), "--trace", trace.to_str().expect("utf8"), "--policies", "eaco", "--seed", "2",
            "--colocation-truth", truth, "--jobs-csv", dir.path().to_str().expect("utf8"), "--json", out_json.to_str().expect("utf8"),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v = json(&out_json);
        let m = |k: &str| v["policies"]["eaco"][k]["mean"].as_f64().unwrap_or_else(|| panic!("{k}"));
        assert_eq!(m("jobs"), 2.0, "{truth}");
        assert_eq!(m("shared_starts"), 0.0, "{truth}: the pair never ran together");
        assert_eq!(m("colocation_failures"), 1.0, "{truth}: the planner tried, the start failed, the job ran alone later");
        // Whatever the planner tried, the second job ran only after the first.
        let csv = std::fs::read_to_string(dir.path().join("eaco.jobs.csv")).expect("csv");
        let rows: Vec<Vec<f64>> = csv.lines().skip(1).map(|l| l.split(',').map(|x| x.parse().expect("number")).collect()).collect();
        assert!(rows[1][3] >= rows[0][4] - 1e-6, "{truth}: {csv}");
    }
}

#[test]
fn paper_policies_resize_and_consolidate_and_their_ablations_do_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("a.json");
    let out = simulate(&["--jobs", "1500", "--ablation", "--policies", "slurm-powersave,eaco,powerflow,greenflow", "--json", out_json.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out_json);
    let m = |run: &str, k: &str| v["policies"][run][k]["mean"].as_f64().unwrap_or_else(|| panic!("{run}: {k}"));
    for p in ["powerflow", "greenflow"] {
        assert!(m(p, "grown_starts") > 0.0, "{p}: jobs get more GPUs while GPUs are free");
        assert_eq!(m(p, "jobs"), 1500.0);
        let fixed = format!("{p}-no-elastic");
        assert_eq!((m(&fixed, "grown_starts"), m(&fixed, "shrunk_starts")), (0.0, 0.0), "{fixed}");
        // Running jobs are re-allocated (checkpoint and restart), each with its pause; not
        // without re-allocation nor without elastic counts; every job is still accounted for.
        assert!(m(p, "reallocations") > 0.0 && m(p, "realloc_pause_h") > 0.0, "{p} re-allocates running jobs");
        for q in [format!("{p}-no-realloc"), fixed] {
            assert_eq!((m(&q, "reallocations"), m(&q, "realloc_pause_h"), m(&q, "jobs")), (0.0, 0.0, 1500.0), "{q}");
        }
    }
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().any(|l| l.starts_with("powerflow ")) && table.contains("re-allocations of running jobs"), "{table}");
    for p in ["slurm-powersave", "eaco"] {
        assert_eq!((m(p, "grown_starts"), m(p, "shrunk_starts")), (0.0, 0.0), "{p} keeps requested GPU counts");
    }
    // Consolidation: EaCO shares a GPU even when a free one exists, so it shares more often
    // than when it shares only instead of waiting.
    assert!(m("eaco", "shared_starts") > m("eaco-no-consolidation", "shared_starts"), "{} vs {}", m("eaco", "shared_starts"), m("eaco-no-consolidation", "shared_starts"));
}

#[test]
fn frontier_sweeps_each_policys_knobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("f.json");
    let plots = dir.path().join("plots");
    let out = simulate(&[
        "--jobs", "400", "--frontier", "--policies", "slurm-powersave,powerflow,eaco",
        "--json", out_json.to_str().expect("utf8"), "--plots", plots.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("frontier points") && table.contains("budget: best mean JCT"), "{table}");
    let v = json(&out_json);
    let points = v["frontier"]["points"].as_object().expect("points");
    assert_eq!(points.keys().cloned().collect::<Vec<_>>(), vec!["eaco", "powerflow", "powerflow-no-realloc", "slurm-powersave"]);
    assert_eq!(points["powerflow"].as_array().expect("list").len(), 6, "4 prices, 2 more slowdown bounds");
    assert_eq!(points["powerflow-no-realloc"].as_array().expect("list").len(), 6, "the same without re-allocation");
    // The papers' comparison: mean JCT at slurm-powersave's energy, with and without
    // re-allocation, one ratio per seed.
    assert!(table.contains("equal budget (the papers' comparison)"), "{table}");
    let eq = &v["frontier"]["equal_budget"]["powerflow"];
    assert_eq!(eq["budget_metric"], "energy_kwh");
    for k in ["jct_ratio_baseline_over_policy", "jct_ratio_no_realloc_over_policy"] {
        assert!(eq[k]["per_seed"].as_array().is_some_and(|s| s.len() == 1 && s[0].as_f64().is_some_and(|r| r > 0.0)), "{k}: {eq}");
    }
    assert_eq!(points["eaco"].as_array().expect("list").len(), 4);
    for p in points["powerflow"].as_array().expect("list") {
        let run = p["run"].as_str().expect("run");
        assert!(v["policies"][run]["energy_kwh"]["mean"].as_f64().is_some(), "{run} was run");
    }
    assert!(points["powerflow"].as_array().expect("list").iter().any(|p| p["on_frontier"] == true));
    // The baseline is within its own budget at 1.00.
    let budget = v["frontier"]["budget"]["slurm-powersave"].as_array().expect("budget");
    assert!(budget.iter().any(|c| c["budget_fraction"] == 1.0 && c["mean_jct_h"].as_f64().is_some()));
    // On its interpolated frontier (one point) the baseline at its own energy is its mean JCT,
    // and below it has none.
    assert!(table.contains("budget on interpolated frontiers"), "{table}");
    let interpolated = v["frontier"]["budget_interpolated"]["slurm-powersave"].as_array().expect("interpolated budget");
    let own_jct_h = v["policies"]["slurm-powersave"]["mean_jct_s"]["mean"].as_f64().expect("mean JCT") / 3600.0;
    let at = |f: f64| interpolated.iter().find(|c| c["budget_fraction"] == f).map(|c| c["mean_jct_h"].as_f64());
    assert!(at(1.0).flatten().is_some_and(|j| (j - own_jct_h).abs() < 1e-9), "{interpolated:?} vs {own_jct_h}");
    assert_eq!(at(0.9), Some(None));
    for f in ["frontier_energy_jct.svg", "frontier_energy_p99.svg"] {
        let svg = std::fs::read_to_string(plots.join(f)).expect("plot written");
        assert!(svg.starts_with("<svg") && svg.contains("powerflow"), "{f}");
    }
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

#[test]
fn a_timed_scheduler_starts_jobs_only_on_its_ticks_and_slurm_on_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = dir.path().join("c.toml");
    std::fs::write(&spec, "[cluster]\nnodes = 1\ngpus_per_node = 8\n[carbon]\nfile = \"\"\n").expect("write");
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "submit_time_s,duration_s,num_gpus\n0,3600,1\n124,1200,2\n243,600,1\n").expect("write");
    let csv = dir.path().join("jobs");
    let out = simulate(&[
        "--cluster",
        spec.to_str().expect("utf8"),
        "--trace",
        trace.to_str().expect("utf8"),
        "--policies",
        "slurm,energy",
        "--cycle-interval-s",
        "60",
        "--jobs-csv",
        csv.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let starts = |policy: &str| -> Vec<f64> {
        let text = std::fs::read_to_string(csv.join(format!("{policy}.jobs.csv"))).unwrap_or_else(|e| panic!("{policy}.jobs.csv: {e}"));
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("header").split(',').collect();
        let col = header.iter().position(|h| h.starts_with("start")).expect("start column");
        lines.map(|l| l.split(',').nth(col).and_then(|v| v.parse().ok()).expect("start time")).collect()
    };
    let mut energy = starts("energy");
    energy.sort_by(f64::total_cmp);
    assert_eq!(energy, vec![60.0, 180.0, 300.0], "sched/energy-like starts wait for the next tick");
    let mut slurm = starts("slurm");
    slurm.sort_by(f64::total_cmp);
    assert_eq!(slurm, vec![0.0, 124.0, 243.0], "stock Slurm starts on submission");
    let bad = simulate(&["--jobs", "10", "--cycle-interval-s=-1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--cycle-interval-s"), "{}", String::from_utf8_lossy(&bad.stderr));
}

#[test]
fn without_early_separation_bad_pairs_are_learnt_but_not_requeued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let requeues = |extra: &[&str]| {
        let out_json = dir.path().join("s.json");
        let mut args = vec!["--jobs", "2000", "--policies", "eaco", "--json", out_json.to_str().expect("utf8")];
        args.extend_from_slice(extra);
        let out = simulate(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v = json(&out_json);
        let m = |k: &str| v["policies"]["eaco"][k]["mean"].as_f64().unwrap_or_else(|| panic!("{k}"));
        (m("sharing_requeues"), m("shared_starts"))
    };
    let (separated, shared) = requeues(&[]);
    assert!(separated > 0.0 && shared > 0.0, "EaCO's early check separates some pairs: {separated} of {shared}");
    // As sched/energy live: the pair stays together (and is learnt from).
    let (kept, shared_kept) = requeues(&["--no-early-separation"]);
    assert_eq!(kept, 0.0);
    assert!(shared_kept > 0.0);
}

#[test]
fn the_tool_gives_the_oracles_share_and_energys_paired_differences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_json = dir.path().join("d.json");
    let out = simulate(&["--jobs", "600", "--seeds", "3", "--policies", "slurm-powersave,powerflow,energy,oracle", "--json", out_json.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("share of the oracle's saving over slurm-powersave") && table.contains("energy - each policy, paired by seed"), "{table}");
    let v = json(&out_json);
    let charged = |name: &str| -> Vec<f64> {
        v["per_seed"][name].as_array().expect("runs").iter().map(|r| r["energy_kwh"].as_f64().expect("energy") + r["unfinished_work_floor_kwh"].as_f64().expect("floor")).collect()
    };
    let (ps, pf, or) = (charged("slurm-powersave"), charged("powerflow"), charged("oracle"));
    // The share is computed per seed, then averaged (Student t over 3 seeds).
    let shares: Vec<f64> = (0..3).map(|k| (ps[k] - pf[k]) / (ps[k] - or[k])).collect();
    let mean = shares.iter().sum::<f64>() / 3.0;
    let sd = (shares.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let share = &v["oracle_share"]["policies"]["powerflow"];
    assert!((share["mean"].as_f64().expect("mean") - mean).abs() < 1e-9, "{share} vs {shares:?}");
    assert!((share["ci95"].as_f64().expect("ci95") - 4.303 * sd / 3.0_f64.sqrt()).abs() < 1e-9);
    assert_eq!(v["oracle_share"]["reference"], "slurm-powersave");
    assert!(v["oracle_share"]["policies"]["oracle"].is_null(), "the oracle is the bound, not a policy");
    // energy - powerflow, paired by seed, with whether its interval excludes 0.
    let energy = |name: &str| -> Vec<f64> { v["per_seed"][name].as_array().expect("runs").iter().map(|r| r["energy_kwh"].as_f64().expect("energy")).collect() };
    let diffs: Vec<f64> = energy("energy").iter().zip(energy("powerflow")).map(|(a, b)| a - b).collect();
    let d = &v["energy_minus"]["powerflow"]["energy_kwh"];
    let dm = diffs.iter().sum::<f64>() / 3.0;
    let dsd = (diffs.iter().map(|x| (x - dm).powi(2)).sum::<f64>() / 2.0).sqrt();
    let ci = 4.303 * dsd / 3.0_f64.sqrt();
    assert!((d["mean"].as_f64().expect("mean") - dm).abs() < 1e-9);
    assert!((d["ci95"].as_f64().expect("ci95") - ci).abs() < 1e-9);
    assert_eq!(d["excludes_zero"].as_bool(), Some(dm.abs() > ci));
    assert!(v["energy_minus"]["slurm-powersave"]["mean_jct_s"]["mean"].is_number());
    assert!(v["energy_minus"]["energy"].is_null());
}

#[test]
fn a_part_of_the_trace_period_replays_only_the_jobs_submitted_in_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf8").to_string();
    let (first, second) = (path("first.json"), path("second.json"));
    let run = |args: &[&str]| {
        let out = simulate(args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["--trace-part", "first-half", "--jobs", "300", "--policies", "slurm", "--json", &first]);
    run(&["--trace-from", "2017-11-15", "--trace-until", "2017-11-16", "--policies", "slurm", "--json", &second]);
    let (a, b) = (json(std::path::Path::new(&first)), json(std::path::Path::new(&second)));
    assert_eq!(a["run"]["jobs_in_file"].as_u64(), Some(82_247));
    assert_eq!(a["run"]["jobs_in_trace"].as_u64(), Some(300));
    // One day of mid-November: its jobs, none of the whole trace's others; the calendar starts
    // with the day's first submit.
    let day = b["run"]["jobs_in_trace"].as_u64().expect("jobs");
    assert!(day > 0 && day < 2_000, "{day} jobs submitted on 2017-11-15");
    let start = b["run"]["trace_start_unix_s"].as_i64().expect("a dated trace");
    assert!((1_510_704_000..1_510_790_400).contains(&start), "{start}");
    // Bad values are errors that name the option and what is allowed.
    for (args, says) in [(vec!["--trace-part", "middle"], "first-half, second-half"), (vec!["--trace-from", "2017-11-31"], "YYYY-MM-DD"), (vec!["--trace-from", "2018-01-01"], "no job")] {
        let out = simulate(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
}
