//! Which NVML device a Slurm GPU index means: [`gpu_control::devmap`] (the one mapping every
//! node-side path uses), fed with what Slurm itself numbers: its own device list when it can be
//! asked for, else (the GPU plugin on Slurm 24.11) the records our autodetection gave it, in
//! Slurm's sort order.

pub use gpu_control::devmap::{AutodetectedGpu, DeviceMap, MapSource, SlurmGpuDevice};
use gpu_control::{GpuControl, GpuError};
use slurm_bindings::node_api::NodeApi;

use crate::detect::{self, Detection};

/// Where the caller runs, which decides whether Slurm's device list may be asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A GPU plugin callback (`gpu_p_*`): on 24.11 Slurm holds the GRES lock there.
    GpuPlugin,
    /// Anywhere else in slurmd or slurmstepd (acct_gather_energy, SPANK), outside any GRES
    /// function: the lock is free.
    Elsewhere,
}

/// Slurm's GPU device files as the running daemon numbers them (`None` outside a daemon, when
/// Slurm has no device list, or when it cannot be asked for from `caller`).
pub fn slurm_gpu_devices(api: Option<&NodeApi>, caller: Caller) -> Option<Vec<SlurmGpuDevice>> {
    let devices = api?.gres_devices(caller == Caller::GpuPlugin)?;
    Some(devices.into_iter().map(|d| SlurmGpuDevice { slurm_index: d.index, path: d.path, minor: d.minor }).collect())
}

/// The map of this node from Slurm's device list, for callers outside the GPU plugin (NVML
/// order when there is no list).
pub fn build(ctrl: &dyn GpuControl, api: Option<&NodeApi>) -> Result<(DeviceMap, Vec<GpuError>), GpuError> {
    let devices = slurm_gpu_devices(api, Caller::Elsewhere);
    DeviceMap::build(ctrl, devices.as_deref())
}

/// The records [`detect::detect`] produces, as Slurm receives them from
/// `gpu_p_get_system_gpu_list` (file and links), in the same order.
pub fn autodetected_records(found: &Detection) -> Vec<AutodetectedGpu> {
    found.gpus.iter().map(|g| AutodetectedGpu { file: Some(g.device_file.clone()), links: Some(g.links.clone()) }).collect()
}

/// The map from what our autodetection gives Slurm, put in Slurm's order
/// ([`gpu_control::devmap::slurm_autodetect_order`]); NVML devices are matched by the minor
/// numbers detection read. Detection's own failures are returned for logging.
pub fn from_detection(ctrl: &dyn GpuControl, dev_dir: &str) -> Result<(DeviceMap, Vec<GpuError>), GpuError> {
    let found = detect::detect(ctrl, dev_dir)?;
    let count = ctrl.device_count()?;
    let mut minor_by_nvml: Vec<Option<u32>> = vec![None; count as usize];
    for g in &found.gpus {
        if let Some(slot) = minor_by_nvml.get_mut(g.nvml_index as usize) {
            *slot = Some(g.minor);
        }
    }
    let map = DeviceMap::from_autodetected(&autodetected_records(&found), &minor_by_nvml);
    Ok((map, found.errors))
}

/// The map for the GPU plugin's callbacks. 22.05: from Slurm's device list (its
/// `gres_g_get_devices` takes no lock). 24.11: Slurm's list cannot be asked for there (the
/// GRES lock is held), but the plugin is loaded only when gres.conf has `AutoDetect=nvml`
/// (24.11 `src/interfaces/gpu.c`, `_get_gpu_type()` called from `gpu_plugin_init()`: `gpu/nvml`
/// only with `GRES_AUTODETECT_GPU_NVML`), so Slurm's GPU records are the ones
/// `gpu_p_get_system_gpu_list` returned: detection again, in Slurm's sort order.
pub fn build_for_gpu_plugin(ctrl: &dyn GpuControl, api: Option<&NodeApi>) -> Result<(DeviceMap, Vec<GpuError>), GpuError> {
    #[cfg(slurm_ge_24_11)]
    {
        let _ = api;
        from_detection(ctrl, &detect::device_dir())
    }
    #[cfg(not(slurm_ge_24_11))]
    {
        let devices = slurm_gpu_devices(api, Caller::GpuPlugin);
        DeviceMap::build(ctrl, devices.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::{FakeGpu, FakeGpus};

    fn permuted(minors: &[u32]) -> FakeGpus {
        FakeGpus::new(
            minors
                .iter()
                .enumerate()
                .map(|(i, &m)| {
                    let mut g = FakeGpu::v100(i as u32);
                    g.minor = m;
                    g
                })
                .collect(),
        )
    }

    #[test]
    fn detection_with_permuted_minors_maps_slurm_index_to_its_own_device() {
        // NVML index i has minor [2, 0, 3, 1][i]: Slurm sorts detection's records by file,
        // then by links, i.e. back to NVML order; every Slurm index reaches the device whose
        // file Slurm holds at that index.
        let gpus = permuted(&[2, 0, 3, 1]);
        let (map, errors) = from_detection(&gpus, "/dev").unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(map.source(), MapSource::AutodetectOrder { exact: true });
        let found = detect::detect(&gpus, "/dev").unwrap();
        let records = autodetected_records(&found);
        let (order, _) = gpu_control::devmap::slurm_autodetect_order(&records);
        for (slurm_index, &k) in order.iter().enumerate() {
            let nvml = map.nvml_index(slurm_index).unwrap();
            assert_eq!(Some(format!("/dev/nvidia{}", gpus.minor_number(nvml).unwrap())), records[k].file);
        }
        assert_eq!(map.nvml_indices(&[0, 1, 2, 3]), (vec![0, 1, 2, 3], vec![]));
    }

    #[test]
    fn outside_a_daemon_the_gpu_plugin_map_is_still_defined() {
        let gpus = permuted(&[1, 0]);
        let (map, _) = build_for_gpu_plugin(&gpus, None).unwrap();
        #[cfg(slurm_ge_24_11)]
        assert_eq!(map.source(), MapSource::AutodetectOrder { exact: true });
        #[cfg(not(slurm_ge_24_11))]
        assert_eq!(map.source(), MapSource::NvmlOrder);
        assert_eq!(map.nvml_indices(&[0, 1]), (vec![0, 1], vec![]));
    }
}
