//! The three ways NVML can slow a GPU down, which one a GPU accepts, and how each is applied and
//! undone.
//!
//! | control | set | undo | on |
//! |---|---|---|---|
//! | [`ClockControl::LockedClocks`] | `nvmlDeviceSetGpuLockedClocks(lowest, clock)` | `nvmlDeviceResetGpuLockedClocks` | Volta and newer; what NVIDIA recommends on A100/H100 |
//! | [`ClockControl::ApplicationClocks`] | `nvmlDeviceSetApplicationsClocks(memory, clock)` | the clocks in force before, else `nvmlDeviceResetApplicationsClocks` | Kepler to Ampere; `NOT_SUPPORTED` on H100 |
//! | [`ClockControl::PowerLimit`] | `nvmlDeviceSetPowerManagementLimit(limit)` | the limit in force before | every data-centre GPU; the unit Zeus measured in |
//!
//! A GPU's control is **probed** the first time a step asks for a setting on it: the controls of
//! the [`ControlOrder`] are tried in turn (default: locked clocks, application clocks, power
//! limit), and the first that succeeds is the GPU's control until no step is left on it. A
//! control answering `NOT_SUPPORTED`, `NO_PERMISSION` or lacking its NVML function is skipped
//! (each skip is reported); any other failure (a lost GPU, an invalid value) stops the probe,
//! since another control would not fare better. When none works, the error is
//! [`GpuErrorKind::NotSupported`] with the call `no clock control` and every answer in its
//! reason: logged by the plugins, never a panic.
//!
//! Locked clocks are set as the range from the lowest supported clock up to the wanted clock:
//! a busy GPU runs at the wanted clock (as with application clocks) and an idle one may still
//! drop. Memory clocks are then left alone (A100 and H100 have one memory clock).
//!
//! A setting is a clock (what `--gpu-freq` and the planner's clock ladder give) and, when the
//! planner chose a step of its power-limit ladder, that limit. On a GPU controlled by its power
//! limit the limit is used as measured; a setting with only a clock is mapped to
//! `limit = default limit x clock / default clock` (clamped to the GPU's range). Dynamic power
//! grows at least linearly with the clock (`P ~ f V^2`), so a limit linear in the clock lets the
//! GPU reach at least the wanted clock: a `--gpu-freq` on such a GPU never slows a job more than
//! it asked.

use std::fmt;

use crate::control::{AppClocksMhz, GpuControl};
use crate::error::{GpuError, GpuErrorKind};

/// Environment variable (slurmd's, inherited by both plugins) naming the order in which controls
/// are tried, e.g. `power_limit,locked_clocks`.
pub const CONTROL_ORDER_ENV: &str = "SLURM_ENERGY_GPU_CONTROLS";

/// One way to slow a GPU down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClockControl {
    LockedClocks,
    ApplicationClocks,
    PowerLimit,
}

impl ClockControl {
    /// The name in ledgers, logs and [`CONTROL_ORDER_ENV`].
    pub fn as_str(self) -> &'static str {
        match self {
            ClockControl::LockedClocks => "locked_clocks",
            ClockControl::ApplicationClocks => "application_clocks",
            ClockControl::PowerLimit => "power_limit",
        }
    }

    pub fn parse(text: &str) -> Option<ClockControl> {
        match text.trim() {
            "locked_clocks" | "locked" => Some(ClockControl::LockedClocks),
            "application_clocks" | "application" | "app" => Some(ClockControl::ApplicationClocks),
            "power_limit" | "power" => Some(ClockControl::PowerLimit),
            _ => None,
        }
    }

    /// For log lines: `locked clocks`.
    pub fn describe(self) -> &'static str {
        match self {
            ClockControl::LockedClocks => "locked clocks",
            ClockControl::ApplicationClocks => "application clocks",
            ClockControl::PowerLimit => "power limit",
        }
    }
}

impl fmt::Display for ClockControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The controls to try, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlOrder(pub Vec<ClockControl>);

impl Default for ControlOrder {
    fn default() -> Self {
        ControlOrder(vec![ClockControl::LockedClocks, ClockControl::ApplicationClocks, ClockControl::PowerLimit])
    }
}

