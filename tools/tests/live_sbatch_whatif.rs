//! `sbatch --energy-whatif` on the demo cluster (spank_energy with `whatif=` naming the
//! slurm-energy binary under test): sbatch prints the what-if of the job as its command line,
//! environment and script's `#SBATCH` lines describe it, exits 0 and submits nothing; a script on
//! standard input, an option the what-if refuses and salloc fail without submitting anything.
//!
//! Skipped (with a printed reason) when not root or Slurm is missing; under `CI=true` it fails.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use slurm_testcluster::{LocalCluster, skip_for, skip_live_test};
use tools::demo::{DemoCluster, DemoSetup, FakeGpuSite, PluginFiles, build_plugins, default_project_dir};

const TEST: &str = "sbatch_energy_whatif_prints_and_submits_nothing";

fn text(o: &Output) -> String {
    format!("status {:?}\nstdout:\n{}\nstderr:\n{}", o.status.code(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// No job was ever submitted (the job table is empty).
fn no_jobs(cluster: &LocalCluster) {
    let out = cluster.command("squeue").args(["-h", "-a", "-t", "all", "-o", "%i"]).output().expect("squeue");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "", "a job was submitted: {}", text(&out));
}

fn run_with_stdin(mut cmd: Command, stdin: &str) -> Output {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    child.wait_with_output().expect("wait")
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn sbatch_energy_whatif_prints_and_submits_nothing() {
    if skip_live_test(TEST) {
        return;
    }
    let data_dir = model::data::default_data_dir();
    if !data_dir.join("zeus").is_dir() {
        return skip_for(TEST, "no measured data (zeus/) for sched/energy's predictor: set SLURM_ENERGY_DATA");
    }
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.ancestors().nth(3).expect("target dir").join("plugin-builds");
    let project = default_project_dir();
    let slurm_src = std::env::var_os("SLURM_SRC_DIR").map(PathBuf::from);
    let plugins: PluginFiles = build_plugins(&project, slurm_src.as_deref(), false, Some(&target)).unwrap_or_else(|e| panic!("plugins: {e}"));
    let gpu_files = plugins.gpu.clone().expect("the GPU plugins and the fake NVML are built");
    let site = FakeGpuSite::create(&gpu_files).unwrap_or_else(|e| panic!("fake GPUs: {e}"));
    let energy_toml = std::fs::read_to_string(project.join("etc/energy.toml")).expect("etc/energy.toml");
    let setup = DemoSetup { plugins: Some(plugins), data_dir: Some(data_dir), ..DemoSetup::default() };
    let demo = DemoCluster::start(&energy_toml, &setup, Some(site)).unwrap_or_else(|e| panic!("cluster: {e}"));
    let cluster = &demo.cluster;

    // The site names the binary in plugstack.conf (read by every sbatch run).
    let plugstack = cluster.conf_dir().join("plugstack.conf");
    let conf = std::fs::read_to_string(&plugstack).expect("plugstack.conf");
    let conf = conf.replacen("spank_energy.so", &format!("spank_energy.so whatif={}", env!("CARGO_BIN_EXE_slurm-energy")), 1);
    std::fs::write(&plugstack, &conf).expect("write plugstack.conf");

    let script = cluster.conf_dir().join("whatif-job.sh");
    std::fs::write(&script, "#!/bin/sh\n#SBATCH --gres=gpu:1\n#SBATCH -t 2\nsleep 1\n").expect("script");
    let script = script.display().to_string();

    // 1. Printed, status 0, nothing submitted; the environment's and the script's options count.
    let out = cluster.command("sbatch").env("SBATCH_PARTITION", "debug").args(["--energy-whatif", "--energy-tag=bert", &script]).output().expect("sbatch");
    println!("{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("What-if for user") && stdout.contains("1 node(s) x 1 GPU(s)") && stdout.contains("time limit 2m00s"), "{}", text(&out));
    for p in ["performance", "balanced", "efficiency"] {
        assert!(stdout.lines().any(|l| l.starts_with(p)), "no {p} row: {}", text(&out));
    }
    assert!(stdout.contains("#SBATCH options read from"), "{}", text(&out));
    no_jobs(cluster);

    // 2. A script on standard input: sbatch has read it; refused, nothing submitted.
    let mut cmd = cluster.command("sbatch");
    cmd.args(["--energy-whatif", "--gres=gpu:1"]);
    let out = run_with_stdin(cmd, "#!/bin/sh\n#SBATCH -t 2\nsleep 1\n");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("standard input"), "{}", text(&out));
    no_jobs(cluster);

    // 3. An option the what-if does not model: its message, a failure, nothing submitted.
    let out = cluster.command("sbatch").args(["--energy-whatif", "--constraint=fast", &script]).output().expect("sbatch");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--constraint"), "{}", text(&out));
    no_jobs(cluster);

    // 4. salloc starts the job at once: refused with a pointer to slurm-energy whatif.
    let out = cluster.command("salloc").args(["--energy-whatif", "--gres=gpu:1", "-t", "1", "true"]).stdin(Stdio::null()).output().expect("salloc");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("slurm-energy whatif"), "{}", text(&out));
    no_jobs(cluster);

    // And without the option, the same sbatch submits.
    let id = cluster.sbatch(&[], &std::fs::read_to_string(&script).expect("script")).expect("sbatch");
    assert!(id > 0);
    demo.stop().expect("stop the cluster");
}
