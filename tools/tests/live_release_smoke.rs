//! Live smoke test of the whole bundle on the Slurm release the harness runs
//! (`SLURM_ENERGY_SLURM_PREFIX`, else the system's), built against that release's tree
//! (`SLURM_SRC_DIR`): what CI runs on the releases it does not run the whole live suite on.
//!
//! One cluster (the demo's: 3 nodes x 4 simulated V100s, accounting, every plugin loaded) shows
//! that on this release
//! - the GPU plugin autodetects the GPUs (typed GRES from NVML) and applies `--gpu-freq` to an
//!   srun step (the fake NVML's clock during the step, our plugin's log line);
//! - the SPANK options are listed in `sbatch --help` and a bad value is refused at submission;
//! - sched/energy starts hinted jobs and records its decision on each (AdminComment);
//! - `sacct` shows the GPU energy of each job (ConsumedEnergy from the NVML counters).

use std::path::Path;
use std::time::{Duration, Instant};

use slurm_testcluster::{skip_for, skip_live_test, slurm_release};
use slurm_testcluster::{ClusterConfig, LocalCluster};
use tools::demo::{DemoCluster, DemoJob, DemoSetup, FakeGpuSite, PluginFiles, build_plugins, default_project_dir, demo_energy_toml, format_table, parse_app_clock_mhz};