impl ControlOrder {
    /// `locked_clocks,application_clocks,power_limit` (a subset, any order, no repeats).
    pub fn parse(text: &str) -> Result<ControlOrder, String> {
        let mut out = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let c = ClockControl::parse(word).ok_or_else(|| format!("unknown GPU control {word:?} (locked_clocks, application_clocks, power_limit)"))?;
            if out.contains(&c) {
                return Err(format!("GPU control {word:?} named twice"));
            }
            out.push(c);
        }
        if out.is_empty() {
            return Err("no GPU control named".into());
        }
        Ok(ControlOrder(out))
    }

    /// `$SLURM_ENERGY_GPU_CONTROLS`, else the default order.
    pub fn from_env() -> Result<ControlOrder, String> {
        match std::env::var(CONTROL_ORDER_ENV) {
            Ok(v) if !v.trim().is_empty() => ControlOrder::parse(&v).map_err(|e| format!("{CONTROL_ORDER_ENV}: {e}")),
            _ => Ok(ControlOrder::default()),
        }
    }
}

/// What a step asks of a GPU: a clock, and the power limit of the planner's ladder step when
/// the clock came from one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Setting {
    pub clocks_mhz: AppClocksMhz,
    pub power_limit_mw: Option<u32>,
}

impl Setting {
    pub fn clocks(clocks_mhz: AppClocksMhz) -> Setting {
        Setting { clocks_mhz, power_limit_mw: None }
    }
}

/// What was done to a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Application clocks set to these.
    Set(AppClocksMhz),
    /// Graphics clock locked into `[min_mhz, max_mhz]`.
    Locked { min_mhz: u32, max_mhz: u32 },
    /// Power limit set.
    PowerLimit { limit_mw: u32 },
    /// Back to what was in force before (the default, or an admin's setting).
    Reset,
}

/// What a GPU's control must restore when no step is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prior {
    /// Application clocks in force before, when they differed from the defaults.
    pub clocks_mhz: Option<AppClocksMhz>,
    /// Power limit in force before.
    pub power_limit_mw: Option<u32>,
}

/// The power limit for a clock on a GPU (module docs): linear in the clock relative to the
/// default application clock, clamped to the GPU's range.
pub fn power_limit_for_clock_mw(gpu: &dyn GpuControl, index: u32, clock_mhz: u32) -> Result<u32, GpuError> {
    let range = gpu.power_limit_range_mw(index)?;
    let default_mw = gpu.default_power_limit_mw(index)?;
    let default_mhz = gpu.default_graphics_clock_mhz(index)?.max(1);
    let limit = (u64::from(default_mw) * u64::from(clock_mhz) / u64::from(default_mhz)).min(u64::from(u32::MAX)) as u32;
    Ok(limit.clamp(range.min_mw, range.max_mw.max(range.min_mw)))
}

/// Applies `setting` with `control`.
pub fn apply(gpu: &dyn GpuControl, index: u32, control: ClockControl, setting: Setting) -> Result<Applied, GpuError> {
    match control {
        ClockControl::ApplicationClocks => gpu.set_application_clocks_mhz(index, setting.clocks_mhz).map(|()| Applied::Set(setting.clocks_mhz)),
        ClockControl::LockedClocks => {
            let clocks = gpu.supported_graphics_clocks_mhz(index, setting.clocks_mhz.memory_mhz)?;
            let lowest = clocks.iter().copied().min().unwrap_or(setting.clocks_mhz.graphics_mhz);
            let (min_mhz, max_mhz) = (lowest.min(setting.clocks_mhz.graphics_mhz), setting.clocks_mhz.graphics_mhz);
            gpu.set_locked_clocks_mhz(index, min_mhz, max_mhz).map(|()| Applied::Locked { min_mhz, max_mhz })
        }
        ClockControl::PowerLimit => {
            let limit_mw = match setting.power_limit_mw {
                Some(l) => {
                    let r = gpu.power_limit_range_mw(index)?;
                    l.clamp(r.min_mw, r.max_mw.max(r.min_mw))
                }
                None => power_limit_for_clock_mw(gpu, index, setting.clocks_mhz.graphics_mhz)?,
            };
            gpu.set_power_limit_mw(index, limit_mw).map(|()| Applied::PowerLimit { limit_mw })
        }
    }
}

