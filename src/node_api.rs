//! The Slurm functions the node-side plugins (`gpu/nvml`, `acct_gather_energy/nvml`) use: only
//! libslurmfull's, resolved at run time like [`crate::api`] but as a table of their own, so that
//! slurmd and slurmstepd (which lack slurmctld's symbols) can use them.
//!
//! Safe wrappers for what those plugins do with them: build the autodetected GRES list, read a
//! step's GPU bitmap, tell which daemon we run in.

use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::OnceLock;

use crate::api::ApiError;
use crate::sys;

/// The resolved node-side table: every member is non-null.
pub struct NodeApi {
    raw: sys::energy_node_api_t,
}

// SAFETY: the table holds only addresses of functions of libslurmfull, valid for the life of the
// process; they are thread-safe in the way Slurm's own plugins call them.
unsafe impl Send for NodeApi {}
// SAFETY: see `Send`; never written after resolution.
unsafe impl Sync for NodeApi {}

static NODE_API: OnceLock<Result<NodeApi, ApiError>> = OnceLock::new();

/// The table, resolved on first use.
pub fn node_api() -> Result<&'static NodeApi, ApiError> {
    NODE_API
        .get_or_init(|| {
            let mut raw = std::mem::MaybeUninit::<sys::energy_node_api_t>::zeroed();
            // SAFETY: the shim writes the whole table before returning NULL; a non-NULL return
            // is a string literal of the shim.
            let missing = unsafe { sys::energy_node_api_resolve(raw.as_mut_ptr()) };
            if missing.is_null() {
                // SAFETY: zeroed, then fully written by the successful resolve; members are
                // `Option`s of function pointers, valid for any bit pattern the shim wrote.
                Ok(NodeApi { raw: unsafe { raw.assume_init() } })
            } else {
                // SAFETY: non-NULL results are NUL-terminated literals (see above).
                let name = unsafe { CStr::from_ptr(missing) };
                Err(ApiError { missing: name.to_string_lossy().into_owned() })
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

macro_rules! ncall {
    ($api:expr, $name:ident($($arg:expr),* $(,)?)) => {
        match $api.raw.$name {
            Some(f) => f($($arg),*),
            None => unreachable!(concat!("Slurm node API member ", stringify!($name), " is empty")),
        }
    };
}

/// Which Slurm daemon loaded us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    Slurmctld,
    Slurmd,
    Slurmstepd,
    Other,
}

/// One GPU as autodetection reports it to Slurm (`add_gres_to_list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectedGpu {
    /// Device file, e.g. `/dev/nvidia0`.
    pub device_file: String,
    /// Slurm type name, e.g. `tesla_v100-sxm2-32gb`.
    pub type_name: String,
    /// Cores near the GPU in Slurm's abstract numbering (`0-19`), if known.
    pub cpus_abs: Option<String>,
    /// Machine CPU ids near the GPU (for the CPU bitmap), if known.
    pub cpus_machine: Vec<u32>,
    /// Slurm's links string (`-1,2,0,0`), if known.
    pub links: Option<String>,
    /// UUID, for Slurm's `UniqueId`.
    pub unique_id: Option<String>,
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).unwrap_or_default()
}

impl NodeApi {
    pub fn daemon(&self) -> Daemon {
        // SAFETY: `raw` is the resolved table (every member set); the shim calls only its
        // argument-less daemon predicates (run_in_daemon() from 25.11 on).
        match unsafe { sys::energy_node_daemon(&self.raw) } {
            sys::ENERGY_DAEMON_SLURMSTEPD => Daemon::Slurmstepd,
            sys::ENERGY_DAEMON_SLURMD => Daemon::Slurmd,
            sys::ENERGY_DAEMON_SLURMCTLD => Daemon::Slurmctld,
            _ => Daemon::Other,
        }
    }

    /// Where `gres/gpumem` and `gres/gpuutil` sit in a step's TRES usage record (Slurm's
    /// `gpu_get_tres_pos`), `None` for one `AccountingStorageTRES` does not track. Meaningful in
    /// slurmstepd, whose association manager holds the cluster's TRES list.
    #[cfg(slurm_ge_24_11)]
    pub fn gpu_tres_pos(&self) -> (Option<usize>, Option<usize>) {
        let (mut mem, mut util) = (-1, -1);
        // SAFETY: two out-pointers to locals; Slurm writes an index or -1 to each.
        unsafe { ncall!(self, gpu_get_tres_pos(&mut mem, &mut util)) };
        (usize::try_from(mem).ok(), usize::try_from(util).ok())
    }

