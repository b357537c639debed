//! End to end: `NvmlGpu` (nvml-wrapper) against the fake libnvidia-ml.so, with assertions on
//! what the library reports and on the shared state file it writes.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use fake_nvml::{FailRule, GpuProcess as FakeProcess};
use gpu_control::gpu_freq::{SLURM_DEFAULT_GPU_FREQ_DEF, parse_gpu_freq, resolve_application_clocks};
use gpu_control::{AppClocksMhz, GpuControl, GpuErrorKind, NvmlGpu, UtilizationPct};
use support::FakeMachine;

const THREE_GPUS: &str = "\
gpu_count = 3
name.2 = Tesla V100-PCIE-16GB
uuid.1 = GPU-11111111-2222-3333-4444-555555555555
pci_bus_id.2 = 0000:3b:00.0
memory_total_bytes = 17179869184
";

#[test]
fn identity_comes_from_the_config() {
    let m = FakeMachine::new("identity", THREE_GPUS);
    let gpus = m.open();
    assert_eq!(gpus.device_count().unwrap(), 3);
    assert_eq!(gpus.name(0).unwrap(), "Tesla V100-SXM2-32GB");
    assert_eq!(gpus.name(2).unwrap(), "Tesla V100-PCIE-16GB");
    assert_eq!(gpus.uuid(1).unwrap(), "GPU-11111111-2222-3333-4444-555555555555");
    assert_eq!(gpus.uuid(0).unwrap(), "GPU-fa4e0000-0000-4000-8000-000000000000");
    assert_eq!(gpus.pci_bus_id(0).unwrap(), "00000000:06:00.0");
    assert_eq!(gpus.pci_bus_id(2).unwrap(), "00000000:3B:00.0");
    assert_eq!(gpus.minor_number(2).unwrap(), 2);
    assert_eq!(gpus.memory_used_total_bytes(0).unwrap().total_bytes, 16 << 30);
    // 40 CPUs over 2 NUMA nodes: GPU 0 near CPUs 0-19, GPU 2 near 20-39.
    assert_eq!(gpus.cpu_affinity(0).unwrap(), (0..20).collect::<Vec<u32>>());
    assert_eq!(gpus.cpu_affinity(2).unwrap(), (20..40).collect::<Vec<u32>>());
    // 3 GPUs: links 0 and 1 of GPU 0 go to GPUs 1 and 2.
    assert_eq!(gpus.nvlink_peers(0).unwrap(), ["00000000:07:00.0", "00000000:3B:00.0"]);
    assert!(gpus.driver_version().unwrap().starts_with("535."));

    let e = gpus.name(9).unwrap_err();
    assert_eq!((e.gpu, e.call, e.kind), (Some(9), "nvmlDeviceGetHandleByIndex_v2", GpuErrorKind::InvalidArgument));
    assert!(e.to_string().starts_with("GPU 9: nvmlDeviceGetHandleByIndex_v2: "), "{e}");
}

#[test]
fn loads_under_the_name_slurm_dlopens() {
    let m = FakeMachine::new("slurm-name", "gpu_count = 2");
    let gpus = NvmlGpu::open(&m.dir.join(fake_nvml::NVML_LINK_NAME)).unwrap();
    assert_eq!(gpus.device_count().unwrap(), 2);
}

#[test]
fn supported_clocks_are_complete_beyond_128_entries() {
    let m = FakeMachine::new("clocks", "gpu_count = 1");
    let gpus = m.open();
    assert_eq!(gpus.supported_memory_clocks_mhz(0).unwrap(), [877]);
    let graphics = gpus.supported_graphics_clocks_mhz(0, 877).unwrap();
    assert_eq!(graphics.len(), 187, "nvml-wrapper alone would stop at 128");
    assert_eq!((graphics[0], graphics[186]), (1530, 135));
    assert!(graphics.windows(2).all(|w| w[0] > w[1]), "descending");
    let e = gpus.supported_graphics_clocks_mhz(0, 5000).unwrap_err();
    assert_eq!(e.kind, GpuErrorKind::NotFound);
    assert_eq!(gpus.default_graphics_clock_mhz(0).unwrap(), 1312);
}

