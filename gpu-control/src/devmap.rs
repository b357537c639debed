//! Which NVML device a Slurm GPU index means: the one mapping every node-side path uses (the
//! GPU plugin's clocks and energy, the energy plugin, the SPANK plugin's clocks).
//!
//! Slurm numbers a node's GPUs by its own sorted list of GRES device files: bit `i` of a gres
//! bitmap (`SLURM_JOB_GPUS`, a step's usable GPUs) is the record with index `i` of that list.
//! How Slurm sorts the list depends on gres.conf (by links order, a stand-in for NVML's PCI
//! order, when every record has links, as autodetection gives; by file name otherwise), so we
//! never guess it: we take Slurm's list as it is ([`SlurmGpuDevice`], from
//! `gres_g_get_devices`) and match each record's device file to the NVML device with the same
//! minor number (`/dev/nvidiaN` is the device with minor `N`). That holds on machines where the
//! minor numbers are not in NVML's index order, which stock gpu/nvml gets wrong.
//!
//! Where Slurm's list is not available (outside a daemon, a node without GRES device files),
//! the map falls back to stock's assumption, Slurm index = NVML index, and says so
//! ([`MapSource::NvmlOrder`]) so callers can log it.

use crate::control::GpuControl;
use crate::error::GpuError;

/// One GPU device file in Slurm's numbering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmGpuDevice {
    /// Bit of the gres bitmaps.
    pub slurm_index: usize,
    /// Device file, e.g. `/dev/nvidia2`.
    pub path: String,
    /// Minor number of the file when it is a character device (as Slurm `stat`ed it).
    pub minor: Option<u32>,
}

impl SlurmGpuDevice {
    /// The minor number this record stands for: the file's own, else the number at the end
    /// of an `nvidiaN` file name.
    pub fn effective_minor(&self) -> Option<u32> {
        self.minor.or_else(|| nvidia_file_number(&self.path))
    }
}

/// `N` of a path ending in `nvidiaN`; `None` for other files (`nvidiactl`, `nvidia-caps/...`).
pub fn nvidia_file_number(path: &str) -> Option<u32> {
    let name = path.rsplit('/').next()?;
    let digits = name.strip_prefix("nvidia")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where a map came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapSource {
    /// Slurm's device files matched to NVML minor numbers.
    SlurmDevices,
    /// No device list from Slurm: Slurm index taken as NVML index (stock's assumption).
    NvmlOrder,
}

/// Slurm GPU index -> NVML index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMap {
    /// `None`: Slurm has the index, but no NVML device has its minor number.
    nvml_by_slurm: Vec<Option<u32>>,
    source: MapSource,
}

impl DeviceMap {
    /// Matches Slurm's GPU device files to NVML devices by minor number. `minor_by_nvml[i]` is
    /// NVML device `i`'s minor (`None`: unreadable, never matched). Records whose file is not an
    /// NVIDIA GPU device file are ignored; an empty list gives the NVML-order fallback.
    pub fn from_slurm_devices(devices: &[SlurmGpuDevice], minor_by_nvml: &[Option<u32>]) -> DeviceMap {
        let gpus: Vec<&SlurmGpuDevice> = devices.iter().filter(|d| nvidia_file_number(&d.path).is_some()).collect();
        if gpus.is_empty() {
            return DeviceMap::nvml_order(minor_by_nvml.len() as u32);
        }
        let len = gpus.iter().map(|d| d.slurm_index).max().map_or(0, |m| m.saturating_add(1)).min(4096);
        let mut nvml_by_slurm = vec![None; len];
        // Each NVML device answers for one Slurm index at most, however odd the input.
        let mut taken = vec![false; minor_by_nvml.len()];
        for d in gpus {
            let Some(slot) = nvml_by_slurm.get_mut(d.slurm_index) else { continue };
            let Some(minor) = d.effective_minor() else { continue };
            if slot.is_some() {
                continue;
            }
            let found = minor_by_nvml.iter().zip(&taken).position(|(m, used)| *m == Some(minor) && !used);
            if let Some(i) = found {
                taken[i] = true;
                *slot = u32::try_from(i).ok();
            }
        }
        DeviceMap { nvml_by_slurm, source: MapSource::SlurmDevices }
    }

