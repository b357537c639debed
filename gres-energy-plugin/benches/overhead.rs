//! Overhead of the node plugins' real code against the fake libnvidia-ml.so (8 simulated
//! V100s, state in a temp dir):
//!
//! - step start + end on 8 GPUs: `--gpu-freq=1000` resolved and requested through the clock
//!   arbiter (ledger in a temp dir), then released (goal < 20 ms);
//! - one energy read per GPU: counter + power through `EnergyMeter` (goal < 1 ms).
//!
//! `cargo bench -p gres-energy-plugin --bench overhead` (needs SLURM_SRC_DIR like every build).

use std::path::Path;
use std::time::{Duration, Instant};

use gpu_control::NvmlGpu;
use gpu_control::arbiter::StepKey;
use gres_energy::clocks::{self, StepClocks};
use gres_energy::energy::EnergyMeter;
use gres_energy::errors::ErrorOnce;
use slurm_bindings::Logger;

static LOG: Logger = Logger::new("bench");
const GPUS: u32 = 8;

fn stats(name: &str, mut samples: Vec<Duration>, goal: Duration) {
    samples.sort_unstable();
    let n = samples.len();
    let mean = samples.iter().sum::<Duration>() / n as u32;
    let median = samples[n / 2];
    let p95 = samples[(n * 95 / 100).min(n - 1)];
    println!(
        "{name}: n={n} mean {:.3} ms, median {:.3} ms, p95 {:.3} ms, max {:.3} ms (goal < {:.0} ms: {})",
        mean.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3,
        samples[n - 1].as_secs_f64() * 1e3,
        goal.as_secs_f64() * 1e3,
        if median < goal { "met" } else { "MISSED" }
    );
}

fn main() {
    let built = fake_nvml::find_built_library().expect("libfake_nvml.so not built (cargo bench builds it as a dev-dependency)");
    let dir = tempfile::tempdir().expect("temp dir");
    let lib_dir = dir.path().join("lib");
    let lib = fake_nvml::install_library(&built, &lib_dir).expect("install fake NVML");
    std::fs::write(lib_dir.join("fake-nvml.conf"), format!("gpu_count = {GPUS}\n")).expect("fake config");
    let fake = fake_nvml::FakeNvml::for_library_dir(&lib_dir).expect("fake state");
    for g in 0..GPUS as usize {
        fake.set_utilization(g, 80, 20).expect("utilisation");
    }
    let nvml = NvmlGpu::open(&lib).expect("open fake NVML");
    let gpus: Vec<u32> = (0..GPUS).collect();
    let request = clocks::step_request("gpu:1000", None).expect("parse").expect("gpu part");
    let ledger = dir.path().join("ledger");
    let mut errs = ErrorOnce::new();

    // Step start + end through the arbiter, as gpu_p_step_hardware_init/fini do it: with the
    // ledger on disk (each operation is a durable write: fsync of file and directory) and on
    // tmpfs (/dev/shm), where fsync costs nothing.
    let shm = tempfile::tempdir_in("/dev/shm").ok();
    let mut ledgers = vec![("disk", ledger.clone())];
    if let Some(shm) = &shm {
        ledgers.push(("tmpfs", shm.path().join("ledger")));
    }
    for (kind, ledger) in &ledgers {
        let mut samples = Vec::new();
        for i in 0..50u32 {
            let key = StepKey::for_process(1000 + i, 0, "n1", std::process::id()).expect("step key");
            let t = Instant::now();
            let step = StepClocks::start(&nvml, ledger, Some(key), &gpus, &request, &mut errs, &LOG, "bench");
            step.finish(&nvml, &mut errs, &LOG, "bench");
            samples.push(t.elapsed());
        }
        stats(&format!("step start+end, 8 GPUs, arbitrated, ledger on {kind}"), samples, Duration::from_millis(20));
    }

    // The same without a ledger (direct set/reset, the fallback path; it logs that it is one).
    let mut samples = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let step = StepClocks::start(&nvml, Path::new("/nonexistent"), None, &gpus, &request, &mut errs, &LOG, "bench");
        step.finish(&nvml, &mut errs, &LOG, "bench");
        samples.push(t.elapsed());
    }
    stats("step start+end, 8 GPUs, direct", samples, Duration::from_millis(20));

    // One energy read (counter + power) of one GPU.
    let mut meter = EnergyMeter::start(&nvml, &[3], &mut errs, &LOG, "bench");
    let mut samples = Vec::new();
    for _ in 0..1000 {
        let t = Instant::now();
        std::hint::black_box(meter.read(&nvml, &mut errs, &LOG, "bench"));
        samples.push(t.elapsed());
    }
    stats("energy read, 1 GPU", samples, Duration::from_millis(1));

    // A step's poll over all 8 GPUs, per GPU.
    let mut meter = EnergyMeter::start(&nvml, &gpus, &mut errs, &LOG, "bench");
    let mut samples = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        std::hint::black_box(meter.read(&nvml, &mut errs, &LOG, "bench"));
        samples.push(t.elapsed() / GPUS);
    }
    stats("energy read of 8 GPUs, per GPU", samples, Duration::from_millis(1));
    assert_eq!(errs.reported(), 0, "NVML errors during the benchmark");
}
