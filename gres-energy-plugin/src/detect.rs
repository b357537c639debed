//! What autodetection (`AutoDetect=nvml`) reports for each GPU, the way stock gpu/nvml reports
//! it: type name (NVML's product name, lower case, blanks as `_`: `tesla_v100-sxm2-32gb`),
//! device file `/dev/nvidia<minor>`, the CPUs near the GPU and Slurm's links string.
//!
//! The device directory is `/dev` on a real node. `SLURM_ENERGY_NVIDIA_DEV_DIR` (in slurmd's
//! environment) replaces it: **for tests only**, where `/dev/nvidia*` must not be created on the
//! host and the test cluster makes its own character devices.

use gpu_control::{GpuControl, GpuError};

/// Environment variable naming the directory of the `nvidiaN` device files (tests only).
pub const DEV_DIR_ENV: &str = "SLURM_ENERGY_NVIDIA_DEV_DIR";

/// Slurm's links value of a GPU to itself (`NVLINK_SELF`).
pub const NVLINK_SELF: i32 = -1;

/// Directory of the `nvidiaN` device files.
pub fn device_dir() -> String {
    match std::env::var(DEV_DIR_ENV) {
        Ok(dir) if !dir.trim().is_empty() => dir.trim_end_matches('/').to_string(),
        _ => "/dev".to_string(),
    }
}

/// One detected GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub nvml_index: u32,
    pub minor: u32,
    /// NVML's product name, e.g. `Tesla V100-SXM2-32GB`.
    pub name: String,
    /// Slurm's type name, e.g. `tesla_v100-sxm2-32gb`.
    pub type_name: String,
    pub uuid: Option<String>,
    pub device_file: String,
    /// Machine CPU ids near the GPU, ascending (empty: unknown).
    pub cpus: Vec<u32>,
    /// `-1,6,0,0`: links to each GPU in NVML order, -1 for itself.
    pub links: String,
}

/// Everything found, and what failed on the way (for the log).
#[derive(Debug, Default)]
pub struct Detection {
    pub gpus: Vec<GpuInfo>,
    pub errors: Vec<GpuError>,
}

pub use gpu_control::gres_type::slurm_type_name;

