//! The GPU models the fake can play (V100, A100, H100), each with its clock tables, power
//! limits and **support matrix**: which of NVML's three ways of slowing a GPU down the model
//! accepts, and what it answers otherwise. Pure data; no I/O.
//!
//! | control | NVML calls | V100 (Volta) | A100 (Ampere) | H100 (Hopper) |
//! |---|---|---|---|---|
//! | application clocks | `nvmlDeviceSetApplicationsClocks`, `...ResetApplicationsClocks` | supported | supported (deprecated by NVIDIA in favour of locked clocks) | `NOT_SUPPORTED` |
//! | locked GPU clocks | `nvmlDeviceSetGpuLockedClocks`, `...ResetGpuLockedClocks` | supported (Volta and newer) | supported | supported |
//! | power limit | `nvmlDeviceSetPowerManagementLimit` | supported | supported | supported |
//!
//! Memory clocks are not modelled apart from the application clocks' memory part (each model
//! has one memory clock). Every setter needs root on a real driver (NVML's "Device Commands" chapter); the fake
//! answers `NO_PERMISSION` to a non-root caller when the config says `set_requires_root = true`,
//! and any entry of the matrix can be overridden per GPU (`locked_clocks.<i> = no_permission`)
//! to play a site whose admin restricted one call.
//!
//! Clock tables and limits are those of the SXM boards (V100-SXM2-32GB, A100-SXM4-40GB,
//! H100-SXM5-80GB) as NVIDIA's data sheets give them: maximum graphics clock, memory clock,
//! board power range. The spacing of the supported graphics clocks (7.5 MHz on Volta, 15 MHz on
//! Ampere and Hopper) and the lowest clock are those `nvidia-smi -q -d SUPPORTED_CLOCKS` shows
//! on such boards; they matter only for rounding `--gpu-freq` values.

use std::fmt;

/// A GPU model the fake can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuModel {
    V100,
    A100,
    H100,
}

/// What a setter answers on a model (or one GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Answer {
    Supported,
    /// `NVML_ERROR_NOT_SUPPORTED`: the generation or driver lacks the control.
    NotSupported,
    /// `NVML_ERROR_NO_PERMISSION`: the admin restricted it (`nvidia-smi -acp RESTRICTED`).
    NoPermission,
}

/// The controls a support matrix covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Control {
    ApplicationClocks,
    LockedClocks,
    PowerLimit,
}

/// Which controls a GPU accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SupportMatrix {
    pub application_clocks: Answer,
    pub locked_clocks: Answer,
    pub power_limit: Answer,
}

/// Everything a model fixes about a GPU apart from its identity.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    pub memory_clocks_mhz: Vec<u32>,
    /// Descending.
    pub graphics_clocks_mhz: Vec<u32>,
    pub default_memory_clock_mhz: u32,
    pub default_graphics_clock_mhz: u32,
    pub power_limit_min_mw: u32,
    pub power_limit_max_mw: u32,
    pub power_limit_default_mw: u32,
    pub idle_power_mw: u32,
    pub max_power_mw: u32,
    pub memory_total_bytes: u64,
    pub pci_device_id: u32,
    pub pci_subsystem_id: u32,
    /// CUDA compute capability (major, minor).
    pub compute_capability: (i32, i32),
    pub support: SupportMatrix,
}

/// `floor(max - k * step)` for k = 0.. while >= min: NVML's supported graphics clocks.
pub fn clock_ladder_mhz(min_mhz: u32, max_mhz: u32, step_mhz: f64) -> Vec<u32> {
    let mut out = Vec::new();
    if step_mhz <= 0.0 || min_mhz > max_mhz {
        return out;
    }
    let mut k = 0u32;
    loop {
        let value = (f64::from(max_mhz) - f64::from(k) * step_mhz).floor();
        if value < f64::from(min_mhz) {
            break;
        }
        // In range [min_mhz, max_mhz] by the checks above, so the cast is exact.
        out.push(value as u32);
        k += 1;
    }
    out
}

impl GpuModel {
    pub const ALL: [GpuModel; 3] = [GpuModel::V100, GpuModel::A100, GpuModel::H100];

    /// `v100`, `A100`, `h100` (any case).
    pub fn parse(text: &str) -> Option<GpuModel> {
        match text.trim().to_ascii_lowercase().as_str() {
            "v100" => Some(GpuModel::V100),
            "a100" => Some(GpuModel::A100),
            "h100" => Some(GpuModel::H100),
            _ => None,
        }
    }

