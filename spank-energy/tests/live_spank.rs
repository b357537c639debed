//! Loads `spank_energy.so` into a real local Slurm cluster through plugstack.conf and checks what
//! users see: `sbatch --help` lists the options, bad values fail at submission with a message
//! that says what is allowed, good values are accepted and reach the job's SPANK environment.
//!
//! Skipped (with a printed reason) only when not root or when Slurm is not installed.

use std::process::Output;
use std::time::Duration;

use slurm_testcluster::{ClusterConfig, LocalCluster, skip_live_test};

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[cfg_attr(live_skip, ignore = "live cluster: needs root and slurmctld (tools/slurm-env.sh); SLURM_ENERGY_NO_LIVE=1 leaves it out")]
#[test]
fn spank_energy_options_in_sbatch() {
    if skip_live_test("spank_energy_options_in_sbatch") {
        return;
    }
    let plugstack = format!("required {} max_defer=2h max_slowdown=2.5\n", slurm_testcluster::require_built("libspank_energy.so").display());
    let cluster = LocalCluster::start(ClusterConfig {
        nodes: 1,
        gpus_per_node: 0,
        with_accounting: false,
        extra_files: vec![("plugstack.conf".to_string(), plugstack)],
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("cluster did not start: {e}"));

    // --help lists every option with what it allows (bounds from plugstack.conf).
    let out = cluster.command("sbatch").arg("--help").output().expect("sbatch --help");
    let (stdout, stderr) = text(&out);
    println!("sbatch --help (energy part):");
    for line in stdout.lines().skip_while(|l| !l.contains("provided by plugins")).take_while(|l| !l.contains("GPU scheduling")) {
        println!("  {line}");
    }
    assert!(out.status.success(), "sbatch --help failed: {stderr}");
    // sbatch wraps long descriptions: compare with whitespace collapsed.
    let flat = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "--energy-policy=POLICY",
        "performance, balanced or efficiency",
        "--energy-max-slowdown=RATIO",
        "1.0 to 2.5",
        "--energy-share=allow|deny",
        "--energy-defer=DURATION",
        "up to 2h",
        "--energy-tag=NAME",
    ] {
        assert!(flat.contains(want), "sbatch --help lacks {want:?}:\n{stdout}");
    }

    // Bad values fail at submission and say what is allowed.
    for (arg, allowed) in [
        ("--energy-policy=bogus", "allowed is performance, balanced or efficiency"),
        ("--energy-max-slowdown=3", "allowed is a number from 1.0 to 2.5"),
        ("--energy-share=maybe", "allowed is allow or deny"),
        ("--energy-defer=3h", "allowed is a duration up to 2h"),
        ("--energy-tag=a/b", "allowed is 1 to 64 letters"),
    ] {
        let out = cluster.command("sbatch").args([arg, "--wrap", "true"]).output().expect("sbatch");
        let (stdout, stderr) = text(&out);
        println!("sbatch {arg} --wrap true -> {:?}\n{}", out.status.code(), stderr.trim_end());
        assert!(!out.status.success(), "sbatch {arg} succeeded: {stdout}");
        assert!(stderr.contains(allowed), "sbatch {arg}: stderr lacks {allowed:?}:\n{stderr}");
    }
    // srun (local context) rejects too.
    let out = cluster.command("srun").args(["--energy-policy=turbo", "true"]).output().expect("srun");
    let (_, stderr) = text(&out);
    println!("srun --energy-policy=turbo true -> {:?}\n{}", out.status.code(), stderr.trim_end());
    assert!(!out.status.success());
    assert!(stderr.contains("allowed is performance, balanced or efficiency"), "{stderr}");

    // Good values are accepted; the job runs and sees them in its SPANK environment.
    let job = cluster
        .sbatch(
            &[
                "--energy-policy=efficiency",
                "--energy-share=deny",
                "--energy-defer=1h30m",
                "--energy-max-slowdown=1.5",
                "--energy-tag=resnet50",
                "--wrap",
                "env | grep -i energy | sort; sleep 1",
            ],
            "",
        )
        .unwrap_or_else(|e| panic!("sbatch with good hints failed: {e}"));
    let state = cluster.wait_job_done(job, Duration::from_secs(60)).expect("job done");
    let output = cluster.job_output(job).unwrap_or_default();
    println!("job {job}: {state}\n{output}");
    assert_eq!(state, "COMPLETED");
    // slurmstepd exports each spank_job_env entry with a `SLURM_SPANK_` prefix; slurmctld (and
    // sched/energy) see the entry itself, `_SLURM_SPANK_OPTION_energy_energy_<opt>=<value>`.
    for want in [
        "SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_policy=efficiency",
        "SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_share=deny",
        "SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_defer=1h30m",
        "SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_max_slowdown=1.5",
        "SLURM_SPANK__SLURM_SPANK_OPTION_energy_energy_tag=resnet50",
    ] {
        assert!(output.contains(want), "job environment lacks {want}:\n{output}");
    }

    // srun with a good value runs.
    let out = cluster.command("srun").args(["--energy-policy=performance", "true"]).output().expect("srun");
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "srun --energy-policy=performance true failed: {stderr}");

    cluster.stop().expect("cluster stop");
}