    /// Asks NVML for every GPU's minor number and matches Slurm's devices to them (or the
    /// NVML-order fallback when `slurm_devices` is `None` or has no GPU files). Minor numbers
    /// that cannot be read are returned for logging.
    pub fn build(ctrl: &dyn GpuControl, slurm_devices: Option<&[SlurmGpuDevice]>) -> Result<(DeviceMap, Vec<GpuError>), GpuError> {
        let count = ctrl.device_count()?;
        let mut errors = Vec::new();
        let minors: Vec<Option<u32>> = (0..count)
            .map(|i| match ctrl.minor_number(i) {
                Ok(m) => Some(m),
                Err(e) => {
                    errors.push(e);
                    None
                }
            })
            .collect();
        let map = match slurm_devices {
            Some(devices) => DeviceMap::from_slurm_devices(devices, &minors),
            None => DeviceMap::nvml_order(count),
        };
        Ok((map, errors))
    }

    /// Slurm index `i` = NVML index `i`, over `count` GPUs (stock gpu/nvml's assumption).
    pub fn nvml_order(count: u32) -> DeviceMap {
        DeviceMap { nvml_by_slurm: (0..count).map(Some).collect(), source: MapSource::NvmlOrder }
    }

    /// Slurm's numbering of a hand-written gres.conf without links (device files sorted by
    /// name, i.e. by minor number), from the minor number of each NVML index. For callers that
    /// know the files and nothing else (tests, fuzzing).
    pub fn from_minors(minor_by_nvml: &[u32]) -> DeviceMap {
        let mut sorted: Vec<u32> = minor_by_nvml.to_vec();
        sorted.sort_unstable();
        let devices: Vec<SlurmGpuDevice> = sorted
            .iter()
            .enumerate()
            .map(|(i, &m)| SlurmGpuDevice { slurm_index: i, path: format!("/dev/nvidia{m}"), minor: Some(m) })
            .collect();
        let minors: Vec<Option<u32>> = minor_by_nvml.iter().copied().map(Some).collect();
        DeviceMap::from_slurm_devices(&devices, &minors)
    }

    pub fn source(&self) -> MapSource {
        self.source
    }

    pub fn len(&self) -> usize {
        self.nvml_by_slurm.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nvml_by_slurm.is_empty()
    }

    pub fn nvml_index(&self, slurm_index: usize) -> Option<u32> {
        self.nvml_by_slurm.get(slurm_index).copied().flatten()
    }

    /// The Slurm index of an NVML device, if Slurm has it.
    pub fn slurm_index(&self, nvml_index: u32) -> Option<usize> {
        self.nvml_by_slurm.iter().position(|n| *n == Some(nvml_index))
    }

    /// NVML indices of a set of Slurm indices; indices without an NVML device are returned
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

