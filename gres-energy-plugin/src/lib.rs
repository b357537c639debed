//! The node side of the slurm-energy bundle, shared by its two node plugins:
//!
//! - `gpu_nvml.so` (crate `gpu-nvml/`): Slurm's `gpu/nvml` interface — autodetection of the
//!   node's GPUs, `--gpu-freq` for srun steps, `gpu_p_energy_read` from NVML's energy counter;
//! - `acct_gather_energy_nvml.so` (crate `acct-gather-energy-nvml/`): the energy of a step's own
//!   GPUs for `sacct` ConsumedEnergy.
//!
//! Everything here is plain Rust over [`gpu_control::GpuControl`], so the same code runs in the
//! plugins, the unit tests ([`gpu_control::FakeGpus`]) and the benchmark (the fake
//! `libnvidia-ml.so`). The plugins only translate between Slurm's C records and these types.
//!
//! - [`nvml`]: the process's one NVML handle;
//! - [`devmap`]: Slurm's GPU index (gres bitmap bit) to NVML index, from Slurm's device files;
//! - [`detect`]: what autodetection reports (type name, device file, CPUs, links);
//! - [`clocks`]: `--gpu-freq` applied to a step's GPUs and restored at its end;
//! - [`energy`]: counter-based energy of a set of GPUs;
//! - [`share`]: how a shared GPU's energy is split among the jobs on it (`gres/shard`);
//! - [`share_ledger`]: the node-local books of shared GPUs that applies that split;
//! - [`errors`]: NVML errors logged once per step, GPU and call.
//! - [`errors`]: NVML errors logged once per step, GPU and call;
//! - [`usage`]: a process's GPU memory and utilisation (Slurm 24.11's `gpu_p_usage_read`).

pub mod clocks;
pub mod detect;
pub mod devmap;
pub mod energy;
pub mod errors;
pub mod nvml;
pub mod share;
pub mod share_ledger;
pub mod usage;
pub mod use_report;

/// Identity of the slurmstepd step we run in, from its process title
/// (`slurmstepd: [123.0]`, `[123.batch]`), for log lines and clock ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepId(pub String);

impl StepId {
    /// Reads `/proc/self/cmdline`; `pid <n>` when the title has no `[job.step]`.
    pub fn current() -> StepId {
        let title = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        let title = String::from_utf8_lossy(&title);
        StepId::from_title(&title).unwrap_or_else(|| StepId(format!("pid {}", std::process::id())))
    }

    /// `slurmstepd: [12.0]` -> `12.0`.
    pub fn from_title(title: &str) -> Option<StepId> {
        let start = title.find('[')? + 1;
        let end = start + title[start..].find(']')?;
        let inner = &title[start..end];
        (!inner.is_empty() && inner.contains('.')).then(|| StepId(inner.to_string()))
    }
}

impl std::fmt::Display for StepId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_id_from_process_title() {
        assert_eq!(StepId::from_title("slurmstepd: [12.0]"), Some(StepId("12.0".into())));
        assert_eq!(StepId::from_title("slurmstepd: [7.batch]\0"), Some(StepId("7.batch".into())));
        assert_eq!(StepId::from_title("/usr/sbin/slurmd\0-D"), None);
        assert_eq!(StepId::from_title("x [] y"), None);
    }
}