#[test]
fn clocks_set_are_in_the_state_file_and_reset_restores_defaults() {
    let m = FakeMachine::new("set-reset", "gpu_count = 2");
    let gpus = m.open();
    let defaults = gpus.default_application_clocks_mhz(1).unwrap();
    assert_eq!(defaults, AppClocksMhz { memory_mhz: 877, graphics_mhz: 1312 });

    gpus.set_locked_clocks_mhz(1, 300, 900).unwrap();
    gpus.set_application_clocks_mhz(1, AppClocksMhz { memory_mhz: 877, graphics_mhz: 1005 }).unwrap();
    let text = m.state_text();
    assert!(text.contains("gpu.1.locked_clocks_mhz = 300,900"), "{text}");
    assert!(text.contains("gpu.1.app_graphics_clock_mhz = 1005"), "{text}");
    assert!(text.contains("gpu.0.locked_clocks_mhz = none"), "GPU 0 untouched: {text}");
    assert_eq!(gpus.application_clocks_mhz(1).unwrap().graphics_mhz, 1005);
    // Idle: the bottom of the locked range; busy: the top.
    assert_eq!(gpus.current_graphics_clock_mhz(1).unwrap(), 300);
    m.fake.set_utilization(1, 50, 10).unwrap();
    assert_eq!(gpus.current_graphics_clock_mhz(1).unwrap(), 900);

    gpus.reset_locked_clocks(1).unwrap();
    gpus.reset_application_clocks(1).unwrap();
    let state = m.state();
    assert_eq!(state.gpus[1].locked_clocks_mhz, None);
    assert_eq!(state.gpus[1].app_graphics_clock_mhz, 1312);
    assert_eq!(gpus.application_clocks_mhz(1).unwrap(), defaults);
    assert_eq!(gpus.current_graphics_clock_mhz(1).unwrap(), 1312, "busy at the default application clock");

    // Out of range values are refused and change nothing.
    let e = gpus.set_locked_clocks_mhz(1, 900, 300).unwrap_err();
    assert_eq!((e.kind, e.call), (GpuErrorKind::InvalidArgument, "nvmlDeviceSetGpuLockedClocks"));
    let e = gpus.set_application_clocks_mhz(1, AppClocksMhz { memory_mhz: 877, graphics_mhz: 1001 }).unwrap_err();
    assert_eq!(e.kind, GpuErrorKind::InvalidArgument);
    assert_eq!(m.state().gpus[1].locked_clocks_mhz, None);
}

#[test]
fn energy_counter_is_monotonic_and_integrates_power() {
    let m = FakeMachine::new("energy", "gpu_count = 2");
    let gpus = m.open();
    assert_eq!(gpus.power_usage_mw(0).unwrap(), 41_000, "idle");
    m.fake.set_utilization(0, 100, 40).unwrap();
    gpus.set_locked_clocks_mhz(0, 1530, 1530).unwrap();
    assert_eq!(gpus.power_usage_mw(0).unwrap(), 250_000, "100 % at the highest clock");

    let start = Instant::now();
    let e0 = gpus.total_energy_mj(0).unwrap();
    let mut last = e0;
    while start.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(20));
        let e = gpus.total_energy_mj(0).unwrap();
        assert!(e >= last, "energy went back from {last} to {e} mJ");
        last = e;
    }
    let e1 = gpus.total_energy_mj(0).unwrap();
    let elapsed_s = start.elapsed().as_secs_f64();
    let expected_mj = 250_000.0 * elapsed_s;
    let measured_mj = (e1 - e0) as f64;
    let error = (measured_mj - expected_mj).abs() / expected_mj;
    assert!(error < 0.05, "measured {measured_mj} mJ, expected {expected_mj:.0} mJ over {elapsed_s:.3} s ({:.1} %)", error * 100.0);

    // The other GPU stayed idle: 41 W.
    let idle_mj = gpus.total_energy_mj(1).unwrap() as f64;
    assert!(idle_mj > 0.0);
    // Power follows the documented formula at the default clock and 50 %.
    gpus.reset_locked_clocks(0).unwrap();
    m.fake.set_utilization(0, 50, 0).unwrap();
    let expected_mw = 41_000.0 + 209_000.0 * 0.5 * (1312.0f64 / 1530.0).powi(2);
    assert_eq!(f64::from(gpus.power_usage_mw(0).unwrap()), expected_mw.round());
}

