//! Reproduces the figures of `shared/data/README.md` from the raw loaders, and checks that a
//! corrupt file is reported with its path and line. Data root: `$SLURM_ENERGY_DATA` or
//! `shared/data` next to the checkout.

use std::path::PathBuf;

use model::data::{
    self, ZeusSweep, busy_summary, combined_pair_stats, default_data_dir, load_carbon, load_gavel,
    load_smi_log, load_synergy, load_zeus, median_optimal_saving, zeus_sweeps,
};

fn data(rel: &str) -> PathBuf {
    default_data_dir().join(rel)
}

/// A file under the temp dir, unique to this test process and name.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("data_figures_{}_{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

fn assert_near(what: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, README says {want} (tolerance {tol})"
    );
}

#[test]
fn zeus_v100_resnet50_b256_power_cap_ratios() {
    let sweeps = zeus_sweeps(&load_zeus(&data("zeus/summary_power_v100.csv")).unwrap());
    let chosen: Vec<&ZeusSweep> = sweeps
        .iter()
        .filter(|s| s.dataset == "imagenet" && s.network == "resnet50" && s.batch_size == 256)
        .collect();
    // The file has one optimizer (adadelta) for this workload; were there several, the README
    // figure would be their mean, which is what is computed below.
    assert_eq!(chosen.len(), 1);
    let (mut time_ratio, mut energy_ratio) = (0.0, 0.0);
    for s in &chosen {
        let (capped, full) = (s.point_at(150.0).unwrap(), s.point_at(250.0).unwrap());
        time_ratio += capped.time_per_epoch_s / full.time_per_epoch_s / chosen.len() as f64;
        energy_ratio += ZeusSweep::energy_per_epoch_j(capped)
            / ZeusSweep::energy_per_epoch_j(full)
            / chosen.len() as f64;
    }
    // Tolerance: +-0.02 on each ratio (the README rounds to two decimals).
    assert_near("time ratio 150 W / 250 W", time_ratio, 1.18, 0.02);
    assert_near("energy ratio 150 W / 250 W", energy_ratio, 0.77, 0.02);
}

#[test]
fn zeus_median_energy_optimal_saving() {
    // Tolerance: +-0.5 percentage points.
    for (gpu, want) in [("v100", 0.226), ("a40", 0.190)] {
        let rows = load_zeus(&data(&format!("zeus/summary_power_{gpu}.csv"))).unwrap();
        let sweeps = zeus_sweeps(&rows);
        assert!(sweeps.iter().all(|s| !s.points.is_empty()));
        assert_near(
            &format!("{gpu} median saving"),
            median_optimal_saving(&sweeps),
            want,
            0.005,
        );
    }
}

#[test]
fn gavel_v100_colocation_figures() {
    let sim = load_gavel(&data("gavel/simulation_throughputs.json")).unwrap();
    assert_eq!(sim.job_types("v100").len(), 26);
    let s = combined_pair_stats(&sim, "v100");
    assert_eq!(s.pairs, 306);
    // Tolerance: +-0.01 on the quantiles, +-1 percentage point on the fraction.
    assert_near("median", s.median, 1.37, 0.01);
    assert_near("p25", s.p25, 1.15, 0.01);
    assert_near("p75", s.p75, 1.58, 0.01);
    assert_near("fraction above 1.0", s.frac_above_one, 0.78, 0.01);

    let phys = load_gavel(&data("gavel/physical_cluster_throughputs.json")).unwrap();
    assert_near(
        "physical median",
        combined_pair_stats(&phys, "v100").median,
        1.09,
        0.01,
    );
}