    pub fn preset(self) -> Preset {
        use Answer::{NotSupported, Supported};
        match self {
            GpuModel::V100 => Preset {
                name: "Tesla V100-SXM2-32GB",
                memory_clocks_mhz: vec![877],
                graphics_clocks_mhz: clock_ladder_mhz(135, 1530, 7.5),
                default_memory_clock_mhz: 877,
                default_graphics_clock_mhz: 1312,
                power_limit_min_mw: 150_000,
                power_limit_max_mw: 300_000,
                power_limit_default_mw: 300_000,
                idle_power_mw: 41_000,
                max_power_mw: 250_000,
                memory_total_bytes: 32 << 30,
                pci_device_id: 0x1DB1_10DE,
                pci_subsystem_id: 0x1249_10DE,
                compute_capability: (7, 0),
                support: SupportMatrix { application_clocks: Supported, locked_clocks: Supported, power_limit: Supported },
            },
            GpuModel::A100 => Preset {
                name: "NVIDIA A100-SXM4-40GB",
                memory_clocks_mhz: vec![1215],
                graphics_clocks_mhz: clock_ladder_mhz(210, 1410, 15.0),
                default_memory_clock_mhz: 1215,
                default_graphics_clock_mhz: 1410,
                power_limit_min_mw: 100_000,
                power_limit_max_mw: 400_000,
                power_limit_default_mw: 400_000,
                idle_power_mw: 55_000,
                max_power_mw: 400_000,
                memory_total_bytes: 40 << 30,
                pci_device_id: 0x20B0_10DE,
                pci_subsystem_id: 0x134F_10DE,
                compute_capability: (8, 0),
                support: SupportMatrix { application_clocks: Supported, locked_clocks: Supported, power_limit: Supported },
            },
            GpuModel::H100 => Preset {
                name: "NVIDIA H100 80GB HBM3",
                memory_clocks_mhz: vec![2619],
                graphics_clocks_mhz: clock_ladder_mhz(345, 1980, 15.0),
                default_memory_clock_mhz: 2619,
                default_graphics_clock_mhz: 1980,
                power_limit_min_mw: 200_000,
                power_limit_max_mw: 700_000,
                power_limit_default_mw: 700_000,
                idle_power_mw: 70_000,
                max_power_mw: 700_000,
                memory_total_bytes: 80 << 30,
                pci_device_id: 0x2330_10DE,
                pci_subsystem_id: 0x16C1_10DE,
                compute_capability: (9, 0),
                support: SupportMatrix { application_clocks: NotSupported, locked_clocks: Supported, power_limit: Supported },
            },
        }
    }
}

impl fmt::Display for GpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuModel::V100 => "V100",
            GpuModel::A100 => "A100",
            GpuModel::H100 => "H100",
        })
    }
}

impl Answer {
    /// `supported`, `not_supported`, `no_permission` (any case, `-` for `_`).
    pub fn parse(text: &str) -> Option<Answer> {
        match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "supported" | "yes" => Some(Answer::Supported),
            "not_supported" | "no" => Some(Answer::NotSupported),
            "no_permission" => Some(Answer::NoPermission),
            _ => None,
        }
    }
}

impl Control {
    /// The config key of a control (`application_clocks`, `locked_clocks`, ...).
    pub fn parse_key(key: &str) -> Option<Control> {
        match key {
            "application_clocks" => Some(Control::ApplicationClocks),
            "locked_clocks" => Some(Control::LockedClocks),
            "power_limit" => Some(Control::PowerLimit),
            _ => None,
        }
    }
}

impl SupportMatrix {
    pub fn answer(&self, control: Control) -> Answer {
        match control {
            Control::ApplicationClocks => self.application_clocks,
            Control::LockedClocks => self.locked_clocks,
            Control::PowerLimit => self.power_limit,
        }
    }

    pub fn set(&mut self, control: Control, answer: Answer) {
        match control {
            Control::ApplicationClocks => self.application_clocks = answer,
            Control::LockedClocks => self.locked_clocks = answer,
            Control::PowerLimit => self.power_limit = answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_has_a_consistent_preset() {
        for model in GpuModel::ALL {
            let p = model.preset();
            assert!(p.graphics_clocks_mhz.windows(2).all(|w| w[0] > w[1]), "{model}: descending");
            assert!(p.graphics_clocks_mhz.contains(&p.default_graphics_clock_mhz), "{model}");
            assert!(p.memory_clocks_mhz.contains(&p.default_memory_clock_mhz), "{model}");
            assert!(p.power_limit_min_mw <= p.power_limit_default_mw && p.power_limit_default_mw <= p.power_limit_max_mw, "{model}");
            assert_eq!(GpuModel::parse(&model.to_string().to_lowercase()), Some(model));
        }
    }

    #[test]
    fn the_matrices_differ_where_the_generations_do() {
        let (v, a, h) = (GpuModel::V100.preset().support, GpuModel::A100.preset().support, GpuModel::H100.preset().support);
        assert_eq!(h.application_clocks, Answer::NotSupported);
        assert_eq!(a.application_clocks, Answer::Supported);
        assert!([v, a, h].iter().all(|m| m.locked_clocks == Answer::Supported && m.power_limit == Answer::Supported));
        assert_eq!(GpuModel::A100.preset().graphics_clocks_mhz.len(), 81);
        assert_eq!(GpuModel::H100.preset().graphics_clocks_mhz.last(), Some(&345));
        assert_eq!(Answer::parse("NO-PERMISSION"), Some(Answer::NoPermission));
        assert_eq!(Answer::parse("maybe"), None);
    }
}
