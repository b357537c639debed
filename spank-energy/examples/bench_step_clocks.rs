//! Cost of a step's GPU clocks as slurmstepd pays it, through the plugin's own code against the
//! fake libnvidia-ml.so with 8 GPUs: at step start, open NVML, load energy.toml and the model
//! (fit from the data directory), work out the policy clock of each GPU and ask the arbiter
//! (ledger lock, read, atomic write, 8 clock sets); at step end, open NVML and release (8 resets).
//!
//! `cargo run --release -p spank-energy --example bench_step_clocks [-- ITERATIONS]`
//! (`SLURM_ENERGY_DATA` or `../shared/data` for the model's data; without it the model part
//! is skipped and reported as such).

use std::time::{Duration, Instant};

use gpu_control::arbiter::{Arbiter, Source, StepKey};
use gpu_control::NvmlGpu;
use model::config::HintDefaults;
use spank_energy::clocks::{self, Choice, ClockArgs, PolicyModel};

const GPUS: u32 = 8;

fn report(name: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let n = samples.len().max(1);
    let mean = samples.iter().sum::<Duration>() / n as u32;
    let p50 = samples.get(n / 2).copied().unwrap_or_default();
    let p99 = samples.get((n * 99 / 100).min(n - 1)).copied().unwrap_or_default();
    println!(
        "{name:<52} n={n:<5} mean {:>8.2} ms  p50 {:>8.2} ms  p99 {:>8.2} ms",
        mean.as_secs_f64() * 1e3,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("spank-energy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("fake-nvml.conf"), format!("gpu_count = {GPUS}\n"))?;
    let built = fake_nvml::find_built_library().ok_or("libfake_nvml.so not found; set FAKE_NVML_LIB")?;
    let lib = fake_nvml::install_library(&built, &dir)?;
    let data = model::data::default_data_dir();
    let have_data = data.join("zeus").is_dir();
    let args = ClockArgs {
        ledger_dir: dir.join("ledger"),
        nvml_lib: Some(lib.clone()),
        data_dir: have_data.then_some(data.clone()),
        energy_config: None,
        ..ClockArgs::default()
    };
    if !have_data {
        println!("no model data at {}: the policy clock is the default clock", data.display());
    }
    let gpus: Vec<u32> = (0..GPUS).collect();
    let values = [("policy".to_string(), "efficiency".to_string()), ("max_slowdown".to_string(), "2.0".to_string())].into();
    let hints = clocks::hints_from_values(&values, &HintDefaults::default());
    let choice = Choice::Hints(hints);
    let step = StepKey::for_process(1, 0, "n1", std::process::id())?;

    let (mut open, mut model_load, mut start_total, mut end_total, mut arbiter_only) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..iterations {
        // Step start, as remote::step_start does it.
        let t = Instant::now();
        let gpu = NvmlGpu::open(&lib)?;
        open.push(t.elapsed());
        let arb = Arbiter::open(&args.ledger_dir)?;
        let tm = Instant::now();
        let model = PolicyModel::load(&args)?;
        model_load.push(tm.elapsed());
        let ta = Instant::now();
        let (per_gpu, errors) = clocks::step_settings(&gpu, &gpus, &choice, Some(&model));
        if !errors.is_empty() || per_gpu.len() != GPUS as usize {
            return Err(format!("clocks: {errors:?}").into());
        }
        let out = arb.request_settings(&gpu, &step, &per_gpu, Source::Policy)?;
        if !out.gpu_errors.is_empty() {
            return Err(format!("request: {:?}", out.gpu_errors).into());
        }
        let arb_start = ta.elapsed();
        drop(gpu);
        start_total.push(t.elapsed());
        // Step end, as remote::step_end does it.
        let t = Instant::now();
        let gpu = NvmlGpu::open(&lib)?;
        let te = Instant::now();
        let out = arb.release(&gpu, &step)?;
        let restored = out.applied.len() == GPUS as usize && out.applied.iter().all(|(_, a)| *a == gpu_control::arbiter::Applied::Reset);
        if !out.gpu_errors.is_empty() || !restored {
            return Err("release did not restore the default".into());
        }
        arbiter_only.push(arb_start + te.elapsed());
        drop(gpu);
        end_total.push(t.elapsed());
    }
    let mut both: Vec<Duration> = start_total.iter().zip(&end_total).map(|(a, b)| *a + *b).collect();
    report("step start + end, 8 GPUs (total)", &mut both);
    report("  step start (open NVML, model, clocks, request)", &mut start_total);
    report("  step end (open NVML, release)", &mut end_total);
    report("  of which NVML open (nvmlInit_v2)", &mut open);
    report("  of which energy.toml (curves are fitted in the next line)", &mut model_load);
    report("  of which curve fit, per-GPU clocks, arbiter request/release", &mut arbiter_only);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