    /// slurm.conf `GpuFreqDef`, if set.
    pub fn gpu_freq_def(&self) -> Option<String> {
        let conf = self.raw.slurm_conf;
        if conf.is_null() {
            return None;
        }
        // SAFETY: libslurmfull's `slurm_conf`, read after the daemon loaded its configuration;
        // the string is NUL-terminated or NULL.
        unsafe {
            let p = (*conf).gpu_freq_def;
            if p.is_null() { None } else { Some(CStr::from_ptr(p).to_string_lossy().into_owned()) }
        }
    }

    /// A string member of the loaded `slurm_conf`.
    fn conf_text(&self, member: impl Fn(&sys::slurm_conf_t) -> *mut c_char) -> Option<String> {
        let conf = self.raw.slurm_conf;
        if conf.is_null() {
            return None;
        }
        // SAFETY: libslurmfull's `slurm_conf`, read after the daemon loaded its configuration;
        // string members are NULL or NUL-terminated.
        unsafe {
            let p = member(&*conf);
            if p.is_null() { None } else { Some(CStr::from_ptr(p).to_string_lossy().into_owned()) }
        }
    }

    /// slurm.conf `AuthInfo`.
    pub fn authinfo(&self) -> Option<String> {
        self.conf_text(|c| c.authinfo)
    }

    /// slurm.conf `SchedulerType` (`sched/energy`, `sched/backfill`).
    pub fn scheduler_type(&self) -> Option<String> {
        self.conf_text(|c| c.schedtype)
    }

    /// The path of the slurm.conf the daemon read.
    pub fn slurm_conf_path(&self) -> Option<String> {
        self.conf_text(|c| c.slurm_conf)
    }

    /// The addresses of slurmctld (`SlurmctldHost`: the primary, then the backups).
    pub fn slurmctld_addresses(&self) -> Vec<String> {
        let conf = self.raw.slurm_conf;
        if conf.is_null() {
            return Vec::new();
        }
        // SAFETY: as in `conf_text`; `control_addr` holds `control_cnt` strings (or is NULL).
        unsafe {
            let c = &*conf;
            if c.control_addr.is_null() {
                return Vec::new();
            }
            (0..c.control_cnt as usize)
                .filter_map(|i| {
                    let p = *c.control_addr.add(i);
                    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
                })
                .collect()
        }
    }

    /// The uid of slurm.conf's `SlurmUser` (the uid slurmctld runs as; `None`: configuration
    /// not loaded). 24.11's slurmstepd receives it from slurmd, without the name.
    pub fn slurm_user_id(&self) -> Option<u32> {
        let conf = self.raw.slurm_conf;
        if conf.is_null() {
            return None;
        }
        // SAFETY: libslurmfull's `slurm_conf`, read after the daemon loaded its configuration.
        Some(unsafe { (*conf).slurm_user_id })
    }

    /// slurm.conf `PrologFlags` has `Contain` (`None`: configuration not loaded).
    pub fn prolog_flags_contain(&self) -> Option<bool> {
        let conf = self.raw.slurm_conf;
        if conf.is_null() {
            return None;
        }
        // SAFETY: libslurmfull's `slurm_conf`, read after the daemon loaded its configuration.
        let flags = unsafe { (*conf).prolog_flags };
        Some(u32::from(flags) & sys::PROLOG_FLAG_CONTAIN != 0)
    }

    /// slurm.conf `PrologFlags` has `Alloc` (also set by `Contain`): the job prolog runs at
    /// allocation, from slurmctld's prolog message (`None`: configuration not loaded).
    pub fn prolog_flags_alloc(&self) -> Option<bool> {
        let conf = self.raw.slurm_conf;
        if conf.is_null() {
            return None;
        }
        // SAFETY: libslurmfull's `slurm_conf`, read after the process loaded its configuration.
        let flags = unsafe { (*conf).prolog_flags };
        Some(u32::from(flags) & sys::PROLOG_FLAG_ALLOC != 0)
    }