/// Undoes `control` on a GPU no step asks for any more.
pub fn restore(gpu: &dyn GpuControl, index: u32, control: ClockControl, prior: Prior) -> Result<Applied, GpuError> {
    log::debug!("GPU {index}: restoring {} to {prior:?}", control.as_str());
    match control {
        ClockControl::ApplicationClocks => match prior.clocks_mhz {
            Some(clocks) => gpu.set_application_clocks_mhz(index, clocks).map(|()| Applied::Set(clocks)),
            None => gpu.reset_application_clocks(index).map(|()| Applied::Reset),
        },
        // NVML cannot read locked clocks back, so an admin's lock is not known: unlock.
        ClockControl::LockedClocks => gpu.reset_locked_clocks(index).map(|()| Applied::Reset),
        ClockControl::PowerLimit => {
            let limit_mw = match prior.power_limit_mw {
                Some(l) => l,
                None => gpu.default_power_limit_mw(index)?,
            };
            gpu.set_power_limit_mw(index, limit_mw).map(|()| Applied::Reset)
        }
    }
}

/// What must be remembered before `control` first changes a GPU.
pub fn read_prior(gpu: &dyn GpuControl, index: u32, control: ClockControl) -> Prior {
    match control {
        ClockControl::ApplicationClocks => {
            let defaults = gpu.default_application_clocks_mhz(index).ok();
            let now = gpu.application_clocks_mhz(index).ok();
            Prior { clocks_mhz: now.filter(|n| defaults.is_some_and(|d| d != *n)), power_limit_mw: None }
        }
        ClockControl::LockedClocks => Prior::default(),
        ClockControl::PowerLimit => Prior { clocks_mhz: None, power_limit_mw: gpu.power_limit_mw(index).ok() },
    }
}

/// A failure that means "this control is not available here, try the next".
pub fn is_unavailable(e: &GpuError) -> bool {
    matches!(e.kind, GpuErrorKind::NotSupported | GpuErrorKind::NoPermission | GpuErrorKind::MissingFunction)
}

/// A probe's result: the control that worked (with what it did and what it must restore), and
/// the controls skipped before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probed {
    pub control: ClockControl,
    pub applied: Applied,
    pub prior: Prior,
    pub skipped: Vec<GpuError>,
}

/// Tries the controls of `order` until one applies `setting` (module docs).
pub fn probe_and_apply(gpu: &dyn GpuControl, index: u32, order: &ControlOrder, setting: Setting) -> Result<Probed, GpuError> {
    let mut skipped: Vec<GpuError> = Vec::new();
    for &control in &order.0 {
        let prior = read_prior(gpu, index, control);
        match apply(gpu, index, control, setting) {
            Ok(applied) => {
                log::debug!("GPU {index}: {} applied ({applied:?}; restores {prior:?})", control.as_str());
                return Ok(Probed { control, applied, prior, skipped });
            }
            Err(e) if is_unavailable(&e) => {
                log::debug!("GPU {index}: {} not available ({}: {}), trying the next control", control.as_str(), e.call, e.reason);
                skipped.push(e)
            }
            Err(e) => return Err(e),
        }
    }
    let tried: Vec<String> = skipped.iter().map(|e| format!("{}: {}", e.call, e.reason)).collect();
    Err(GpuError::new(Some(index), "no clock control", GpuErrorKind::NotSupported, format!("none of {} works here ({})", order_names(order), tried.join("; "))))
}

/// The highest graphics and the highest memory clock among `clocks` ("max wins" for each
/// clock: a job asking for a high graphics clock with a low memory clock must not lower another
/// job's memory clock). On GPUs with one memory clock (V100, A100, H100) the same as the
/// highest pair.
pub fn highest_clocks_mhz(clocks: impl IntoIterator<Item = AppClocksMhz>) -> Option<AppClocksMhz> {
    clocks.into_iter().reduce(|a, b| AppClocksMhz { memory_mhz: a.memory_mhz.max(b.memory_mhz), graphics_mhz: a.graphics_mhz.max(b.graphics_mhz) })
}

