//! `gpu/nvml` (`gpu_nvml.so`): a drop-in for stock gpu/nvml, installed in an earlier
//! `PluginDir` entry. slurmd loads it when gres.conf says `AutoDetect=nvml` and
//! `libnvidia-ml.so` can be opened; slurmstepd loads it for srun steps with `--gpu-freq`.
//!
//! The loader (22.05: `src/common/gpu.c`, 24.11: `src/interfaces/gpu.c`) resolves exactly these
//! API symbols: `gpu_p_get_system_gpu_list`, `gpu_p_step_hardware_init`,
//! `gpu_p_step_hardware_fini`, `gpu_p_test_cpu_conv`, `gpu_p_energy_read`,
//! `gpu_p_get_device_count`; 22.05 also `gpu_p_reconfig`, 24.11 instead `gpu_p_usage_read`
//! (a process's GPU memory and utilisation for the `gres/gpumem` and `gres/gpuutil` TRES, read by
//! jobacct_gather in slurmstepd). 22.05 reports no GPU utilisation to Slurm.
//!
//! What each does is in plain Rust in the `gres-energy-plugin` crate; this file only converts
//! between Slurm's records and those types. Every entry point catches panics.

use std::ffi::{CStr, c_char, c_int, c_uint};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use gpu_control::arbiter::{StepKey, ledger_dir_from_env};
use gpu_control::{GpuControl, NvmlGpu};
use gres_energy::clocks::{self, StepClocks};
use gres_energy::detect::{self, GpuInfo};
use gres_energy::devmap::{self, DeviceMap, MapSource};
use gres_energy::energy::{CounterStep, CounterTrack, EnergyFields, unix_now_s};
use gres_energy::errors::ErrorOnce;
use gres_energy::{StepId, nvml};
use slurm_bindings::node_api::{self, Daemon, DetectedGpu, NodeApi};
use slurm_bindings::{Logger, slurm_log, sys};

#[unsafe(no_mangle)]
#[used]
pub static plugin_name: [u8; 43] = *b"GPU NVML plugin with energy (slurm-energy)\0";

#[unsafe(no_mangle)]
#[used]
pub static plugin_type: [u8; 9] = *b"gpu/nvml\0";

/// Must equal the running daemon's `SLURM_VERSION_NUMBER` (major, minor and micro).
#[unsafe(no_mangle)]
#[used]
pub static plugin_version: u32 = slurm_bindings::SLURM_VERSION_NUMBER;

const SLURM_SUCCESS: c_int = 0;
const SLURM_ERROR: c_int = -1;

static LOG: Logger = Logger::new("gpu/nvml");

/// What the plugin keeps between calls (one per process).
struct State {
    errors: ErrorOnce,
    devmap: Option<DeviceMap>,
    step: Option<StepClocks>,
    /// `gpu_p_energy_read`: each Slurm GPU index's counter since its first read (rebased over
    /// driver reloads and GPU resets).
    energy: Vec<CounterTrack>,
}

static STATE: Mutex<State> = Mutex::new(State { errors: ErrorOnce::new(), devmap: None, step: None, energy: Vec::new() });

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn api() -> Option<&'static NodeApi> {
    node_api::node_api().ok()
}

/// Where log lines say we are.
fn context() -> String {
    match api().map(NodeApi::daemon) {
        Some(Daemon::Slurmstepd) => StepId::current().to_string(),
        Some(Daemon::Slurmd) => "slurmd".to_string(),
        _ => "gpu".to_string(),
    }
}

fn open_nvml(errors: &mut ErrorOnce, ctx: &str) -> Option<Arc<NvmlGpu>> {
    match nvml::shared() {
        Ok(n) => Some(n),
        Err(e) => {
            errors.report(&LOG, ctx, &e);
            None
        }
    }
}

fn devmap<'a>(st: &'a mut State, ctrl: &dyn GpuControl, ctx: &str) -> Option<&'a DeviceMap> {
    if st.devmap.is_none() {
        match devmap::build_for_gpu_plugin(ctrl, api()) {
            Ok((map, errs)) => {
                for e in &errs {
                    st.errors.report(&LOG, ctx, e);
                }
                slurm_log!(LOG, verbose, "{ctx}: {}", map.describe());
                st.devmap = Some(map);
            }
            Err(e) => {
                st.errors.report(&LOG, ctx, &e);
                return None;
            }
        }
    }
    st.devmap.as_ref()
}