#[test]
fn utilization_processes_and_memory_set_by_the_test_read_back() {
    let m = FakeMachine::new("util", "gpu_count = 2");
    let gpus = m.open();
    assert_eq!(gpus.utilization_pct(1).unwrap(), UtilizationPct { gpu_pct: 0, memory_pct: 0 });
    m.fake.set_utilization(1, 73, 21).unwrap();
    assert_eq!(gpus.utilization_pct(1).unwrap(), UtilizationPct { gpu_pct: 73, memory_pct: 21 });
    assert_eq!(gpus.utilization_pct(0).unwrap().gpu_pct, 0);

    assert!(gpus.compute_processes(1).unwrap().is_empty());
    m.fake
        .set_processes(1, vec![
            FakeProcess { pid: 4242, used_memory_bytes: 3 << 30, sm_util_pct: None },
            FakeProcess { pid: 7, used_memory_bytes: 1 << 30, sm_util_pct: None },
        ])
        .unwrap();
    let procs = gpus.compute_processes(1).unwrap();
    assert_eq!(procs.iter().map(|p| (p.pid, p.used_memory_bytes)).collect::<Vec<_>>(), [(4242, Some(3 << 30)), (7, Some(1 << 30))]);
    assert_eq!(gpus.memory_used_total_bytes(1).unwrap().used_bytes, 4 << 30);
    // No per-process samples: what a driver without them answers.
    assert_eq!(gpus.process_sm_utilization_pct(1, 0).unwrap_err().kind, GpuErrorKind::NotFound);
}

#[test]
fn per_process_utilisation_through_nvml_wrapper() {
    let m = FakeMachine::new("proc-util", "gpu_count = 2");
    let gpus = m.open();
    m.fake
        .set_processes(0, vec![
            FakeProcess { pid: 11, used_memory_bytes: 1, sm_util_pct: Some(60) },
            FakeProcess { pid: 12, used_memory_bytes: 1, sm_util_pct: Some(25) },
            FakeProcess { pid: 13, used_memory_bytes: 1, sm_util_pct: None },
        ])
        .unwrap();
    let mut samples: Vec<(u32, u32)> = gpus.process_sm_utilization_pct(0, 0).unwrap().iter().map(|s| (s.pid, s.sm_pct)).collect();
    samples.sort_unstable();
    assert_eq!(samples, [(11, 60), (12, 25)]);
    m.fake.inject_failure(fake_nvml::FailRule::parse("nvmlDeviceGetProcessUtilization:NOT_SUPPORTED").unwrap()).unwrap();
    assert_eq!(gpus.process_sm_utilization_pct(0, 0).unwrap_err().kind, GpuErrorKind::NotSupported);
}

#[test]
fn power_limits() {
    let m = FakeMachine::new("power-limit", "gpu_count = 1");
    let gpus = m.open();
    let range = gpus.power_limit_range_mw(0).unwrap();
    assert_eq!((range.min_mw, range.max_mw), (150_000, 300_000));
    assert_eq!(gpus.default_power_limit_mw(0).unwrap(), 300_000);
    gpus.set_power_limit_mw(0, 200_000).unwrap();
    assert_eq!(gpus.power_limit_mw(0).unwrap(), 200_000);
    assert_eq!(gpus.set_power_limit_mw(0, 10).unwrap_err().kind, GpuErrorKind::InvalidArgument);
    // The limit caps the simulated draw.
    m.fake.set_utilization(0, 100, 0).unwrap();
    gpus.set_locked_clocks_mhz(0, 1530, 1530).unwrap();
    assert_eq!(gpus.power_usage_mw(0).unwrap(), 200_000);
}