/// One setting for a GPU several jobs ask for: the highest clocks ([`highest_clocks_mhz`]), and
/// when any job's setting carries a power limit, the highest limit among them (a job without one
/// counts with the limit its clock maps to, when the GPU can tell).
pub fn combine(gpu: &dyn GpuControl, index: u32, winners: &[Setting]) -> Option<Setting> {
    let clocks_mhz = highest_clocks_mhz(winners.iter().map(|s| s.clocks_mhz))?;
    let power_limit_mw = if winners.iter().any(|s| s.power_limit_mw.is_some()) {
        winners
            .iter()
            .filter_map(|s| s.power_limit_mw.or_else(|| power_limit_for_clock_mw(gpu, index, s.clocks_mhz.graphics_mhz).ok()))
            .max()
    } else {
        None
    };
    Some(Setting { clocks_mhz, power_limit_mw })
}

/// Every control back to the driver's default, where the GPU has it (no ledger tells what was
/// set: a lost ledger, or a step that cannot reach it). Unavailable controls are skipped
/// silently; other failures are returned. `Ok(true)` when something was changed.
pub fn reset_all(gpu: &dyn GpuControl, index: u32) -> Result<bool, Vec<GpuError>> {
    let mut errors = Vec::new();
    let mut changed = false;
    let mut note = |r: Result<bool, GpuError>| match r {
        Ok(c) => changed |= c,
        Err(e) if is_unavailable(&e) => {}
        Err(e) => errors.push(e),
    };
    note(gpu.reset_locked_clocks(index).map(|()| true));
    note(match (gpu.application_clocks_mhz(index), gpu.default_application_clocks_mhz(index)) {
        (Ok(now), Ok(default)) if now == default => Ok(false),
        _ => gpu.reset_application_clocks(index).map(|()| true),
    });
    note(match (gpu.power_limit_mw(index), gpu.default_power_limit_mw(index)) {
        (Ok(now), Ok(default)) if now != default => gpu.set_power_limit_mw(index, default).map(|()| true),
        (_, Err(e)) => Err(e),
        _ => Ok(false),
    });
    if errors.is_empty() { Ok(changed) } else { Err(errors) }
}

