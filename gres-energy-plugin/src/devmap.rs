//! Which NVML device a Slurm GPU index means: [`gpu_control::devmap`] (the one mapping every
//! node-side path uses), fed with Slurm's own device list when we run inside a daemon.

pub use gpu_control::devmap::{DeviceMap, MapSource, SlurmGpuDevice};
use gpu_control::{GpuControl, GpuError};
use slurm_bindings::node_api::NodeApi;

/// Slurm's GPU device files as the running daemon numbers them (`None` outside a daemon or
/// when Slurm has no device list).
pub fn slurm_gpu_devices(api: Option<&NodeApi>) -> Option<Vec<SlurmGpuDevice>> {
    let devices = api?.gres_devices()?;
    Some(devices.into_iter().map(|d| SlurmGpuDevice { slurm_index: d.index, path: d.path, minor: d.minor }).collect())
}

/// The map of this node, from Slurm's device list when there is one.
pub fn build(ctrl: &dyn GpuControl, api: Option<&NodeApi>) -> Result<(DeviceMap, Vec<GpuError>), GpuError> {
    let devices = slurm_gpu_devices(api);
    DeviceMap::build(ctrl, devices.as_deref())
}
