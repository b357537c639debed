//! The V100, A100 and H100 the fake libnvidia-ml.so plays, through `NvmlGpu` (nvml-wrapper):
//! their tables, their support matrices as NVML return codes, and the arbiter choosing and
//! undoing each GPU's control, asserted on the fake's state file.

mod support;

use gpu_control::arbiter::{Applied, Arbiter, Source, StepKey};
use gpu_control::clock_control::ClockControl;
use gpu_control::{AppClocksMhz, GpuControl, GpuErrorKind};
use support::FakeMachine;

const MIXED: &str = "\
gpu_count = 3
model.1 = A100
model.2 = H100
";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").map(|r| r.split_whitespace().nth(1) == Some("0"))))
        .unwrap_or(false)
}

#[test]
fn each_model_reports_its_own_tables() {
    let m = FakeMachine::new("gen-tables", MIXED);
    let gpus = m.open();
    let names: Vec<String> = (0..3).map(|i| gpus.name(i).unwrap()).collect();
    assert_eq!(names, ["Tesla V100-SXM2-32GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]);
    let defaults: Vec<AppClocksMhz> = (0..3).map(|i| gpus.default_application_clocks_mhz(i).unwrap()).collect();
    assert_eq!(defaults.iter().map(|c| (c.memory_mhz, c.graphics_mhz)).collect::<Vec<_>>(), [(877, 1312), (1215, 1410), (2619, 1980)]);
    let a100 = gpus.supported_graphics_clocks_mhz(1, 1215).unwrap();
    assert_eq!((a100.len(), a100.first(), a100.last()), (81, Some(&1410), Some(&210)));
    assert_eq!(gpus.supported_graphics_clocks_mhz(1, 877).unwrap_err().kind, GpuErrorKind::NotFound, "the V100's memory clock is not the A100's");
    let ranges: Vec<(u32, u32, u32)> = (0..3)
        .map(|i| {
            let r = gpus.power_limit_range_mw(i).unwrap();
            (r.min_mw, r.max_mw, gpus.default_power_limit_mw(i).unwrap())
        })
        .collect();
    assert_eq!(ranges, [(150_000, 300_000, 300_000), (100_000, 400_000, 400_000), (200_000, 700_000, 700_000)]);
    // The state file starts each GPU at its own defaults.
    let s = m.state();
    assert_eq!((s.gpus[2].app_graphics_clock_mhz, s.gpus[2].power_limit_mw), (1980, 700_000));
}

#[test]
fn the_support_matrix_answers_with_nvml_codes() {
    let m = FakeMachine::new("gen-matrix", &format!("{MIXED}locked_clocks.0 = no_permission\npower_limit.1 = not_supported\n"));
    let gpus = m.open();
    // H100: no application clocks (set and reset).
    let e = gpus.set_application_clocks_mhz(2, AppClocksMhz { memory_mhz: 2619, graphics_mhz: 1500 }).unwrap_err();
    assert_eq!((e.kind, e.call), (GpuErrorKind::NotSupported, "nvmlDeviceSetApplicationsClocks"));
    assert_eq!(gpus.reset_application_clocks(2).unwrap_err().kind, GpuErrorKind::NotSupported);
    gpus.set_locked_clocks_mhz(2, 345, 1500).unwrap();
    assert_eq!(m.state().gpus[2].locked_clocks_mhz, Some((345, 1500)));
    gpus.reset_locked_clocks(2).unwrap();
    // V100 with locked clocks restricted by the admin.
    let e = gpus.set_locked_clocks_mhz(0, 135, 945).unwrap_err();
    assert_eq!((e.kind, e.call), (GpuErrorKind::NoPermission, "nvmlDeviceSetGpuLockedClocks"));
    gpus.set_application_clocks_mhz(0, AppClocksMhz { memory_mhz: 877, graphics_mhz: 945 }).unwrap();
    // A100 without power capping here; its application clocks still work (Ampere).
    assert_eq!(gpus.set_power_limit_mw(1, 200_000).unwrap_err().kind, GpuErrorKind::NotSupported);
    gpus.set_application_clocks_mhz(1, AppClocksMhz { memory_mhz: 1215, graphics_mhz: 1005 }).unwrap();
    // Nothing refused was written.
    let s = m.state();
    assert_eq!((s.gpus[0].locked_clocks_mhz, s.gpus[1].power_limit_mw, s.gpus[2].app_graphics_clock_mhz), (None, 400_000, 1980));
    assert_eq!((s.gpus[0].app_graphics_clock_mhz, s.gpus[1].app_graphics_clock_mhz), (945, 1005));
}

#[test]
fn setters_need_root_when_the_config_says_so() {
    let m = FakeMachine::new("gen-root", "set_requires_root = true\nmodel = A100\n");
    let gpus = m.open();
    let result = gpus.set_power_limit_mw(0, 250_000);
    if is_root() {
        result.unwrap();
        assert_eq!(m.state().gpus[0].power_limit_mw, 250_000);
    } else {
        assert_eq!(result.unwrap_err().kind, GpuErrorKind::NoPermission);
        assert_eq!(m.state().gpus[0].power_limit_mw, 400_000);
    }
    // Readers never need root.
    assert_eq!(gpus.default_power_limit_mw(0).unwrap(), 400_000);
}

#[test]
fn the_arbiter_gives_each_gpu_its_control_and_restores_it_after_a_step_dies() {
    // V100 with locked clocks restricted: application clocks. A100: locked clocks. H100 with
    // locked clocks restricted and no application clocks: power limit.
    let m = FakeMachine::new("gen-arbiter", &format!("{MIXED}locked_clocks.0 = no_permission\nlocked_clocks.2 = no_permission\n"));
    let gpus = m.open();
    let ledger = m.dir.join("ledger");
    let arb = Arbiter::open(&ledger).unwrap();
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let step = StepKey::for_process(41, 0, "n1", child.id()).unwrap();
    let wanted = [
        (0, AppClocksMhz { memory_mhz: 877, graphics_mhz: 945 }),
        (1, AppClocksMhz { memory_mhz: 1215, graphics_mhz: 1005 }),
        (2, AppClocksMhz { memory_mhz: 2619, graphics_mhz: 990 }),
    ];
    let out = arb.request_each(&gpus, &step, &wanted, Source::Policy).unwrap();
    assert!(out.gpu_errors.is_empty(), "{:?}", out.gpu_errors);
    let chosen: Vec<ClockControl> = out.controls.iter().map(|(_, c, _)| *c).collect();
    assert_eq!(chosen, [ClockControl::ApplicationClocks, ClockControl::LockedClocks, ClockControl::PowerLimit]);
    let lines = out.describe_controls();
    assert!(lines[2].contains("power limit") && lines[2].contains("not available") && lines[2].contains("permission"), "{lines:?}");
    assert_eq!(out.applied[2], (2, Applied::PowerLimit { limit_mw: 350_000 }));
    let s = m.state();
    assert_eq!(s.gpus[0].app_graphics_clock_mhz, 945);
    assert_eq!(s.gpus[1].locked_clocks_mhz, Some((210, 1005)));
    assert_eq!(s.gpus[1].app_graphics_clock_mhz, 1410, "locked, not application clocks");
    assert_eq!(s.gpus[2].power_limit_mw, 350_000);
    // The step's slurmstepd dies; slurmd's repair undoes each GPU with its own control.
    child.kill().unwrap();
    child.wait().unwrap();
    let out = arb.repair(&gpus).unwrap();
    assert_eq!(out.repaired_steps.len(), 1);
    assert!(out.gpu_errors.is_empty(), "{:?}", out.gpu_errors);
    let s = m.state();
    assert_eq!(s.gpus[0].app_graphics_clock_mhz, 1312);
    assert_eq!(s.gpus[1].locked_clocks_mhz, None);
    assert_eq!(s.gpus[2].power_limit_mw, 700_000);
    assert!(arb.ledger().unwrap().gpus.is_empty());
}

#[test]
fn locked_clocks_take_nvmls_symbolic_bounds_and_models_report_their_compute_capability() {
    use nvml_wrapper::Nvml;
    use nvml_wrapper::enum_wrappers::device::ClockLimitId;
    use nvml_wrapper::enums::device::GpuLockedClocksSetting;
    use nvml_wrapper::error::NvmlError;

    let m = FakeMachine::new("gen-symbolic", MIXED);
    let nvml = Nvml::builder().lib_path(m.lib.as_os_str()).init().expect("init the fake");
    let capabilities: Vec<(i32, i32)> = (0..3)
        .map(|i| {
            let c = nvml.device_by_index(i).unwrap().cuda_compute_capability().unwrap();
            (c.major, c.minor)
        })
        .collect();
    assert_eq!(capabilities, [(7, 0), (8, 0), (9, 0)]);
    let mut h100 = nvml.device_by_index(2).unwrap();
    h100.set_gpu_locked_clocks(GpuLockedClocksSetting::Symbolic { lower_bound: ClockLimitId::Tdp, upper_bound: ClockLimitId::Tdp }).unwrap();
    assert_eq!(m.state().gpus[2].locked_clocks_mhz, Some((345, 1980)), "TDP bounds: the whole range here");
    h100.set_gpu_locked_clocks(GpuLockedClocksSetting::Symbolic { lower_bound: ClockLimitId::Unlimited, upper_bound: ClockLimitId::Unlimited }).unwrap();
    assert_eq!(m.state().gpus[2].locked_clocks_mhz, None, "unlimited/unlimited unlocks");
    let e = h100.set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric { min_clock_mhz: 300, max_clock_mhz: 1000 }).unwrap_err();
    assert!(matches!(e, NvmlError::InvalidArg), "300 MHz is below the H100's lowest clock: {e:?}");
}
