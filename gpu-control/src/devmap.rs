//! Which NVML device a Slurm GPU index means: the one mapping every node-side path uses (the
//! GPU plugin's clocks and energy, the energy plugin, the SPANK plugin's clocks).
//!
//! Slurm numbers a node's GPUs by its own sorted list of GRES device files: bit `i` of a gres
//! bitmap (`SLURM_JOB_GPUS`, a step's usable GPUs) is the record with index `i` of that list.
//! How Slurm sorts the list depends on gres.conf (by links order, a stand-in for NVML's PCI
//! order, when every record has links, as autodetection gives; by file name otherwise). Where
//! we can, we take Slurm's list as it is ([`SlurmGpuDevice`], from `gres_g_get_devices`) and
//! match each record's device file to the NVML device with the same minor number
//! (`/dev/nvidiaN` is the device with minor `N`) ([`MapSource::SlurmDevices`]). That holds on
//! machines where the minor numbers are not in NVML's index order, which stock gpu/nvml gets
//! wrong.
//!
//! Inside the GPU plugin's callbacks on Slurm 24.11 Slurm's list cannot be asked for (Slurm
//! holds the GRES lock that `gres_g_get_devices` takes). That plugin is loaded only with
//! `AutoDetect=nvml`, so Slurm's GPU records are the ones our autodetection gave it: the map is
//! then derived from those records with Slurm's own sort rule ([`slurm_autodetect_order`],
//! [`MapSource::AutodetectOrder`]).
//!
//! Where neither is available (outside a daemon, a node without GRES device files), the map
//! falls back to stock's assumption, Slurm index = NVML index, and says so
//! ([`MapSource::NvmlOrder`]) so callers can log it.
//!
//! Pure data: this module never asks Slurm for anything; callers bring Slurm's list or the
//! autodetected records.

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
    /// The records our autodetection gave Slurm, put in Slurm's order with Slurm's sort rule
    /// ([`slurm_autodetect_order`]), their device files matched to NVML minor numbers.
    /// `exact`: the rule fixed the order of every record (else equal records kept their file
    /// order, which Slurm's unstable sort need not).
    AutodetectOrder { exact: bool },
    /// No device list from Slurm: Slurm index taken as NVML index (stock's assumption).
    NvmlOrder,
}

/// One GPU record as autodetection hands it to Slurm (`gres_slurmd_conf_t`'s `file` and
/// `links`), in the order it was handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutodetectedGpu {
    /// Device file, e.g. `/dev/nvidia2`.
    pub file: Option<String>,
    /// Slurm's links string, e.g. `0,-1,0,0` (`-1` at the GPU's own NVML position).
    pub links: Option<String>,
}

/// Slurm's `GRES_MAX_LINK` (24.11 `src/interfaces/gres.h`): the largest link count accepted.
const GRES_MAX_LINK: i64 = 1023;

/// The position of `-1` in a links string the way Slurm's `gres_links_validate` reads it: the
/// index of the only `-1`, or `-2` for a string Slurm calls invalid (empty, a token that is
/// not an integer in `-2..=1023`, no `-1`, more than one `-1`).
pub fn links_self_position(links: &str) -> i64 {
    if links.is_empty() {
        return -2;
    }
    let mut found = None;
    // strtok_r skips empty tokens.
    for (i, tok) in links.split(',').filter(|t| !t.is_empty()).enumerate() {
        // strtol accepts leading blanks and a sign; Slurm rejects anything left after the number.
        let Ok(val) = tok.trim_start().parse::<i64>() else { return -2 };
        if !(-2..=GRES_MAX_LINK).contains(&val) {
            return -2;
        }
        if val == -1 {
            if found.is_some() {
                return -2;
            }
            found = Some(i as i64);
        }
    }
    found.unwrap_or(-2)
}