#[test]
fn gavel_lookups_are_consistent() {
    let t = load_gavel(&data("gavel/simulation_throughputs.json")).unwrap();
    let (a, b) = ("ResNet-50 (batch size 64)", "Transformer (batch size 64)");
    assert!(t.isolated("v100", a, 1).unwrap() > 0.0);
    assert!(t.isolated("v100", a, 8).is_some());
    let (t_a, t_b) = t.pair("v100", a, b).unwrap();
    // The file stores each pair both ways with swapped values.
    assert_eq!(t.pair("v100", b, a), Some((t_b, t_a)));
    assert!(t.pair("v100", a, "no such job").is_none());
    assert!(
        t.worker_types()
            .contains(&"v100_unconsolidated".to_string())
    );
    assert!(t.job_types("h100").is_empty());
}

#[test]
fn v100_log_figures() {
    // Tolerance: +-3 W on powers, +-3 percentage points on utilisation.
    let cases = [
        ("lstm_alone.csv", 188.0, 83.0),
        ("aps_alone.csv", 102.0, 46.0),
        ("aps_lstm_colocated.csv", 139.0, 66.0),
    ];
    for (file, power_w, util_pct) in cases {
        let samples = load_smi_log(&data(&format!("v100-colocation/{file}"))).unwrap();
        let s = busy_summary(&samples);
        assert!(s.samples > 100, "{file}: only {} busy samples", s.samples);
        assert_near(&format!("{file} idle power"), s.idle_power_w, 41.0, 3.0);
        assert_near(&format!("{file} busy power"), s.busy_power_w, power_w, 3.0);
        assert_near(
            &format!("{file} busy utilisation"),
            s.busy_util_pct,
            util_pct,
            3.0,
        );
    }
}

#[test]
fn carbon_traces_load_on_a_30_min_grid() {
    for file in ["carbon/gb_ci.csv", "carbon/fr_ci.csv"] {
        let t = load_carbon(&data(file)).unwrap();
        assert_eq!(t.step_s, 1800.0, "{file}");
        // Both start 2019-12-20 00:00 UTC and cover more than a year.
        assert_eq!(t.start_unix_s, 1_576_800_000, "{file}");
        assert!(
            t.g_per_kwh.len() > 17_568,
            "{file}: {} samples",
            t.g_per_kwh.len()
        );
        assert!(
            t.g_per_kwh.iter().all(|g| *g > 0.0 && *g < 1000.0),
            "{file}: out of range"
        );
        assert!(t.mean() > 0.0 && t.mean() < 1000.0);
        let len_s = t.g_per_kwh.len() as f64 * t.step_s;
        assert_eq!(t.at_offset(len_s + 1.0), t.g_per_kwh[0]);
    }
    // GB is recorded every 15 min from 2020-10-31; the grid keeps the on-the-half-hour values.
    let gb = load_carbon(&data("carbon/gb_ci.csv")).unwrap();
    assert!(gb.finer_samples_skipped > 3000);
    assert_eq!(gb.gaps_filled, 0);
}

#[test]
fn synergy_res50_cpu_sensitivity() {
    let t = load_synergy(&data("synergy/cpu_mem_sensitivity.csv")).unwrap();
    assert!(t.models().contains(&("res50".to_string(), 1)));
    assert_eq!(t.cpu_levels("res50", 1), [1, 2, 3, 4, 5, 6, 9, 12, 24]);
    // Exact values of the file (tolerance 1e-9).
    assert_near(
        "4 CPUs",
        t.throughput("res50", 1, 4, 250.0).unwrap(),
        1.15,
        1e-9,
    );
    assert_near(
        "1 CPU",
        t.throughput("res50", 1, 1, 250.0).unwrap(),
        0.4,
        1e-9,
    );
    // Between levels: the level below; below the lowest: the lowest.
    assert_near(
        "8 CPUs -> 6",
        t.throughput("res50", 1, 8, 250.0).unwrap(),
        1.15,
        1e-9,
    );
    assert_near(
        "0 CPUs -> 1",
        t.throughput("res50", 1, 0, 250.0).unwrap(),
        0.4,
        1e-9,
    );
    assert_near(
        "10 GB -> 20.83",
        t.throughput("res50", 1, 4, 10.0).unwrap(),
        0.1,
        1e-9,
    );
    assert_eq!(t.best_cpus("res50", 1), Some(4));
    assert!(t.throughput("nonexistent", 1, 4, 250.0).is_none());
}