fn order_names(order: &ControlOrder) -> String {
    order.0.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeGpu, FakeGpus};

    fn setting(mhz: u32) -> Setting {
        Setting::clocks(AppClocksMhz { memory_mhz: 877, graphics_mhz: mhz })
    }

    #[test]
    fn combined_clocks_are_the_highest_of_each_clock_not_of_the_pair() {
        let gpus = FakeGpus::v100s(1);
        // High graphics with a low memory clock must not pull the other job's memory clock down.
        let a = Setting::clocks(AppClocksMhz { memory_mhz: 405, graphics_mhz: 1312 });
        let b = Setting::clocks(AppClocksMhz { memory_mhz: 877, graphics_mhz: 900 });
        assert_eq!(combine(&gpus, 0, &[a, b]).unwrap().clocks_mhz, AppClocksMhz { memory_mhz: 877, graphics_mhz: 1312 });
        let ledger = crate::arbiter::Ledger::parse(
            "req uuid=G job=1 step=0 node=n pid=1 start_ticks=1 source=policy memory_mhz=405 graphics_mhz=1312\n\
             req uuid=G job=2 step=0 node=n pid=2 start_ticks=1 source=policy memory_mhz=877 graphics_mhz=900\n",
        )
        .unwrap();
        assert_eq!(ledger.effective_clocks_mhz("G"), Some(AppClocksMhz { memory_mhz: 877, graphics_mhz: 1312 }));
    }

    #[test]
    fn order_parses_and_refuses_nonsense() {
        assert_eq!(ControlOrder::parse("power_limit, locked").unwrap().0, vec![ClockControl::PowerLimit, ClockControl::LockedClocks]);
        assert!(ControlOrder::parse("locked,locked").unwrap_err().contains("twice"));
        assert!(ControlOrder::parse("turbo").unwrap_err().contains("turbo"));
        assert!(ControlOrder::parse(" , ").is_err());
    }

    #[test]
    fn locked_clocks_first_then_application_then_power() {
        let gpus = FakeGpus::v100s(1);
        let p = probe_and_apply(&gpus, 0, &ControlOrder::default(), setting(945)).unwrap();
        assert_eq!((p.control, p.applied), (ClockControl::LockedClocks, Applied::Locked { min_mhz: 135, max_mhz: 945 }));
        assert!(p.skipped.is_empty());
        gpus.with_gpu(0, |g| g.locked_clocks_mhz = None).unwrap();
        gpus.with_gpu(0, |g| g.refuse_locked = Some(GpuErrorKind::NotSupported)).unwrap();
        let p = probe_and_apply(&gpus, 0, &ControlOrder::default(), setting(945)).unwrap();
        assert_eq!(p.control, ClockControl::ApplicationClocks);
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(p.skipped[0].call, "nvmlDeviceSetGpuLockedClocks");
        gpus.with_gpu(0, |g| g.refuse_application = Some(GpuErrorKind::NoPermission)).unwrap();
        let p = probe_and_apply(&gpus, 0, &ControlOrder::default(), setting(656)).unwrap();
        // 300 W x 656 / 1312 = 150 W.
        assert_eq!((p.control, p.applied), (ClockControl::PowerLimit, Applied::PowerLimit { limit_mw: 150_000 }));
        assert_eq!(p.prior.power_limit_mw, Some(300_000));
        assert_eq!(gpus.power_limit_mw(0).unwrap(), 150_000);
    }

    #[test]
    fn none_working_is_an_error_naming_every_answer() {
        let mut g = FakeGpu::v100(0);
        g.refuse_locked = Some(GpuErrorKind::NotSupported);
        g.refuse_application = Some(GpuErrorKind::NotSupported);
        g.refuse_power_limit = Some(GpuErrorKind::NoPermission);
        let gpus = FakeGpus::new(vec![g]);
        let e = probe_and_apply(&gpus, 0, &ControlOrder::default(), setting(945)).unwrap_err();
        assert_eq!((e.call, e.kind, e.gpu), ("no clock control", GpuErrorKind::NotSupported, Some(0)));
        for call in ["nvmlDeviceSetGpuLockedClocks", "nvmlDeviceSetApplicationsClocks", "nvmlDeviceSetPowerManagementLimit"] {
            assert!(e.reason.contains(call), "{e}");
        }
    }

    #[test]
    fn a_lost_gpu_stops_the_probe() {
        let mut g = FakeGpu::v100(0);
        g.refuse_locked = Some(GpuErrorKind::GpuLost);
        let gpus = FakeGpus::new(vec![g]);
        let e = probe_and_apply(&gpus, 0, &ControlOrder::default(), setting(945)).unwrap_err();
        assert_eq!(e.kind, GpuErrorKind::GpuLost);
        assert_eq!(gpus.application_clocks_mhz(0).unwrap().graphics_mhz, 1312, "no other control was tried");
    }

    #[test]
    fn a_planner_power_limit_is_used_as_measured_and_restore_brings_back_the_prior() {
        let gpus = FakeGpus::v100s(1);
        gpus.set_power_limit_mw(0, 250_000).unwrap();
        let order = ControlOrder(vec![ClockControl::PowerLimit]);
        let s = Setting { power_limit_mw: Some(175_000), ..setting(1000) };
        let p = probe_and_apply(&gpus, 0, &order, s).unwrap();
        assert_eq!(p.applied, Applied::PowerLimit { limit_mw: 175_000 });
        assert_eq!(restore(&gpus, 0, p.control, p.prior).unwrap(), Applied::Reset);
        assert_eq!(gpus.power_limit_mw(0).unwrap(), 250_000, "the admin's limit, not the default");
        // Out of range: clamped to what the GPU accepts.
        let s = Setting { power_limit_mw: Some(50_000), ..setting(1000) };
        assert_eq!(apply(&gpus, 0, ClockControl::PowerLimit, s).unwrap(), Applied::PowerLimit { limit_mw: 150_000 });
    }
}