/// Natural order of two device file names (Slurm's `strnatcmp`): runs of digits compare as
/// numbers, everything else byte by byte, so `/dev/nvidia2` < `/dev/nvidia10`. Written for
/// device paths: strnatcmp's blank skipping and its leading-zero ("fractional") rule are left
/// out, and a tie between runs like `01` and `1` is broken by length.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let run = |s: &[u8], k: usize| k + s[k..].iter().take_while(|c| c.is_ascii_digit()).count();
            let (ei, ej) = (run(a, i), run(b, j));
            let strip = |d: &[u8]| {
                let z = d.iter().take_while(|&&c| c == b'0').count();
                d[z..].to_vec()
            };
            let (da, db) = (strip(&a[i..ei]), strip(&b[j..ej]));
            let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(&db)).then_with(|| (ei - i).cmp(&(ej - j)));
            if ord != Ordering::Equal {
                return ord;
            }
            i = ei;
            j = ej;
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j))
}

/// Slurm's order of the GPU records autodetection gave it (24.11
/// `src/plugins/gres/gpu/gres_gpu.c`, `_merge_system_gres_conf`: `list_sort` by
/// `_sort_gpu_by_file`, then by `_sort_gpu_by_links_order`): by device file (natural order,
/// no file last), then by the position of `-1` in the links string (no links last; an invalid
/// string counts as `-2`, i.e. first, as in Slurm). Returns indices into `records` in Slurm's
/// order, and whether the rule alone fixed that order.
///
/// `list_sort` is `qsort`, which is not stable: only records that differ in the last key are
/// ordered for sure. In the case that matters, every record with a links string holding one
/// `-1` at a position of its own (our autodetection's), the second sort alone decides and the
/// result is exact. Otherwise equal records keep their order from the first sort (file order),
/// which is one of the orders Slurm may produce, and `exact` is `false` so callers can say so.
///
/// Assumes Slurm kept every autodetected record and added none from gres.conf (no
/// config-only `File=` lines, a GPU count in slurm.conf equal to the detected one).
pub fn slurm_autodetect_order(records: &[AutodetectedGpu]) -> (Vec<usize>, bool) {
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by(|&x, &y| match (&records[x].file, &records[y].file) {
        (Some(a), Some(b)) => natural_cmp(a, b),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    // None sorts after every Some(position): null links last.
    let key = |k: usize| match records[k].links.as_deref() {
        Some(l) => (0, links_self_position(l)),
        None => (1, 0),
    };
    order.sort_by_key(|&k| key(k));
    let exact = order.windows(2).all(|w| key(w[0]) != key(w[1]));
    (order, exact)
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

    /// The map of Slurm's numbering of the GPUs our autodetection gave it
    /// ([`slurm_autodetect_order`]), matched to NVML devices by minor number as
    /// [`Self::from_slurm_devices`] does. A record without a file keeps its Slurm index and
    /// maps to no device.
    pub fn from_autodetected(records: &[AutodetectedGpu], minor_by_nvml: &[Option<u32>]) -> DeviceMap {
        let (order, exact) = slurm_autodetect_order(records);
        let devices: Vec<SlurmGpuDevice> = order
            .iter()
            .enumerate()
            .map(|(slurm_index, &k)| {
                let path = records[k].file.clone().unwrap_or_default();
                SlurmGpuDevice { slurm_index, minor: nvidia_file_number(&path), path }
            })
            .collect();
        let len = devices.len().min(4096);
        let mut map = DeviceMap::from_slurm_devices(&devices, minor_by_nvml);
        if map.source == MapSource::NvmlOrder {
            // No record had a GPU device file: Slurm has `len` GPUs we cannot place.
            map.nvml_by_slurm = vec![None; len];
        }
        map.nvml_by_slurm.resize(len.max(map.nvml_by_slurm.len()), None);
        map.source = MapSource::AutodetectOrder { exact };
        map
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
            MapSource::AutodetectOrder { exact: true } => {
                "by the records autodetection gave Slurm, in Slurm's sort order (device file, then links)"
            }
            MapSource::AutodetectOrder { exact: false } => {
                "by the records autodetection gave Slurm, in Slurm's sort order (device file, then links; \
                 equal records in file order, which Slurm's unstable sort does not promise)"
            }
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

    /// What detect.rs hands Slurm for NVML devices with these minors: `/dev/nvidia<minor>` and
    /// a links string with -1 at the device's own NVML index.
    fn detected(minor_by_nvml: &[u32]) -> Vec<AutodetectedGpu> {
        let n = minor_by_nvml.len();
        minor_by_nvml
            .iter()
            .enumerate()
            .map(|(i, m)| AutodetectedGpu {
                file: Some(format!("/dev/nvidia{m}")),
                links: Some((0..n).map(|k| if k == i { "-1".to_string() } else { "0".to_string() }).collect::<Vec<_>>().join(",")),
            })
            .collect()
    }

    #[test]
    fn links_positions_as_slurm_validates_them() {
        assert_eq!(links_self_position("-1,0,0"), 0);
        assert_eq!(links_self_position("0,2,-1,0"), 2);
        assert_eq!(links_self_position(" 0,+0,-1"), 2);
        assert_eq!(links_self_position("0,,-1"), 1, "strtok skips empty tokens");
        assert_eq!(links_self_position(""), -2);
        assert_eq!(links_self_position("0,0"), -2, "no -1");
        assert_eq!(links_self_position("-1,-1"), -2, "two -1");
        assert_eq!(links_self_position("0,x,-1"), -2);
        assert_eq!(links_self_position("0,1024,-1"), -2, "above GRES_MAX_LINK");
        assert_eq!(links_self_position("-3,-1"), -2);
        assert_eq!(links_self_position("-2,-1"), 1);
    }

    #[test]
    fn natural_order_of_device_files() {
        use std::cmp::Ordering::*;
        assert_eq!(natural_cmp("/dev/nvidia2", "/dev/nvidia10"), Less);
        assert_eq!(natural_cmp("/dev/nvidia10", "/dev/nvidia9"), Greater);
        assert_eq!(natural_cmp("/dev/nvidia3", "/dev/nvidia3"), Equal);
        assert_eq!(natural_cmp("/dev/nvidia", "/dev/nvidia0"), Less);
        assert_eq!(natural_cmp("/dev/nvidia1", "/dev/nvidiactl"), Less);
        assert_eq!(natural_cmp("/a/nvidia7", "/b/nvidia0"), Less);
    }

    #[test]
    fn autodetected_gpus_with_permuted_minors_are_numbered_in_nvml_order() {
        // NVML index i has minor [2, 0, 3, 1][i]: the file sort gives 0,1,2,3 by minor, the
        // links sort puts them back in NVML order, so Slurm index i is NVML index i.
        let minors = [2, 0, 3, 1];
        let records = detected(&minors);
        let (order, exact) = slurm_autodetect_order(&records);
        assert!(exact);
        assert_eq!(order, vec![0, 1, 2, 3]);
        let map = DeviceMap::from_autodetected(&records, &minors.map(Some));
        assert_eq!(map.source(), MapSource::AutodetectOrder { exact: true });
        assert_eq!(map.nvml_indices(&[0, 1, 2, 3]), (vec![0, 1, 2, 3], vec![]));
        assert!(map.describe().contains("autodetection gave Slurm"), "{}", map.describe());
    }

    #[test]
    fn links_positions_permuted_against_files_decide_the_order() {
        // Records handed over in an order where the -1 positions are permuted against the file
        // order: the links position wins whatever order they came in.
        let records: Vec<AutodetectedGpu> = [("/dev/nvidia0", "0,0,-1,0"), ("/dev/nvidia1", "-1,0,0,0"), ("/dev/nvidia2", "0,0,0,-1"), ("/dev/nvidia3", "0,-1,0,0")]
            .iter()
            .map(|(f, l)| AutodetectedGpu { file: Some(f.to_string()), links: Some(l.to_string()) })
            .collect();
        let mut reversed = records.clone();
        reversed.reverse();
        assert_eq!(slurm_autodetect_order(&records), (vec![1, 3, 0, 2], true));
        assert_eq!(slurm_autodetect_order(&reversed), (vec![2, 0, 3, 1], true));
        // NVML index i has minor [1, 3, 0, 2][i] (the -1 positions above): Slurm index i is
        // NVML index i again, and both input orders give the same map.
        let minors = [Some(1), Some(3), Some(0), Some(2)];
        let map = DeviceMap::from_autodetected(&records, &minors);
        assert_eq!(map.nvml_indices(&[0, 1, 2, 3]), (vec![0, 1, 2, 3], vec![]));
        assert_eq!(map, DeviceMap::from_autodetected(&reversed, &minors));
        // The same records on a driver whose minors do not say what the links say: the map
        // follows the files (Slurm index 0 is /dev/nvidia1, the device with minor 1).
        let map = DeviceMap::from_autodetected(&records, &[Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(map.nvml_indices(&[0, 1, 2, 3]), (vec![1, 3, 0, 2], vec![]));
    }

    #[test]
    fn a_gpu_left_out_of_detection_shifts_slurms_numbering() {
        // NVML device 1's minor could not be read: detection leaves it out, and by the rule
        // Slurm index 1 is NVML device 2, where the NVML-order fallback would say 1. (The rule
        // only: 24.11's slurmctld refuses such a node, its links strings being longer than its
        // GPU count.)
        let mut records = detected(&[2, 0, 3]);
        records.remove(1);
        let map = DeviceMap::from_autodetected(&records, &[Some(2), None, Some(3)]);
        assert_eq!(map.len(), 2);
        assert_eq!(map.nvml_indices(&[0, 1]), (vec![0, 2], vec![]));
        assert_ne!(map.nvml_index(1), DeviceMap::nvml_order(3).nvml_index(1));
    }

    #[test]
    fn without_links_slurm_keeps_file_order_and_says_it_is_not_exact() {
        // Nulls last in both sorts; records without links tie, so qsort may order them any way:
        // we keep the file order (natural, /dev/nvidia10 after /dev/nvidia2) and flag it.
        let records = vec![
            AutodetectedGpu { file: Some("/dev/nvidia10".into()), links: None },
            AutodetectedGpu { file: None, links: Some("0,-1".into()) },
            AutodetectedGpu { file: Some("/dev/nvidia2".into()), links: None },
            AutodetectedGpu { file: Some("/dev/nvidia1".into()), links: Some("-1,0".into()) },
        ];
        let (order, exact) = slurm_autodetect_order(&records);
        assert_eq!(order, vec![3, 1, 2, 0]);
        assert!(!exact);
        let map = DeviceMap::from_autodetected(&records, &[Some(1), Some(2), Some(10)]);
        assert_eq!(map.source(), MapSource::AutodetectOrder { exact: false });
        assert_eq!(map.len(), 4);
        assert_eq!(map.nvml_indices(&[0, 1, 2, 3]), (vec![0, 1, 2], vec![1]), "the record without a file has no device");
        assert!(map.describe().contains("unstable"), "{}", map.describe());
    }

    #[test]
    fn autodetected_records_without_gpu_files_map_to_nothing() {
        let records = vec![AutodetectedGpu { file: None, links: Some("-1".into()) }];
        let map = DeviceMap::from_autodetected(&records, &[Some(0)]);
        assert_eq!(map.source(), MapSource::AutodetectOrder { exact: true });
        assert_eq!(map.nvml_indices(&[0]), (vec![], vec![0]));
        assert!(DeviceMap::from_autodetected(&[], &[Some(0)]).is_empty());
    }

    #[test]
    fn an_exact_order_does_not_depend_on_the_order_records_came_in() {
        // Whatever order the records reach Slurm in (and whatever its qsort does), an exact
        // result names the same file at each Slurm index.
        let mut seed: u64 = 0x2411;
        let mut next = move |n: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        for _ in 0..200 {
            let n = 1 + next(12);
            let mut minors: Vec<u32> = (0..n as u32).collect();
            for i in (1..n).rev() {
                minors.swap(i, next(i + 1));
            }
            let records = detected(&minors);
            let files = |r: &[AutodetectedGpu]| {
                let (order, exact) = slurm_autodetect_order(r);
                assert!(exact);
                order.iter().map(|&k| r[k].file.clone()).collect::<Vec<_>>()
            };
            let want = files(&records);
            let mut shuffled = records.clone();
            for i in (1..n).rev() {
                shuffled.swap(i, next(i + 1));
            }
            assert_eq!(files(&shuffled), want, "minors {minors:?}");
            let by_nvml: Vec<Option<u32>> = minors.iter().copied().map(Some).collect();
            let map = DeviceMap::from_autodetected(&shuffled, &by_nvml);
            assert_eq!(map, DeviceMap::from_autodetected(&records, &by_nvml));
            assert_eq!(map.nvml_indices(&(0..n).collect::<Vec<_>>()).0, (0..n as u32).collect::<Vec<_>>());
        }
    }
}
