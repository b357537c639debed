//! The GPU clock sched/energy chooses for a job reaches every step of the job, on every node of
//! it, with the job: sched/energy puts it into the job's SPANK environment when it starts the
//! job, slurmctld sends that with the prolog (`PrologFlags=Contain`), and spank_energy's job
//! prolog keeps it on each node for the job's steps. No step asks slurmctld for the job
//! (`sdiag` counts no `REQUEST_JOB_INFO_SINGLE` while the jobs run), and a clock the user puts
//! into the environment (`SLURM_SPANK_SLURM_ENERGY_CLOCK_MHZ`) is not taken for the decision.
//!
//! The demo cluster (sched/energy, spank_energy, gpu_nvml, acct_gather_energy/nvml over the
//! fake NVML, accounting); the plugins are built (debug) into `<target>/plugin-builds`.

use std::time::Duration;

use slurm_testcluster::skip_live_test;
use tools::demo::{DemoCluster, DemoSetup, FakeGpuSite, build_plugins, default_project_dir};

/// `count:` of one RPC type in `sdiag`'s per-message statistics (0 when not listed).
fn rpc_count(sdiag: &str, rpc: &str) -> u64 {
    sdiag
        .lines()
        .map(str::trim)
        .find(|l| l.split_whitespace().next() == Some(rpc))
        .and_then(|l| l.split("count:").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn decision_clock_reaches_every_step_on_every_node_with_the_job() {
    if skip_live_test("decision_clock_reaches_every_step_on_every_node_with_the_job") {
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.ancestors().nth(3).expect("target dir").join("plugin-builds");
    let project = default_project_dir();
    let plugins = build_plugins(&project, None, false, Some(&target)).unwrap_or_else(|e| panic!("{e}"));
    let gpus = FakeGpuSite::create(plugins.gpu.as_ref().expect("gpu_nvml.so built")).unwrap_or_else(|e| panic!("{e}"));
    let data = model::data::default_data_dir();
    assert!(data.join("zeus").is_dir(), "measured data missing at {}: without it no clock is lowered", data.display());
    let energy_toml = std::fs::read_to_string(project.join("etc").join("energy.toml")).expect("etc/energy.toml");
    let setup = DemoSetup { plugins: Some(plugins), data_dir: Some(std::fs::canonicalize(&data).unwrap_or(data)), ..DemoSetup::default() };
    let demo = DemoCluster::start(&energy_toml, &setup, Some(gpus)).unwrap_or_else(|e| panic!("{e}"));
    let c = &demo.cluster;
    let sdiag = || {
        let out = c.command("sdiag").output().expect("sdiag");
        assert!(out.status.success(), "sdiag: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let info_before = rpc_count(&sdiag(), "REQUEST_JOB_INFO_SINGLE");

    // A two-node batch job whose script runs a step on both nodes, submitted with a clock of
    // the user's own in the environment; and a two-node job of srun alone (no batch script).
    let hints = ["--energy-policy=efficiency", "--energy-max-slowdown=2.0"];
    let out = c
        .command("sbatch")
        .env("SLURM_SPANK_SLURM_ENERGY_CLOCK_MHZ", "600")
        .args(["--parsable", "-N2", "--gres=gpu:1", hints[0], hints[1], "--wrap", "sleep 2; srun -N2 sleep 3"])
        .output()
        .expect("sbatch");
    assert!(out.status.success(), "sbatch: {}", String::from_utf8_lossy(&out.stderr));
    let batch: u32 = String::from_utf8_lossy(&out.stdout).trim().split(';').next().and_then(|s| s.parse().ok()).expect("job id");
    let out = c
        .command("srun")
        .env("SLURM_SPANK_SLURM_ENERGY_CLOCK_MHZ", "600")
        .args(["-N2", "--gres=gpu:1", "-J", "interactive", hints[0], hints[1], "sleep", "3"])
        .output()
        .expect("srun");
    assert!(out.status.success(), "srun: {}", String::from_utf8_lossy(&out.stderr));
    // Waiting through slurmdbd (sacct), not slurmctld (scontrol show job is a job-info RPC).
    let state = c.wait_accounted(batch, Duration::from_secs(120)).expect("batch job ends");
    assert_eq!(state, "COMPLETED");
    let info_after = rpc_count(&sdiag(), "REQUEST_JOB_INFO_SINGLE");
    assert_eq!(info_after, info_before, "steps asked slurmctld for their job ({} REQUEST_JOB_INFO_SINGLE)", info_after - info_before);

    let acct = |args: &[&str]| {
        let out = c.command("sacct").args(["-n", "-X", "-P"]).args(args).output().expect("sacct");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let interactive: u32 = acct(&["--name", "interactive", "-o", "JobID"]).lines().next().and_then(|l| l.trim().parse().ok()).expect("srun's job in sacct");
    let default_mhz = 1312; // the fake V100's default application clock
    for job in [batch, interactive] {
        let rows = c.wait_accounted(job, Duration::from_secs(60)).expect("accounted");
        let record = acct(&["-j", &job.to_string(), "-o", "AdminComment"]);
        let clock = model::decision::recorded_clock_mhz(&record).unwrap_or_else(|| panic!("job {job} has no decision record: {record:?} ({rows})"));
        assert!(clock < default_mhz && clock != 600, "job {job}: the efficiency decision should lower the clock: {record}");
        let nodes = acct(&["-j", &job.to_string(), "-o", "NodeList"]);
        let steps: Vec<&str> = if job == batch { vec!["batch", "0"] } else { vec!["0"] };
        let mut seen_nodes = 0;
        for node in c.node_names() {
            let log = c.slurmd_log(&node);
            let decided = |step: &str| log.lines().any(|l| l.contains(&format!("job {job} step {step}: sched/energy decision {clock} MHz asks for GPU")));
            let ran_step_0 = decided("0");
            if ran_step_0 {
                seen_nodes += 1;
            }
            for step in &steps {
                assert!(!log.contains(&format!("job {job} step {step}: policy")), "job {job} step {step} on {node} followed its hints, not the decision");
            }
        }
        assert_eq!(seen_nodes, 2, "job {job} (nodes {nodes}): step 0 on both nodes at sched/energy's {clock} MHz");
        if job == batch {
            assert!(c.node_names().iter().any(|n| c.slurmd_log(n).contains(&format!("job {job} step batch: sched/energy decision {clock} MHz asks for GPU"))), "the batch step ran at the decision");
        }
    }
    demo.stop().expect("stop");
}