#[test]
fn injected_errors_fail_the_named_call_only() {
    let m = FakeMachine::new("fail", "gpu_count = 2");
    let gpus = m.open();
    m.fake.inject_failure(FailRule::parse("nvmlDeviceSetGpuLockedClocks@1:NO_PERMISSION").unwrap()).unwrap();
    assert!(m.state_text().contains("fail = nvmlDeviceSetGpuLockedClocks@1:NO_PERMISSION"));

    let e = gpus.set_locked_clocks_mhz(1, 500, 1000).unwrap_err();
    assert_eq!((e.gpu, e.call, e.kind), (Some(1), "nvmlDeviceSetGpuLockedClocks", GpuErrorKind::NoPermission));
    gpus.set_locked_clocks_mhz(0, 500, 1000).unwrap();
    gpus.set_application_clocks_mhz(1, AppClocksMhz { memory_mhz: 877, graphics_mhz: 1005 }).unwrap();
    assert!(gpus.total_energy_mj(1).is_ok());

    // Every call, with another code.
    m.fake.inject_failure(FailRule::parse("*:GPU_IS_LOST").unwrap()).unwrap();
    let e = gpus.power_usage_mw(0).unwrap_err();
    assert_eq!(e.kind, GpuErrorKind::GpuLost);
    assert!(gpus.device_count().is_err());

    m.fake.clear_failures().unwrap();
    assert_eq!(gpus.device_count().unwrap(), 2);
    gpus.set_locked_clocks_mhz(1, 500, 1000).unwrap();

    // A failing init: the library opens, NVML does not.
    m.fake.inject_failure(FailRule::parse("nvmlInit:DRIVER_NOT_LOADED").unwrap()).unwrap();
    drop(gpus);
    let e = NvmlGpu::open(&m.lib).err().expect("init must fail");
    assert_eq!((e.gpu, e.call, e.kind), (None, "nvmlInit_v2", GpuErrorKind::Library));
}

#[test]
fn gpu_freq_request_applied_through_nvml() {
    let m = FakeMachine::new("gpu-freq", "gpu_count = 1");
    let gpus = m.open();
    let request = parse_gpu_freq("medium,verbose").unwrap().or_defaults(&SLURM_DEFAULT_GPU_FREQ_DEF);
    let clocks = resolve_application_clocks(&request, &gpus, 0).unwrap();
    // Element (187 - 1) / 2 = 93 of the ladder: floor(1530 - 93 * 7.5) = 832.
    assert_eq!(clocks, AppClocksMhz { memory_mhz: 877, graphics_mhz: 832 });
    gpus.set_application_clocks_mhz(0, clocks).unwrap();
    assert_eq!(m.state().gpus[0].app_graphics_clock_mhz, 832);
    let low = resolve_application_clocks(&parse_gpu_freq("low").unwrap(), &gpus, 0).unwrap();
    assert_eq!(low.graphics_mhz, 135, "needs the full clock list");
    let near = resolve_application_clocks(&parse_gpu_freq("1000").unwrap(), &gpus, 0).unwrap();
    assert_eq!(near.graphics_mhz, 1005, "rounds up to the next supported clock");
}

const CHILD_DIR_ENV: &str = "GPU_CONTROL_TEST_CHILD_DIR";

/// Run only as the child of `state_is_shared_between_processes`.
#[test]
#[ignore = "child process of state_is_shared_between_processes"]
fn child_sets_clocks() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let m = FakeMachine::existing(std::path::Path::new(&dir));
    let gpus = m.open();
    gpus.set_locked_clocks_mhz(2, 405, 1005).unwrap();
    gpus.set_application_clocks_mhz(2, AppClocksMhz { memory_mhz: 877, graphics_mhz: 1102 }).unwrap();
    m.fake.set_utilization(2, 90, 30).unwrap();
}

#[test]
fn state_is_shared_between_processes() {
    let m = FakeMachine::new("cross-process", "gpu_count = 4");
    let gpus = m.open();
    assert_eq!(gpus.current_graphics_clock_mhz(2).unwrap(), 135, "idle before the child runs");

    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_sets_clocks", "--ignored", "--test-threads=1"])
        .env(CHILD_DIR_ENV, &m.dir)
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "child failed: {}\n{}{}",
        child.status,
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(String::from_utf8_lossy(&child.stdout).contains("1 passed"), "the child test ran");

    // What the child set through its own copy of the library is what this process reads.
    assert_eq!(gpus.utilization_pct(2).unwrap(), UtilizationPct { gpu_pct: 90, memory_pct: 30 });
    assert_eq!(gpus.current_graphics_clock_mhz(2).unwrap(), 1005);
    assert_eq!(gpus.application_clocks_mhz(2).unwrap().graphics_mhz, 1102);
    assert_eq!(m.state().gpus[2].locked_clocks_mhz, Some((405, 1005)));
    assert_eq!(m.state().gpus[1].locked_clocks_mhz, None);
}
