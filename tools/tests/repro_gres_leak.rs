use std::time::{Duration, Instant};
use slurm_testcluster::Stop;
use tools::demo::{DemoCluster, DemoSetup, FakeGpuSite, build_plugins, default_project_dir};

fn once(sched: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe.ancestors().nth(3).expect("target dir").join("plugin-builds");
    let project = default_project_dir();
    let plugins = build_plugins(&project, None, false, Some(&target)).unwrap();
    let gpus = FakeGpuSite::create(plugins.gpu.as_ref().unwrap()).unwrap();
    let energy_toml = std::fs::read_to_string(project.join("etc").join("energy.toml")).unwrap();
    let setup = DemoSetup { plugins: Some(plugins), sched_type: Some(sched.into()), cpus_per_node: Some(16), ..DemoSetup::default() };
    let mut demo = DemoCluster::start(&energy_toml, &setup, Some(gpus)).unwrap();
    let sub = |n: u32, s: u32, hint: &str| for _ in 0..n { demo.cluster.sbatch(&["--gres=gpu:1", "-t", "3", "--no-requeue", hint, "--wrap", &format!("srun true; sleep {s}")], "").unwrap(); };
    sub(12, 4, "--energy-policy=performance");
    sub(6, 1, "--energy-policy=efficiency");
    sub(6, 1, "--energy-tag=x");
    std::thread::sleep(Duration::from_millis(1000));
    demo.cluster.restart_slurmctld_after(if std::env::var("KILL").is_ok() { Stop::Kill } else { Stop::Clean }).unwrap();
    let drain = |d: &DemoCluster| { let t = Instant::now(); loop { let o = d.cluster.command("squeue").args(["-h", "-o", "%i %T"]).output().unwrap(); let s = String::from_utf8_lossy(&o.stdout).to_string(); if s.trim().is_empty() { break; } if t.elapsed() > Duration::from_secs(60) { println!("{sched}: still queued: {s}"); break; } std::thread::sleep(Duration::from_secs(1)); } };
    drain(&demo);
    let o = demo.cluster.command("scontrol").args(["show", "node", "-d"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("AllocTRES") || l.contains("GresUsed") || l.contains("NodeName")).collect();
    println!("{sched} after drain:\n{}", lines.join("\n"));
    let o = demo.cluster.command("sacct").args(["-X", "-n", "-o", "JobID,State,Start,End"]).output().unwrap();
    println!("{}", String::from_utf8_lossy(&o.stdout));
    demo.stop().unwrap();
}

#[test]
fn repro() {
    once("sched/energy");
    once("sched/backfill");
}
