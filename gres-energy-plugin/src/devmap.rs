//! Which NVML device a Slurm GPU index means.
//!
//! Slurm numbers a node's GPUs by its sorted list of device files (`/dev/nvidia0`,
//! `/dev/nvidia1`, ...): bit `i` of a step's gres bitmap is the `i`-th file. NVML numbers them by
//! PCI order, and `/dev/nvidiaN` is the device with minor number `N`. So Slurm index `i` is the
//! NVML device with the `i`-th smallest minor number; on most machines that is NVML index `i`
//! (stock gpu/nvml assumes so), but not on all.

use gpu_control::{GpuControl, GpuError};

/// Slurm GPU index -> NVML index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMap {
    nvml_by_slurm: Vec<u32>,
}

impl DeviceMap {
    /// Asks NVML for every GPU's minor number. A GPU whose minor cannot be read keeps its NVML
    /// index as its minor (the error is returned for logging).
    pub fn build(ctrl: &dyn GpuControl) -> Result<(DeviceMap, Vec<GpuError>), GpuError> {
        let count = ctrl.device_count()?;
        let mut errors = Vec::new();
        let minors: Vec<u32> = (0..count)
            .map(|i| {
                ctrl.minor_number(i).unwrap_or_else(|e| {
                    errors.push(e);
                    i
                })
            })
            .collect();
        Ok((DeviceMap::from_minors(&minors), errors))
    }

    /// From the minor number of each NVML index.
    pub fn from_minors(minor_by_nvml: &[u32]) -> DeviceMap {
        let mut by_minor: Vec<(u32, u32)> = minor_by_nvml.iter().zip(0u32..).map(|(&m, i)| (m, i)).collect();
        by_minor.sort_unstable();
        DeviceMap { nvml_by_slurm: by_minor.into_iter().map(|(_, i)| i).collect() }
    }

    /// The identity map over `count` GPUs.
    pub fn identity(count: u32) -> DeviceMap {
        DeviceMap { nvml_by_slurm: (0..count).collect() }
    }

    pub fn len(&self) -> usize {
        self.nvml_by_slurm.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nvml_by_slurm.is_empty()
    }

    pub fn nvml_index(&self, slurm_index: usize) -> Option<u32> {
        self.nvml_by_slurm.get(slurm_index).copied()
    }

    /// NVML indices of a set of Slurm indices; indices beyond this node's GPUs are returned
    /// apart (for a log line).
    pub fn nvml_indices(&self, slurm_indices: &[usize]) -> (Vec<u32>, Vec<usize>) {
        let mut found = Vec::new();
        let mut unknown = Vec::new();
        for &i in slurm_indices {
            match self.nvml_index(i) {
                Some(n) => found.push(n),
                None => unknown.push(i),
            }
        }
        (found, unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::FakeGpus;

    #[test]
    fn maps_by_minor_number() {
        let map = DeviceMap::from_minors(&[2, 0, 1]);
        assert_eq!(map.nvml_index(0), Some(1));
        assert_eq!(map.nvml_index(1), Some(2));
        assert_eq!(map.nvml_index(2), Some(0));
        assert_eq!(map.nvml_index(3), None);
        assert_eq!(map.nvml_indices(&[0, 2, 7]), (vec![1, 0], vec![7]));
        assert_eq!(DeviceMap::identity(2).nvml_indices(&[1]), (vec![1], vec![]));
        let (map, errors) = DeviceMap::build(&FakeGpus::v100s(3)).unwrap();
        assert!(errors.is_empty());
        assert_eq!(map, DeviceMap::identity(3));
    }
}