#[test]
fn default_data_dir_has_the_readme() {
    assert!(default_data_dir().join("README.md").is_file());
}

#[test]
fn corrupt_rows_are_reported_with_path_and_line() {
    let zeus = temp_file(
        "zeus.csv",
        "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n\
         imagenet,resnet50,256,adadelta,100,6781.1,98.3\n\
         imagenet,resnet50,256,adadelta,125,fast,121.9\n",
    );
    let err = load_zeus(&zeus).unwrap_err();
    assert_eq!((err.path.as_path(), err.line), (zeus.as_path(), Some(3)));
    assert!(
        err.to_string().contains(":3: ") && err.reason.contains("time_per_epoch"),
        "{err}"
    );

    let carbon = temp_file(
        "carbon.csv",
        "Time,Carbon Intensity\n2019-12-20 00:00:00,120.9\n2019-12-20 00:30:00,\n",
    );
    let err = load_carbon(&carbon).unwrap_err();
    assert_eq!(err.line, Some(3), "{err}");
    assert!(err.reason.contains("empty"), "{err}");

    let uneven = temp_file(
        "carbon_uneven.csv",
        "Time,Carbon Intensity\n2019-12-20 00:00:00,1\n2019-12-20 00:30:00,2\n\
         2019-12-20 00:47:00,3\n",
    );
    assert_eq!(load_carbon(&uneven).unwrap_err().line, Some(4));

    let gap = temp_file(
        "carbon_gap.csv",
        "Time,Carbon Intensity\n2019-12-20 00:00:00,1\n2019-12-20 00:30:00,2\n\
         2019-12-20 02:00:00,3\n",
    );
    let t = load_carbon(&gap).unwrap();
    assert_eq!(
        (t.g_per_kwh.as_slice(), t.gaps_filled),
        ([1.0, 2.0, 2.0, 2.0, 3.0].as_slice(), 2)
    );

    let smi = temp_file(
        "smi.csv",
        "index, timestamp, power.draw [W], clocks.current.sm [MHz], utilization.gpu [%]\n\
         0, 2022/01/05 23:05:47.329, 41.44 W, 367 MHz, 0 %\n\
         1, 2022/01/05 23:05:47.332, [N/A], 367 MHz, 0 %\n",
    );
    assert_eq!(load_smi_log(&smi).unwrap_err().line, Some(3));

    let synergy = temp_file(
        "synergy.csv",
        "model,gpus,cpus_level,mem_gb_level,normalized_throughput,best_cpus,best_mem_gb,\
         speedup_at_best,iter_time_s\nres50,1,1,62.5,0.4,4,62.5,1.15,0.78\nres50,one,1,62.5\n",
    );
    assert_eq!(load_synergy(&synergy).unwrap_err().line, Some(3));

    let gavel = temp_file(
        "gavel.json",
        "{\n  \"v100\": {\n    \"('A3C', 1)\": {\"null\": }\n  }\n}\n",
    );
    let err = load_gavel(&gavel).unwrap_err();
    assert_eq!(err.line, Some(3), "{err}");

    let bad_key = temp_file(
        "gavel_key.json",
        "{\n  \"v100\": {\n    \"A3C\": {\"null\": 1.0}\n  }\n}\n",
    );
    assert_eq!(load_gavel(&bad_key).unwrap_err().line, Some(3));

    let missing = data::DataError::file(&zeus, "x");
    assert!(missing.to_string().starts_with(&zeus.display().to_string()));
    for p in [zeus, carbon, uneven, gap, smi, synergy, gavel, bad_key] {
        std::fs::remove_file(p).unwrap();
    }
}