    /// A new, empty `List` of `gres_slurmd_conf_t`, as `gpu_p_get_system_gpu_list` returns it;
    /// then one record per GPU. Slurm owns (and frees) the list.
    ///
    /// # Safety
    /// Must run in a Slurm daemon that called the GPU plugin (the list is handed to it).
    pub unsafe fn build_gres_list(&self, cpu_cnt: u32, gpus: &[DetectedGpu]) -> sys::energy_list_t {
        // SAFETY: list_create takes the record destructor Slurm uses for these records.
        let list = unsafe { ncall!(self, list_create(self.raw.destroy_gres_slurmd_conf)) };
        for gpu in gpus {
            let file = cstring(&gpu.device_file);
            let type_name = cstring(&gpu.type_name);
            let cpus = gpu.cpus_abs.as_deref().map(cstring);
            let links = gpu.links.as_deref().map(cstring);
            let uuid = gpu.unique_id.as_deref().map(cstring);
            let bitmap = if gpu.cpus_machine.is_empty() || cpus.is_none() {
                std::ptr::null_mut()
            } else {
                let bits = gpu.cpus_machine.iter().copied().max().unwrap_or(0) as i64 + 1;
                // SAFETY: a fresh bitmap of `bits` bits; every set index is below `bits`.
                unsafe {
                    let b = ncall!(self, bit_alloc(bits as sys::bitoff_t));
                    for &cpu in &gpu.cpus_machine {
                        ncall!(self, bit_set(b, cpu as sys::bitoff_t));
                    }
                    b
                }
            };
            let ptr_or_null = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null_mut(), |c| c.as_ptr() as *mut c_char);
            // SAFETY: the table is resolved; every string is a valid C string that outlives the
            // call (add_gres_to_list copies them with xstrdup, and copies the bitmap, which we
            // free after).
            unsafe {
                sys::energy_gres_add_gpu(
                    &self.raw,
                    list,
                    cpu_cnt,
                    ptr_or_null(&cpus),
                    bitmap,
                    file.as_ptr() as *mut c_char,
                    type_name.as_ptr() as *mut c_char,
                    ptr_or_null(&links),
                    ptr_or_null(&uuid),
                );
                if !bitmap.is_null() {
                    let mut b = bitmap;
                    ncall!(self, slurm_bit_free(&mut b));
                }
            }
        }
        list
    }

    /// Frees a string Slurm allocated (xmalloc).
    pub fn xfree(&self, p: *mut c_char) {
        if p.is_null() {
            return;
        }
        let mut p = p.cast::<c_void>();
        // SAFETY: `p` came from Slurm's allocator (caller's contract: only strings Slurm
        // handed us); slurm_xfree NULLs the pointer it is given.
        unsafe { ncall!(self, slurm_xfree(&mut p)) }
    }

    /// Number of bits of a Slurm bitmap (0 for NULL).
    ///
    /// # Safety
    /// `bitmap` must be NULL or a valid `bitstr_t`.
    pub unsafe fn bitmap_size(&self, bitmap: *const sys::bitstr_t) -> usize {
        if bitmap.is_null() {
            return 0;
        }
        // SAFETY: a valid bitmap (caller).
        let n = unsafe { ncall!(self, bit_size(bitmap as *mut sys::bitstr_t)) };
        usize::try_from(n).unwrap_or(0)
    }

    /// Set bits of a Slurm bitmap, ascending.
    ///
    /// # Safety
    /// `bitmap` must be NULL or a valid `bitstr_t` that stays unchanged during the call.
    pub unsafe fn bitmap_ones(&self, bitmap: *const sys::bitstr_t) -> Vec<usize> {
        if bitmap.is_null() {
            return Vec::new();
        }
        let bitmap = bitmap as *mut sys::bitstr_t;
        // SAFETY: valid bitmap (caller), indices below its size.
        unsafe {
            let n = ncall!(self, bit_size(bitmap));
            #[cfg(not(slurm_ge_24_11))]
            let test = |i| ncall!(self, bit_test(bitmap, i));
            #[cfg(slurm_ge_24_11)]
            let test = |i| ncall!(self, slurm_bit_test(bitmap, i));
            (0..n).filter(|&i| test(i) != 0).map(|i| i as usize).collect()
        }
    }

    /// The GPUs of a slurmstepd step record (`ENERGY_DATA_STEP_PTR`): indices into this node's
    /// GPUs in gres order, from the step's gres (srun steps) or, when the step has none and
    /// `job_fallback` is set (for the batch step, whose credential carries only the job's gres),
    /// from the job's gres on this node. `None` if there are no GPUs.
    ///
    /// # Safety
    /// `step` must be slurmstepd's `stepd_step_rec_t`, alive during the call.
    pub unsafe fn step_gpu_indices(&self, step: *const c_void, job_fallback: bool) -> Option<Vec<usize>> {
        // SAFETY: the caller's contract.
        unsafe { self.step_gres_indices(step, "gpu", job_fallback) }
    }

    /// Like [`Self::step_gpu_indices`] for another GRES with per-GPU bits (`shard`: the GPUs the
    /// step's shards are on).
    ///
    /// # Safety
    /// As [`Self::step_gpu_indices`].
    pub unsafe fn step_gres_indices(&self, step: *const c_void, gres: &str, job_fallback: bool) -> Option<Vec<usize>> {
        let name = cstring(gres);
        let mut bitmap: *mut sys::bitstr_t = std::ptr::null_mut();
        let out = (&mut bitmap as *mut *mut sys::bitstr_t).cast::<c_void>();
        // SAFETY: `step` is the step record (caller).
        let step_list = unsafe { sys::energy_stepd_step_gres_list(step) } as sys::energy_list_t;
        let mut rc = -1;
        if !step_list.is_null() {
            // SAFETY: valid list and name; `bitmap` receives a pointer into the step's data (not
            // to be freed), valid while the step record lives.
            rc = unsafe {
                ncall!(self, gres_get_step_info(step_list, name.as_ptr() as *mut c_char, 0, sys::energy_gres_step_data_bitmap() as _, out))
            };
        }
        if (rc != sys::SLURM_SUCCESS as i32 || bitmap.is_null()) && job_fallback {
            // SAFETY: as above, for the job's gres list extracted for this node (index 0).
            let job_list = unsafe { sys::energy_stepd_job_gres_list(step) } as sys::energy_list_t;
            if job_list.is_null() {
                return None;
            }
            // SAFETY: the table is resolved, the list valid; the bitmap returned is borrowed
            // from the job's gres data, alive with the step record.
            bitmap = unsafe { sys::energy_job_gres_bitmap(&self.raw, job_list, name.as_ptr(), 0) };
            rc = sys::SLURM_SUCCESS as i32;
        }
        if rc != sys::SLURM_SUCCESS as i32 || bitmap.is_null() {
            return None;
        }
        // SAFETY: a bitmap of the step's data, alive with the step.
        Some(unsafe { self.bitmap_ones(bitmap) })
    }
}

