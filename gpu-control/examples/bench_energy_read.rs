//! Latency of the GPU operations the plugins do most, through `NvmlGpu` against the fake
//! libnvidia-ml.so with 8 GPUs: one `total_energy_mj` read per GPU (what an energy poll costs),
//! and `set_locked_clocks_mhz` + `reset_locked_clocks` per GPU (what a step start/end costs).
//!
//! `cargo run --release -p gpu-control --example bench_energy_read [-- ITERATIONS]`
//!
//! The fake keeps its state in a file under a lock, so these figures measure the fake's file
//! I/O plus nvml-wrapper's overhead — an upper bound for the wrapper, not a figure for a real
//! driver.

use std::time::{Duration, Instant};

use gpu_control::{GpuControl, NvmlGpu};

const GPUS: u32 = 8;

fn report(name: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let n = samples.len().max(1);
    let mean = samples.iter().sum::<Duration>() / n as u32;
    let p99 = samples.get((n * 99 / 100).min(n - 1)).copied().unwrap_or_default();
    let p50 = samples.get(n / 2).copied().unwrap_or_default();
    println!(
        "{name:<44} n={n:<6} mean {:>8.1} us  p50 {:>8.1} us  p99 {:>8.1} us",
        mean.as_secs_f64() * 1e6,
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let dir = std::env::temp_dir().join(format!("gpu-control-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(fake_nvml::session::CONFIG_FILE_NAME), format!("gpu_count = {GPUS}\n"))?;
    let built = fake_nvml::find_built_library().ok_or("libfake_nvml.so not found; set FAKE_NVML_LIB")?;
    let lib = fake_nvml::install_library(&built, &dir)?;
    let gpus = NvmlGpu::open(&lib)?;
    if gpus.device_count()? != GPUS {
        return Err("the fake did not pick up its config".into());
    }

    for gpu in 0..GPUS {
        gpus.total_energy_mj(gpu)?; // warm up: page cache, first state file
    }
    let mut read = Vec::with_capacity(iterations * GPUS as usize);
    let mut sweep = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        for gpu in 0..GPUS {
            let t = Instant::now();
            std::hint::black_box(gpus.total_energy_mj(gpu)?);
            read.push(t.elapsed());
        }
        sweep.push(start.elapsed());
    }
    let mut set_reset = Vec::with_capacity(iterations * GPUS as usize);
    let mut set_reset_sweep = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        for gpu in 0..GPUS {
            let t = Instant::now();
            gpus.set_locked_clocks_mhz(gpu, 135, 1005)?;
            gpus.reset_locked_clocks(gpu)?;
            set_reset.push(t.elapsed());
        }
        set_reset_sweep.push(start.elapsed());
    }
    println!("NvmlGpu over the fake libnvidia-ml.so, {GPUS} GPUs, {iterations} rounds");
    report("total_energy_mj, one GPU", &mut read);
    report("total_energy_mj, all 8 GPUs", &mut sweep);
    report("set_locked_clocks_mhz + reset, one GPU", &mut set_reset);
    report("set_locked_clocks_mhz + reset, all 8 GPUs", &mut set_reset_sweep);
    drop(gpus);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