    /// `0->2 1->0 ...` for log lines.
    pub fn describe(&self) -> String {
        let pairs: Vec<String> = self
            .nvml_by_slurm
            .iter()
            .enumerate()
            .map(|(s, n)| match n {
                Some(n) => format!("{s}->{n}"),
                None => format!("{s}->?"),
            })
            .collect();
        let how = match self.source {
            MapSource::SlurmDevices => "by Slurm's device files",
            MapSource::NvmlOrder => "in NVML order (no device list from Slurm)",
        };
        format!("Slurm GPU index -> NVML index {how}: {}", pairs.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FakeGpus;

    fn dev(i: usize, path: &str, minor: Option<u32>) -> SlurmGpuDevice {
        SlurmGpuDevice { slurm_index: i, path: path.to_string(), minor }
    }

    #[test]
    fn file_numbers() {
        assert_eq!(nvidia_file_number("/dev/nvidia12"), Some(12));
        assert_eq!(nvidia_file_number("/tmp/x/dev/nvidia0"), Some(0));
        assert_eq!(nvidia_file_number("/dev/nvidiactl"), None);
        assert_eq!(nvidia_file_number("/dev/nvidia-caps/nvidia-cap1"), None);
        assert_eq!(nvidia_file_number("/dev/nvidia"), None);
    }

    #[test]
    fn slurm_order_by_links_follows_nvml_order_even_with_permuted_minors() {
        // NVML index i has minor [2, 0, 3, 1][i]; Slurm sorted autodetected records by links,
        // i.e. NVML order, so its index 0 is /dev/nvidia2.
        let minors = [Some(2), Some(0), Some(3), Some(1)];
        let devices = [dev(0, "/dev/nvidia2", Some(2)), dev(1, "/dev/nvidia0", Some(0)), dev(2, "/dev/nvidia3", Some(3)), dev(3, "/dev/nvidia1", Some(1))];
        let map = DeviceMap::from_slurm_devices(&devices, &minors);
        assert_eq!(map.source(), MapSource::SlurmDevices);
        assert_eq!((0..4).map(|i| map.nvml_index(i)).collect::<Vec<_>>(), vec![Some(0), Some(1), Some(2), Some(3)]);
    }

    #[test]
    fn slurm_order_by_file_name_maps_through_minors() {
        // A hand-written gres.conf: Slurm sorted by file name.
        let minors = [Some(2), Some(0), Some(3), Some(1)];
        let devices: Vec<_> = (0..4).map(|i| dev(i, &format!("/dev/nvidia{i}"), Some(i as u32))).collect();
        let map = DeviceMap::from_slurm_devices(&devices, &minors);
        assert_eq!(map.nvml_indices(&[0, 1, 2, 3, 9]), (vec![1, 3, 0, 2], vec![9]));
        assert_eq!(map.slurm_index(0), Some(2));
        assert_eq!(map, DeviceMap::from_minors(&[2, 0, 3, 1]));
    }

    #[test]
    fn file_name_stands_in_for_a_missing_minor_and_other_files_are_ignored() {
        let devices = [dev(0, "/dev/nvidia1", None), dev(1, "/dev/nvidiactl", Some(255)), dev(1, "/dev/nvidia7", Some(7))];
        let map = DeviceMap::from_slurm_devices(&devices, &[Some(0), Some(1)]);
        assert_eq!(map.nvml_index(0), Some(1));
        assert_eq!(map.nvml_index(1), None, "no NVML device has minor 7");
        let fallback = DeviceMap::from_slurm_devices(&[dev(0, "/dev/infiniband/uverbs0", Some(0))], &[Some(0), Some(1)]);
        assert_eq!(fallback.source(), MapSource::NvmlOrder);
        assert_eq!(fallback.nvml_indices(&[1]), (vec![1], vec![]));
    }

    #[test]
    fn never_two_slurm_indices_on_one_nvml_device() {
        // Two NVML devices claiming one minor (a broken driver, or fuzzing): one each.
        let map = DeviceMap::from_minors(&[3, 3, 1]);
        assert_eq!(map.len(), 3);
        let (found, unknown) = map.nvml_indices(&[0, 1, 2]);
        assert!(unknown.is_empty());
        assert_eq!(found, vec![2, 0, 1]);
        // Slurm listing one file twice: the second index has no device of its own.
        let devices = [dev(0, "/dev/nvidia0", Some(0)), dev(1, "/dev/nvidia0", Some(0))];
        let map = DeviceMap::from_slurm_devices(&devices, &[Some(0), Some(1)]);
        assert_eq!(map.nvml_indices(&[0, 1]), (vec![0], vec![1]));
    }

    #[test]
    fn build_reads_minors_from_the_driver() {
        let gpus = FakeGpus::v100s(3);
        let (map, errors) = DeviceMap::build(&gpus, None).unwrap();
        assert!(errors.is_empty());
        assert_eq!(map, DeviceMap::nvml_order(3));
        let devices = [dev(0, "/dev/nvidia2", Some(2))];
        let (map, _) = DeviceMap::build(&gpus, Some(&devices)).unwrap();
        assert_eq!(map.nvml_index(0), Some(2));
    }
}