/// One record of Slurm's list of this node's GRES device files (`gres_device_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresDevice {
    /// Bit of the gres bitmaps.
    pub index: usize,
    pub path: String,
    /// Minor number as Slurm `stat`ed the file, when it is a character device.
    pub minor: Option<u32>,
}

impl NodeApi {
    /// Slurm's own list of this node's GRES device files (every GRES plugin's; one record per
    /// file), `None` when Slurm has none (no GRES with files, or GRES not initialised) or it
    /// cannot be asked for. `in_gpu_plugin`: the caller may run inside a GPU plugin callback,
    /// where Slurm 24.11 holds the GRES lock its list needs (always `None` there on 24.11).
    /// Call from the daemon's main thread (see `energy_gres_devices` in the shim).
    pub fn gres_devices(&self, in_gpu_plugin: bool) -> Option<Vec<GresDevice>> {
        const CAP: usize = 256;
        // SAFETY: an array of plain C structs; all zeros is valid.
        let mut buf: Vec<sys::energy_gres_device_t> = vec![unsafe { std::mem::zeroed() }; CAP];
        // SAFETY: our resolved table and a buffer of CAP records; with `in_gpu_plugin` false the
        // caller promises it is not inside a GPU plugin callback (the GRES lock is free).
        let n = unsafe { sys::energy_gres_devices(&self.raw, buf.as_mut_ptr(), CAP as i32, in_gpu_plugin) };
        let n = usize::try_from(n).ok()?;
        let out = buf
            .iter()
            .take(n.min(CAP))
            .filter_map(|d| {
                let index = usize::try_from(d.index).ok()?;
                // SAFETY: the shim writes a NUL-terminated string into the fixed buffer.
                let path = unsafe { CStr::from_ptr(d.path.as_ptr()) }.to_string_lossy().into_owned();
                Some(GresDevice { index, path, minor: d.is_char.then_some(d.minor) })
            })
            .collect();
        Some(out)
    }
}

/// Job and step id of a slurmstepd step record.
///
/// # Safety
/// `step` must be slurmstepd's `stepd_step_rec_t`, alive during the call.
pub unsafe fn step_ids(step: *const c_void) -> (u32, u32) {
    let (mut job, mut stepid) = (0u32, 0u32);
    // SAFETY: valid record (caller); out-pointers to locals.
    unsafe { sys::energy_stepd_ids(step, &mut job, &mut stepid) };
    (job, stepid)
}

/// This node's Slurm name (slurmd's `conf->node_name`), in slurmd and slurmstepd only.
pub fn slurmd_node_name(api: &NodeApi) -> Option<String> {
    if !matches!(api.daemon(), Daemon::Slurmd | Daemon::Slurmstepd) {
        return None;
    }
    // SAFETY: in slurmd/slurmstepd `conf` is slurmd's configuration record, set up before any
    // plugin runs; the name is NUL-terminated or NULL.
    unsafe {
        let p = sys::energy_slurmd_node_name();
        if p.is_null() { None } else { Some(CStr::from_ptr(p).to_string_lossy().into_owned()) }
    }
}

/// A string Slurm allocated with xmalloc, from Rust text (for `gpu_p_test_cpu_conv`).
pub fn xstrdup(api: &NodeApi, text: &str) -> *mut c_char {
    let c = cstring(text);
    // SAFETY: valid C string; Slurm's xstrdup copies it into its own allocation.
    unsafe { ncall!(api, xstrdup(c.as_ptr())) }
}