/// `0-3,8,10-11`, as Slurm's `bit_fmt_full` writes a CPU set.
pub fn cpu_range(ids: &[u32]) -> String {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let start = ids[i];
        let mut end = start;
        while i + 1 < ids.len() && ids[i + 1] == end + 1 {
            i += 1;
            end = ids[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(",")
}

/// Slurm's links string of GPU `index`: for every GPU (NVML order) the number of NVLinks to it,
/// [`NVLINK_SELF`] for itself. `peers` are the PCI bus ids at the far end of each active link;
/// `bus_ids` every GPU's own bus id.
pub fn links_string(index: usize, peers: &[String], bus_ids: &[Option<String>]) -> String {
    let mut links = vec![0i32; bus_ids.len()];
    if let Some(own) = links.get_mut(index) {
        *own = NVLINK_SELF;
    }
    for peer in peers {
        let found = bus_ids
            .iter()
            .position(|b| b.as_deref().is_some_and(|b| b.eq_ignore_ascii_case(peer)));
        if let Some(k) = found.filter(|&k| k != index) {
            links[k] += 1;
        }
    }
    links.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// Detects every GPU NVML sees. A GPU whose minor number cannot be read is left out (it has
/// no device file), as stock does; other failures leave that field empty. The links strings
/// cover only the GPUs handed to Slurm (a column for a GPU that is left out would make
/// slurmctld refuse the node: "Invalid GRES Links value"), so each GPU's -1 sits at its position
/// among them, in NVML order.
pub fn detect(ctrl: &dyn GpuControl, dev_dir: &str) -> Result<Detection, GpuError> {
    let count = ctrl.device_count()?;
    let mut out = Detection::default();
    fn keep<T>(r: Result<T, GpuError>, errors: &mut Vec<GpuError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                errors.push(e);
                None
            }
        }
    }
    let kept: Vec<(u32, u32)> = (0..count).filter_map(|i| keep(ctrl.minor_number(i), &mut out.errors).map(|m| (i, m))).collect();
    let bus_ids: Vec<Option<String>> = kept.iter().map(|&(i, _)| keep(ctrl.pci_bus_id(i), &mut out.errors)).collect();
    for (position, &(i, minor)) in kept.iter().enumerate() {
        let name = keep(ctrl.name(i), &mut out.errors).unwrap_or_else(|| "gpu".to_string());
        let uuid = keep(ctrl.uuid(i), &mut out.errors);
        let cpus = keep(ctrl.cpu_affinity(i), &mut out.errors).unwrap_or_default();
        let peers = keep(ctrl.nvlink_peers(i), &mut out.errors).unwrap_or_default();
        out.gpus.push(GpuInfo {
            nvml_index: i,
            minor,
            type_name: slurm_type_name(&name),
            name,
            uuid,
            device_file: format!("{dev_dir}/nvidia{minor}"),
            cpus,
            links: links_string(position, &peers, &bus_ids),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_control::FakeGpus;

    #[test]
    fn type_names_like_stock() {
        assert_eq!(slurm_type_name("Tesla V100-SXM2-16GB"), "tesla_v100-sxm2-16gb");
        assert_eq!(slurm_type_name("NVIDIA A100-SXM4-40GB"), "nvidia_a100-sxm4-40gb");
    }

    #[test]
    fn cpu_ranges() {
        assert_eq!(cpu_range(&[0, 1, 2, 3]), "0-3");
        assert_eq!(cpu_range(&[8, 0, 1, 10, 11, 3]), "0-1,3,8,10-11");
        assert_eq!(cpu_range(&[5]), "5");
        assert_eq!(cpu_range(&[]), "");
    }

    #[test]
    fn links_count_nvlinks_per_peer() {
        let bus = |s: &str| Some(s.to_string());
        let bus_ids = vec![bus("00000000:06:00.0"), bus("00000000:07:00.0"), None, bus("00000000:09:00.0")];
        let peers: Vec<String> =
            ["00000000:07:00.0", "00000000:07:00.0", "00000000:09:00.0", "00000000:FF:00.0"].map(String::from).to_vec();
        assert_eq!(links_string(0, &peers, &bus_ids), "-1,2,0,1");
        assert_eq!(links_string(1, &[], &bus_ids), "0,-1,0,0");
    }

    #[test]
    fn detects_fake_gpus() {
        let d = detect(&FakeGpus::v100s(2), "/tmp/dev").unwrap();
        assert!(d.errors.is_empty(), "{:?}", d.errors);
        assert_eq!(d.gpus.len(), 2);
        assert_eq!(d.gpus[1].device_file, "/tmp/dev/nvidia1");
        assert_eq!(d.gpus[0].type_name, slurm_type_name(&d.gpus[0].name));
        assert_eq!(d.gpus[0].links, "-1,0");
    }

    /// NVML device 1 of 3 has no readable minor number: it is left out, and the links strings
    /// of the other two have two columns, their -1 at their position among the GPUs kept.
    #[test]
    fn a_gpu_left_out_has_no_links_column() {
        let gpus = FakeGpus::v100s(3);
        gpus.with_gpu(1, |g| g.refuse_minor = Some(gpu_control::GpuErrorKind::NotSupported)).unwrap();
        let d = detect(&gpus, "/dev").unwrap();
        assert_eq!(d.errors.len(), 1, "{:?}", d.errors);
        let kept: Vec<(u32, &str)> = d.gpus.iter().map(|g| (g.nvml_index, g.links.as_str())).collect();
        assert_eq!(kept, vec![(0, "-1,0"), (2, "0,-1")]);
    }
}