/// `#define SLURM_VERSION_NUMBER 0x180b05` of the tree the plugins are built against -> `24.11.5`.
fn tree_release(src: &Path) -> Option<String> {
    let text = std::fs::read_to_string(src.join("slurm/slurm_version.h")).ok()?;
    let hex = text.lines().find_map(|l| l.strip_prefix("#define SLURM_VERSION_NUMBER "))?.trim().trim_start_matches("0x");
    let n = u32::from_str_radix(hex, 16).ok()?;
    Some(format!("{}.{:02}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff))
}

/// Whether `release` (`24.11.5`) is at least `major.minor`.
fn release_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// The plugins (debug) built against `src` (release `release`) in `<project>/target/plugin-builds/
/// <release>`: one place whatever `CARGO_TARGET_DIR` is, so that the runs for different releases
/// (each with its own target dir) reuse each other's plugin builds.
fn build_for(src: &Path, release: &str) -> PluginFiles {
    let project = default_project_dir();
    let dir = project.join("target").join("plugin-builds").join(release);
    build_plugins(&project, Some(src), false, Some(&dir)).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn bundle_smoke_test_on_this_release() {
    const TEST: &str = "bundle_smoke_test_on_this_release";
    if skip_live_test(TEST) {
        return;
    }
    let t0 = Instant::now();
    let Some(src) = std::env::var_os("SLURM_SRC_DIR").map(std::path::PathBuf::from) else {
        return skip_for(TEST, "SLURM_SRC_DIR is not set (tools/slurm-release.sh prints it)");
    };
    let running = slurm_release().expect("slurmctld -V");
    let built = tree_release(&src).unwrap_or_else(|| panic!("{} is not a configured Slurm tree", src.display()));
    assert_eq!(built, running, "the plugins would be built for Slurm {built} ({}) but the cluster runs {running}: set SLURM_ENERGY_SLURM_PREFIX and SLURM_SRC_DIR from the same `tools/slurm-release.sh` run", src.display());
    println!("Slurm {running}: plugins built against {}", src.display());

    let plugins = build_for(&src, &running);
    let gpu_files = plugins.gpu.clone().expect("gpu_nvml.so and acct_gather_energy_nvml.so built");
    let site = FakeGpuSite::create(&gpu_files).unwrap_or_else(|e| panic!("{e}"));
    let type_name = site.type_name.clone();
    // 24.11 adds gpu_p_usage_read: a task's GPU memory and utilisation as TRES usage.
    let usage_read = release_at_least(&running, 24, 11);
    let extra_slurm_conf = if usage_read { vec!["AccountingStorageTRES=gres/gpu,gres/gpumem,gres/gpuutil".to_string()] } else { Vec::new() };
    let setup = DemoSetup { plugins: Some(plugins), data_dir: Some(model::data::default_data_dir()), extra_slurm_conf, ..DemoSetup::default() };
    let energy_toml = std::fs::read_to_string(default_project_dir().join("etc/energy.toml")).expect("etc/energy.toml");
    let demo = DemoCluster::start(&demo_energy_toml(&energy_toml, None, None), &setup, Some(site)).unwrap_or_else(|e| panic!("{e}"));
    let cluster = &demo.cluster;
    println!("cluster up after {:.1} s", t0.elapsed().as_secs_f64());

    // GPU plugin: autodetection.
    let node = cluster.command("scontrol").args(["show", "node", "n1", "-o"]).output().expect("scontrol");
    let node = String::from_utf8_lossy(&node.stdout).into_owned();
    let slurmd_log = cluster.slurmd_log("n1");
    assert!(slurmd_log.contains(&format!("gpu/nvml: loaded (slurm-energy {}, Slurm {running})", env!("CARGO_PKG_VERSION"))), "our gpu/nvml was not loaded:\n{slurmd_log}");
    assert!(slurmd_log.contains("gpu/nvml: slurmd: 4 GPU(s) detected through NVML"), "no NVML detection:\n{slurmd_log}");
    assert!(node.contains(&format!("Gres=gpu:{type_name}:4")), "node's GRES are not NVML's:\n{node}");

    // SPANK: listed and validated.
    let help = cluster.command("sbatch").arg("--help").output().expect("sbatch --help");
    let help = String::from_utf8_lossy(&help.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    for want in ["--energy-policy=POLICY", "--energy-max-slowdown=RATIO", "--energy-share=allow|deny", "--energy-defer=DURATION", "--energy-tag=NAME"] {
        assert!(help.contains(want), "sbatch --help lacks {want}: {help}");
    }
    let bad = cluster.command("sbatch").args(["--energy-policy=turbo", "--wrap", "true"]).output().expect("sbatch");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && stderr.contains("allowed is performance, balanced or efficiency"), "a bad policy was not refused: {stderr}");

    // --gpu-freq on an srun step: the clock during the step, set by our gpu/nvml.
    // The step prints the fake NVML's line of its first GPU while it runs.
    let gpus = demo.gpus().expect("fake GPUs");
    let ctl = gpu_files.fake_nvml_ctl.display().to_string();
    let conf = gpus.config_path().display().to_string();
    let state_base = gpus.state_dir("n1").parent().expect("state dir").display().to_string();
    let step = |freq: &str| {
        format!("srun --gres=gpu:1 --gpu-freq={freq},verbose sh -c '{ctl} --config {conf} --state-dir {state_base}/$SLURMD_NODENAME show | grep \"^gpu ${{SLURM_STEP_GPUS%%,*}}:\"'\n")
    };
    let freq_job = cluster.sbatch(&["--gres=gpu:1", "-t", "5"], &format!("{}{}", step("low"), step("high"))).expect("sbatch --gpu-freq job");
    assert_eq!(cluster.wait_job_done(freq_job, Duration::from_secs(90)).expect("wait"), "COMPLETED");
    let out = cluster.job_output(freq_job).expect("job output");
    let clocks: Vec<u32> = out.lines().filter_map(parse_app_clock_mhz).collect();
    println!("--gpu-freq=low then high: application clocks {clocks:?} MHz");
    assert_eq!(clocks.len(), 2, "job output:\n{out}");
    assert!(clocks[0] < clocks[1], "--gpu-freq=low ran at {} MHz, high at {} MHz", clocks[0], clocks[1]);
    let nodes_log: String = ["n1", "n2", "n3"].iter().map(|n| cluster.slurmd_log(n)).collect();
    assert!(
        nodes_log.lines().any(|l| l.contains(&format!("gpu/nvml: step {freq_job}.0: GPU")) && l.contains("for --gpu-freq=low")),
        "gpu/nvml logged no clock for step {freq_job}.0:\n{nodes_log}"
    );

    if usage_read {
        // The step's task holds 1 GiB on its GPU (the fake NVML lists it as a compute process)
        // across two jobacct_gather polls (JobAcctGatherFrequency=task=5).
        let hold = format!(
            "srun --gres=gpu:1 sh -c 'c=\"{ctl} --config {conf} --state-dir {state_base}/$SLURMD_NODENAME\"; g=${{SLURM_STEP_GPUS%%,*}}; $c set-procs $g $$:1073741824; sleep 12; $c set-procs $g'\n"
        );
        let job = cluster.sbatch(&["--gres=gpu:1", "-t", "5"], &hold).expect("sbatch gpumem job");
        assert_eq!(cluster.wait_job_done(job, Duration::from_secs(90)).expect("wait"), "COMPLETED");
        cluster.wait_accounted(job, Duration::from_secs(30)).expect("accounted");
        let out = cluster.command("sacct").args(["-n", "-P", "-j", &format!("{job}.0"), "-o", "TRESUsageInMax"]).output().expect("sacct");
        let usage = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("gpu_p_usage_read: step {job}.0 TRESUsageInMax {}", usage.trim());
        let gpumem = usage.split(',').find_map(|kv| kv.trim().strip_prefix("gres/gpumem=")).unwrap_or("");
        assert!(gpumem == "1G" || gpumem == "1024M", "step {job}.0 shows gres/gpumem={gpumem:?}, want 1 GiB: {usage}");
    }

    // sched/energy: hinted jobs start with a decision record; sacct has their GPU energy.
    let workload = vec![
        DemoJob::new("perf", 2, 3, &["--energy-policy=performance"]),
        DemoJob::new("eff", 1, 3, &["--energy-policy=efficiency", "--energy-max-slowdown=1.5"]),
        DemoJob::new("plain", 1, 3, &[]),
    ];
    let rows = demo.run_workload(&workload, Duration::from_secs(180), false).unwrap_or_else(|e| panic!("{e}"));
    let table = format_table(&rows);
    println!("{table}");
    for (row, job) in rows.iter().zip(&workload) {
        assert_eq!(row.state, "COMPLETED", "{table}");
        let want = job.hints.iter().find_map(|h| h.strip_prefix("--energy-policy=")).unwrap_or("balanced");
        assert!(row.decision.starts_with(&format!("energy:policy={want} ")), "job {} has no decision record for {want}: {table}", row.job_id);
        assert!(row.decision.contains(&format!("nodes={}", row.nodes)), "{table}");
        let energy_j = row.energy_j.unwrap_or(0.0);
        assert!(energy_j >= 41.0 * f64::from(job.gpus) * f64::from(job.sleep_s) * 0.9, "job {}: GPU energy {energy_j} J in sacct: {table}", row.job_id);
    }
    demo.stop().expect("stop");
    println!("smoke test on Slurm {running}: {:.1} s", t0.elapsed().as_secs_f64());
}

/// A build for another release does not load: slurmctld refuses sched/energy and sbatch refuses
/// the SPANK plugin, each with Slurm's own message naming the plugin's release.
/// `SLURM_ENERGY_OTHER_SRC_DIR` names the configured tree of a release other than the one the
/// cluster runs.
#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn a_build_for_another_release_is_refused_with_slurms_message() {
    const TEST: &str = "a_build_for_another_release_is_refused_with_slurms_message";
    if skip_live_test(TEST) {
        return;
    }
    let Some(other_src) = std::env::var_os("SLURM_ENERGY_OTHER_SRC_DIR").map(std::path::PathBuf::from) else {
        return skip_for(TEST, "SLURM_ENERGY_OTHER_SRC_DIR names no Slurm tree of another release");
    };
    let running = slurm_release().expect("slurmctld -V");
    let other = tree_release(&other_src).unwrap_or_else(|| panic!("{} is not a configured Slurm tree", other_src.display()));
    assert_ne!(other, running, "SLURM_ENERGY_OTHER_SRC_DIR must be another release than the cluster's");
    let plugins = build_for(&other_src, &other);
    let plugin_dir = tempfile::Builder::new().prefix("slurm-energy-other-").tempdir().expect("temp dir");
    std::fs::copy(&plugins.sched_energy, plugin_dir.path().join("sched_energy.so")).expect("copy sched_energy.so");
    std::fs::copy(&plugins.spank_energy, plugin_dir.path().join("spank_energy.so")).expect("copy spank_energy.so");

    // slurmctld: plugin_load_from_file() compares major, minor and micro.
    let refused = LocalCluster::start(ClusterConfig {
        nodes: 1,
        with_accounting: false,
        plugin_dir: Some(plugin_dir.path().to_path_buf()),
        sched_type: "sched/energy".into(),
        scheduler_parameters: Some("sched_interval=-1,defer".into()),
        ..ClusterConfig::default()
    });
    let err = match refused {
        Ok(cluster) => {
            let log = cluster.slurmctld_log();
            drop(cluster);
            panic!("slurmctld {running} started with sched/energy built for {other}:\n{log}")
        }
        Err(e) => e.to_string(),
    };
    let want = format!("Incompatible Slurm plugin {}/sched_energy.so version ({other})", plugin_dir.path().display());
    println!("slurmctld {running} refuses the {other} build: {}", err.lines().find(|l| l.contains("Incompatible")).unwrap_or("?"));
    assert!(err.contains(&want), "no {want:?} in slurmctld's log:\n{err}");

    // SPANK plugins are compared by major and minor. slurmd refuses to start with a required
    // one of another release.
    let plugstack = format!("required {}\n", plugin_dir.path().join("spank_energy.so").display());
    let spank_cluster = |with_plugstack: bool| {
        LocalCluster::start(ClusterConfig {
            nodes: 1,
            gpus_per_node: 0,
            with_accounting: false,
            extra_files: if with_plugstack { vec![("plugstack.conf".to_string(), plugstack.clone())] } else { Vec::new() },
            ..ClusterConfig::default()
        })
    };
    let err = match spank_cluster(true) {
        Ok(cluster) => {
            drop(cluster);
            panic!("slurmd {running} started with a required SPANK plugin built for {other}")
        }
        Err(e) => e.to_string(),
    };
    let want = "spank_energy.so: Incompatible plugin version";
    println!("slurmd {running} refuses the {other} SPANK plugin: {}", err.lines().find(|l| l.contains(want)).unwrap_or("?"));
    assert!(err.contains(want), "no {want:?} in slurmd's log:\n{err}");

    // sbatch reads plugstack.conf when it runs: the same refusal for the user.
    let cluster = spank_cluster(false).unwrap_or_else(|e| panic!("cluster did not start: {e}"));
    cluster.write_conf_file("plugstack.conf", &plugstack).expect("write plugstack.conf");
    let out = cluster.command("sbatch").args(["--energy-policy=efficiency", "--wrap", "true"]).output().expect("sbatch");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    cluster.stop().expect("stop");
    println!("sbatch {running} with the {other} SPANK plugin: {}", stderr.lines().find(|l| l.contains(want)).unwrap_or("?"));
    assert!(!out.status.success(), "sbatch ran with a SPANK plugin of {other}: {stderr}");
    assert!(stderr.contains(want), "Slurm's message is missing: {stderr}");
}