#[unsafe(no_mangle)]
pub extern "C" fn init() -> c_int {
    slurm_bindings::log::install_bridge(&LOG);
    LOG.guarded("init", SLURM_ERROR, || {
        if let Err(e) = node_api::node_api() {
            LOG.error(&format!("cannot load: {e}"));
            return SLURM_ERROR;
        }
        let mut st = state();
        *st = State { errors: ErrorOnce::new(), devmap: None, step: None, energy: Vec::new() };
        LOG.info(&format!(
            "loaded (slurm-energy {}, Slurm {}): NVML autodetection, --gpu-freq, energy counter",
            env!("CARGO_PKG_VERSION"),
            slurm_bindings::SLURM_VERSION
        ));
        SLURM_SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn fini() -> c_int {
    LOG.guarded("fini", SLURM_SUCCESS, || {
        let mut st = state();
        if let Some(step) = st.step.take() {
            // step_hardware_fini was not called: give the clocks back anyway.
            let ctx = context();
            if let Some(nvml) = open_nvml(&mut st.errors, &ctx) {
                step.finish(nvml.as_ref(), &mut st.errors, &LOG, &ctx);
            }
        }
        st.devmap = None;
        drop(st);
        nvml::close();
        SLURM_SUCCESS
    })
}

#[cfg(not(slurm_ge_24_11))]
#[unsafe(no_mangle)]
pub extern "C" fn gpu_p_reconfig() -> c_int {
    LOG.guarded("gpu_p_reconfig", SLURM_SUCCESS, || SLURM_SUCCESS)
}

/// Converts the machine CPU ids of one GPU to Slurm's abstract core range with the daemon's
/// own converter; `None` (no affinity given to Slurm) when it fails or does not fit the node.
fn abstract_cpus(node_config: &sys::node_config_load_t, gpu: &GpuInfo, ctx: &str) -> Option<String> {
    if gpu.cpus.is_empty() {
        return None;
    }
    let highest = gpu.cpus.iter().copied().max().unwrap_or(0);
    if node_config.cpu_cnt > 0 && highest >= node_config.cpu_cnt {
        LOG.error(&format!(
            "{ctx}: GPU {} is near CPUs {} but the node has {} CPUs configured; its CPU affinity is left out",
            gpu.nvml_index,
            detect::cpu_range(&gpu.cpus),
            node_config.cpu_cnt
        ));
        return None;
    }
    let convert = node_config.xcpuinfo_mac_to_abs?;
    let mac = std::ffi::CString::new(detect::cpu_range(&gpu.cpus)).ok()?;
    let mut abs: *mut c_char = std::ptr::null_mut();
    // SAFETY: slurmd's converter takes a NUL-terminated range and writes an xmalloc'ed string.
    let rc = unsafe { convert(mac.as_ptr() as *mut c_char, &mut abs) };
    if rc != 0 || abs.is_null() {
        LOG.error(&format!(
            "{ctx}: GPU {}: CPUs {} could not be converted to Slurm's core numbering; its CPU affinity is left out",
            gpu.nvml_index,
            detect::cpu_range(&gpu.cpus)
        ));
        return None;
    }
    // SAFETY: a NUL-terminated string written by the converter.
    let text = unsafe { CStr::from_ptr(abs) }.to_string_lossy().into_owned();
    if let Some(api) = api() {
        api.xfree(abs);
    }
    Some(text)
}

/// # Safety
/// Called by Slurm: `node_config` is NULL or slurmd's node configuration record for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpu_p_get_system_gpu_list(node_config: *mut sys::node_config_load_t) -> sys::energy_list_t {
    LOG.guarded("gpu_p_get_system_gpu_list", std::ptr::null_mut(), || {
        let Some(api) = api() else { return std::ptr::null_mut() };
        let ctx = context();
        let mut st = state();
        let Some(nvml) = open_nvml(&mut st.errors, &ctx) else { return std::ptr::null_mut() };
        if api.daemon() == Daemon::Slurmd {
            clocks::repair(nvml.as_ref(), &ledger_dir_from_env(), &mut st.errors, &LOG, &ctx);
        }
        let dev_dir = detect::device_dir();
        let found = match detect::detect(nvml.as_ref(), &dev_dir) {
            Ok(found) => found,
            Err(e) => {
                st.errors.report(&LOG, &ctx, &e);
                return std::ptr::null_mut();
            }
        };
        for e in &found.errors {
            st.errors.report(&LOG, &ctx, e);
        }
        // SAFETY: Slurm passes its node configuration record (or NULL).
        let node_config = unsafe { node_config.as_ref() };
        let cpu_cnt = node_config.map_or(0, |c| c.cpu_cnt);
        let detected: Vec<DetectedGpu> = found
            .gpus
            .iter()
            .map(|g| {
                let cpus_abs = node_config.and_then(|c| abstract_cpus(c, g, &ctx));
                slurm_log!(
                    LOG,
                    verbose,
                    "{ctx}: GPU {}: {} ({}), {}, minor {}, CPUs {}, links {}",
                    g.nvml_index,
                    g.name,
                    g.type_name,
                    g.device_file,
                    g.minor,
                    cpus_abs.as_deref().unwrap_or("-"),
                    g.links
                );
                DetectedGpu {
                    device_file: g.device_file.clone(),
                    type_name: g.type_name.clone(),
                    cpus_machine: if cpus_abs.is_some() { g.cpus.clone() } else { Vec::new() },
                    cpus_abs,
                    links: Some(g.links.clone()),
                    // Stock gives no UniqueId for a whole GPU; Slurm would put one into
                    // CUDA_VISIBLE_DEVICES instead of the index that job scripts expect.
                    unique_id: None,
                }
            })
            .collect();
        LOG.info(&format!(
            "{ctx}: {} GPU(s) detected through NVML: {}",
            detected.len(),
            found.gpus.iter().map(|g| format!("{} {}", g.device_file, g.type_name)).collect::<Vec<_>>().join(", ")
        ));
        // SAFETY: we run in the daemon that asked for the list; it takes ownership.
        unsafe { api.build_gres_list(cpu_cnt, &detected) }
    })
}

fn step_key(api: &NodeApi) -> Option<StepKey> {
    let StepId(ids) = StepId::current();
    let (job, step) = clocks::parse_step_ids(&ids)?;
    let node = node_api::slurmd_node_name(api).unwrap_or_default();
    StepKey::for_process(job, step, &node, std::process::id()).ok()
}

/// # Safety
/// Called by Slurm: `usable_gpus` is NULL or a Slurm bitmap and `tres_freq` NULL or a C string, both alive for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpu_p_step_hardware_init(usable_gpus: *mut sys::bitstr_t, tres_freq: *mut c_char) {
    LOG.guarded("gpu_p_step_hardware_init", (), || {
        let Some(api) = api() else { return };
        if usable_gpus.is_null() || tres_freq.is_null() {
            return;
        }
        let ctx = context();
        // SAFETY: Slurm passes a NUL-terminated string that lives for the call.
        let tres_freq = unsafe { CStr::from_ptr(tres_freq) }.to_string_lossy().into_owned();
        let def = api.gpu_freq_def();
        let request = match clocks::step_request(&tres_freq, def.as_deref()) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                LOG.error(&format!("{ctx}: {e}; GPU clocks left as they are"));
                return;
            }
        };
        // SAFETY: Slurm's bitmap of the step's GPUs (gres/gpu) or shards (gres/shard; its bits
        // are per GPU device too), alive for the call.
        let indices = unsafe { api.bitmap_ones(usable_gpus) };
        // SAFETY: as above.
        let slurm_gpu_count = unsafe { api.bitmap_size(usable_gpus) };
        let mut st = state();
        let Some(nvml) = open_nvml(&mut st.errors, &ctx) else { return };
        let Some(map) = devmap(&mut st, nvml.as_ref(), &ctx) else { return };
        if matches!(map.source(), MapSource::AutodetectOrder { .. }) && slurm_gpu_count != map.len() {
            // Slurm kept or added GPUs autodetection did not give it (a count in slurm.conf
            // below the detected one, config-only File= lines): its order is not ours.
            LOG.error(&format!(
                "{ctx}: Slurm has {slurm_gpu_count} GPU(s), autodetection gave it {}; the GPU numbering may be wrong ({})",
                map.len(),
                map.describe()
            ));
        }
        let (gpus, unknown) = map.nvml_indices(&indices);
        if !unknown.is_empty() {
            LOG.error(&format!("{ctx}: GPU indices {unknown:?} of the step are not on this node; ignored"));
        }
        if let Some(previous) = st.step.take() {
            previous.finish(nvml.as_ref(), &mut st.errors, &LOG, &ctx);
        }
        let key = step_key(api);
        let ledger: PathBuf = ledger_dir_from_env();
        let step = StepClocks::start(nvml.as_ref(), &ledger, key, &gpus, &request, &mut st.errors, &LOG, &ctx);
        st.step = Some(step);
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn gpu_p_step_hardware_fini() {
    LOG.guarded("gpu_p_step_hardware_fini", (), || {
        let mut st = state();
        let Some(step) = st.step.take() else { return };
        let ctx = context();
        let Some(nvml) = open_nvml(&mut st.errors, &ctx) else { return };
        step.finish(nvml.as_ref(), &mut st.errors, &LOG, &ctx);
    })
}

/// Stock's self-test hook (`~zero`, `~max`, `~one`, `~three`, `~half`, `~XX..`): the machine CPU
/// range that a CPU mask of that shape stands for.
/// # Safety
/// Called by Slurm: `cpu_range` is NULL or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpu_p_test_cpu_conv(cpu_range: *mut c_char) -> *mut c_char {
    LOG.guarded("gpu_p_test_cpu_conv", std::ptr::null_mut(), || {
        let Some(api) = api() else { return std::ptr::null_mut() };
        let text = if cpu_range.is_null() {
            String::new()
        } else {
            // SAFETY: NUL-terminated string from the caller.
            unsafe { CStr::from_ptr(cpu_range) }.to_string_lossy().into_owned()
        };
        let cpus = test_mask_cpus(&text).unwrap_or_else(|| {
            LOG.error(&format!("gpu_p_test_cpu_conv: unknown test keyword {text:?}"));
            Vec::new()
        });
        node_api::xstrdup(api, &detect::cpu_range(&cpus))
    })
}

/// CPUs of stock's test masks (64-bit words; `~X..` = that many all-ones words, at most 512).
fn test_mask_cpus(keyword: &str) -> Option<Vec<u32>> {
    const WORDS: u32 = 512;
    Some(match keyword {
        "~zero" => Vec::new(),
        "~max" => (0..WORDS * 64).collect(),
        "~one" => vec![0],
        "~three" => vec![0, 1],
        "~half" => (8..16).collect(),
        k if k.starts_with("~X") => {
            let words = u32::try_from(k.len() - 1).unwrap_or(WORDS).min(WORDS);
            (0..words * 64).collect()
        }
        _ => return None,
    })
}

/// # Safety
/// Called by Slurm: `gpu` is NULL or Slurm's record for GPU `dv_ind`, not used elsewhere during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpu_p_energy_read(dv_ind: u32, gpu: *mut sys::gpu_status_t) -> c_int {
    LOG.guarded("gpu_p_energy_read", SLURM_ERROR, || {
        // SAFETY: Slurm passes its record for GPU `dv_ind` (or NULL).
        let Some(gpu) = (unsafe { gpu.as_mut() }) else { return SLURM_ERROR };
        let ctx = context();
        let mut st = state();
        let Some(nvml) = open_nvml(&mut st.errors, &ctx) else { return SLURM_ERROR };
        let Some(index) = devmap(&mut st, nvml.as_ref(), &ctx).and_then(|m| m.nvml_index(dv_ind as usize)) else {
            return SLURM_ERROR;
        };
        let power_mw = nvml.power_usage_mw(index).unwrap_or_else(|e| {
            st.errors.report(&LOG, &ctx, &e);
            0
        });
        let slot = dv_ind as usize;
        if slot >= 4096 {
            return SLURM_ERROR;
        }
        if st.energy.len() <= slot {
            st.energy.resize(slot + 1, CounterTrack::default());
        }
        let energy_mj = match nvml.total_energy_mj(index) {
            Ok(e) => e,
            Err(e) => {
                st.errors.report(&LOG, &ctx, &e);
                st.energy[slot].failed();
                return SLURM_ERROR;
            }
        };
        if let CounterStep::Rebased { from_mj, to_mj } = st.energy[slot].good(energy_mj, power_mw, std::time::Instant::now()) {
            LOG.info(&format!("{ctx}: GPU {index}: energy counter went back from {from_mj} to {to_mj} mJ (driver reload or GPU reset); counting on from the new value"));
        }
        let now = unix_now_s();
        let e = &mut gpu.energy;
        let previous = EnergyFields { consumed_energy: e.consumed_energy, ..EnergyFields::default() };
        let consumed_j = st.energy[slot].counted_mj() / 1000;
        // Average power since the previous read, from the counter: what a caller that
        // integrates `last_update_watt` over time (stock acct_gather_energy/gpu) needs.
        let prev_time = gpu.last_update_time;
        let watts = if prev_time > 0 && now > prev_time && consumed_j >= previous.consumed_energy {
            u32::try_from((consumed_j - previous.consumed_energy) / u64::try_from(now - prev_time).unwrap_or(1)).unwrap_or(u32::MAX)
        } else {
            power_mw / 1000
        };
        e.previous_consumed_energy = previous.consumed_energy;
        e.base_consumed_energy = consumed_j.saturating_sub(previous.consumed_energy);
        e.consumed_energy = consumed_j;
        e.current_watts = power_mw / 1000;
        e.poll_time = now;
        gpu.previous_update_time = prev_time;
        gpu.last_update_time = now;
        gpu.last_update_watt = watts;
        SLURM_SUCCESS
    })
}

/// # Safety
/// Called by Slurm: `device_count` is NULL or points to Slurm's counter.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpu_p_get_device_count(device_count: *mut c_uint) {
    LOG.guarded("gpu_p_get_device_count", (), || {
        // SAFETY: Slurm passes a pointer to its counter (or NULL).
        let Some(out) = (unsafe { device_count.as_mut() }) else { return };
        let ctx = context();
        let mut st = state();
        *out = open_nvml(&mut st.errors, &ctx)
            .and_then(|n| n.device_count().map_err(|e| st.errors.report(&LOG, &ctx, &e)).ok())
            .unwrap_or(0);
    })
}

/// 24.11: GPU memory (bytes) and SM utilisation (percent, summed over GPUs) of process `pid`
/// into `data`, the process's TRES usage record, at the positions of `gres/gpumem` and
/// `gres/gpuutil` when `AccountingStorageTRES` tracks them. Utilisation counts NVML samples newer
/// than the previous read (`last_time` of the gpuutil entry), as stock gpu/nvml does.
///
/// # Safety
/// Called by jobacct_gather in slurmstepd: `data` is NULL or the process's TRES usage array,
/// which holds an entry for every TRES of the cluster's list, so the positions Slurm's
/// `gpu_get_tres_pos` returns are inside it.
#[cfg(slurm_ge_24_11)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpu_p_usage_read(pid: c_int, data: *mut sys::acct_gather_data_t) -> c_int {
    LOG.guarded("gpu_p_usage_read", SLURM_ERROR, || {
        let Some(api) = api() else { return SLURM_ERROR };
        let (mem_pos, util_pos) = api.gpu_tres_pos();
        if data.is_null() || (mem_pos.is_none() && util_pos.is_none()) {
            return SLURM_SUCCESS;
        }
        let Ok(pid) = u32::try_from(pid) else { return SLURM_ERROR };
        let ctx = context();
        let mut st = state();
        let Some(nvml) = open_nvml(&mut st.errors, &ctx) else { return SLURM_ERROR };
        let count = match nvml.device_count() {
            Ok(n) => n,
            Err(e) => {
                st.errors.report(&LOG, &ctx, &e);
                return SLURM_ERROR;
            }
        };
        // SAFETY: `util_pos` is an index into `data` (see the function's contract).
        let since_us = util_pos.map_or(0, |p| unsafe { (*data.add(p)).last_time });
        let (usage, errors) = gres_energy::usage::read(nvml.as_ref(), count, pid, mem_pos.is_some(), util_pos.is_some(), since_us);
        for e in &errors {
            st.errors.report(&LOG, &ctx, e);
        }
        if let Some(p) = mem_pos {
            // SAFETY: an index into `data` (contract); the entry is ours for the call.
            unsafe { (*data.add(p)).size_read = usage.memory_bytes };
        }
        if let Some(p) = util_pos {
            // SAFETY: as above.
            let entry = unsafe { &mut *data.add(p) };
            entry.size_read = usage.sm_util_pct;
            entry.last_time = usage.newest_sample_us;
        }
        slurm_log!(LOG, debug, "{ctx}: pid {pid}: GPU memory {} MB, SM utilisation {} %", usage.memory_bytes >> 20, usage.sm_util_pct);
        SLURM_SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_masks() {
        assert_eq!(test_mask_cpus("~one"), Some(vec![0]));
        assert_eq!(detect::cpu_range(&test_mask_cpus("~half").unwrap()), "8-15");
        assert_eq!(detect::cpu_range(&test_mask_cpus("~XX").unwrap()), "0-127");
        assert_eq!(test_mask_cpus("bogus"), None);
    }

    #[test]
    fn plugin_symbols() {
        assert_eq!(CStr::from_bytes_until_nul(&plugin_type).unwrap().to_str().unwrap(), "gpu/nvml");
        assert_eq!(plugin_version, slurm_bindings::SLURM_VERSION_NUMBER);
    }
}
