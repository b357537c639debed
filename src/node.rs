//! Read-only views of slurmctld's node records (`node_record_table_ptr`).

use std::ffi::CStr;

use crate::api::Api;
use crate::gres;
use crate::locks::{LockLevel, NotLocked, SlurmctldLock};
use crate::sys;

/// One node record, valid while the guard that produced it lives.
#[derive(Clone, Copy)]
pub struct NodeRef<'a> {
    rec: &'a sys::node_record_t,
}

/// # Safety
/// `p` must be NULL or a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn opt_str<'a>(p: *const std::ffi::c_char) -> Option<&'a str> {
    // SAFETY: forwarded contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().ok()).flatten()
}

impl<'a> NodeRef<'a> {
    /// Index in `node_record_table_ptr` (what job bitmaps index).
    pub fn index(&self) -> usize {
        self.rec.index as usize
    }

    pub fn name(&self) -> &'a str {
        // SAFETY: a node record's name is NULL or a string owned by the record.
        unsafe { opt_str(self.rec.name) }.unwrap_or("")
    }

    /// `NodeAddr`: the name or address slurmctld reaches the node at.
    pub fn addr(&self) -> Option<&'a str> {
        // SAFETY: a node record's comm_name is NULL or a string owned by the record.
        unsafe { opt_str(self.rec.comm_name) }
    }

    /// `NodeHostname`.
    pub fn hostname(&self) -> Option<&'a str> {
        // SAFETY: a node record's node_hostname is NULL or a string owned by the record.
        unsafe { opt_str(self.rec.node_hostname) }
    }

    /// CPUs jobs can use (specialised cores excluded).
    pub fn cpus(&self) -> u32 {
        if self.rec.cpus_efctv > 0 { self.rec.cpus_efctv as u32 } else { self.rec.cpus as u32 }
    }

    /// Hardware threads per core (`ThreadsPerCore`): under `CR_Core` Slurm allocates a job
    /// whole cores, so its CPUs on this node are a multiple of it.
    pub fn threads_per_core(&self) -> u32 {
        u32::from(self.rec.threads).max(1)
    }

    /// Memory jobs can use (MB): RealMemory less MemSpecLimit.
    pub fn memory_mb(&self) -> u64 {
        self.rec.real_memory.saturating_sub(self.rec.mem_spec_limit)
    }

    /// The node's `Gres=` as configured (`gpu:4`).
    pub fn gres(&self) -> &'a str {
        // SAFETY: strings owned by the record or its config record (NULL-checked).
        let own = unsafe { opt_str(self.rec.gres) };
        own.or_else(|| {
            // SAFETY: config_ptr is NULL or the node's configuration record.
            let config = unsafe { self.rec.config_ptr.as_ref() }?;
            // SAFETY: as above.
            unsafe { opt_str(config.gres) }
        })
        .unwrap_or("")
    }

    pub fn gpus(&self) -> u32 {
        gres::count(self.gres(), "gpu").min(u32::MAX as u64) as u32
    }

    /// GRES type of the node's GPUs (`v100` in `gpu:v100:4`), if typed.
    pub fn gpu_type(&self) -> Option<String> {
        gres::first_type(self.gres(), "gpu")
    }

    /// Every GRES type of the node's GPUs, in the order configured (a node may have several:
    /// two GPU models, or MIG profiles).
    pub fn gpu_types(&self) -> Vec<String> {
        gres::types(self.gres(), "gpu")
    }

    /// The node's configured `Weight` (slurm.conf): Slurm's node selection uses the nodes of
    /// the lowest weight first. 1 (Slurm's default) when the node has no configuration record.
    pub fn weight(&self) -> u32 {
        // SAFETY: config_ptr is NULL or the node's configuration record, read under the node lock.
        unsafe { self.rec.config_ptr.as_ref() }.map_or(1, |c| c.weight)
    }

    /// Down, drained or draining, failing, future, not responding, or rebooting. A node in an
    /// active maintenance reservation is usable: the jobs of that reservation may run there
    /// (Slurm's route test keeps every other job off it).
    pub fn unusable(&self) -> bool {
        // SAFETY: the shim only reads the record's state fields.
        unsafe { sys::energy_node_is_unusable(self.rec) }
    }

    pub fn powered_down(&self) -> bool {
        // SAFETY: as above.
        unsafe { sys::energy_node_is_powered_down(self.rec) }
    }

    pub fn powering_up(&self) -> bool {
        // SAFETY: as above.
        unsafe { sys::energy_node_is_powering_up(self.rec) }
    }

    /// The node's energy as its acct_gather_energy plugin last reported it to slurmctld
    /// (`scontrol show node` CurrentWatts/ConsumedJoules; refreshed every AcctGatherNodeFreq).
    /// `None` when the node never reported any (no plugin, or no poll yet).
    pub fn energy(&self) -> Option<NodeEnergy> {
        // SAFETY: energy is NULL or owned by the record, read under the node lock.
        let e = unsafe { self.rec.energy.as_ref() }?;
        (e.poll_time > 0 && e.consumed_energy != crate::sys::NO_VAL64 as u64).then_some(NodeEnergy {
            consumed_j: e.consumed_energy,
            current_w: if e.current_watts == crate::NO_VAL { 0 } else { e.current_watts },
            poll_time: e.poll_time,
        })
    }

    /// When a reboot or resume of the node was requested (0 when none).
    pub fn boot_req_time(&self) -> i64 {
        self.rec.boot_req_time
    }
}

/// A node's energy reading (see [`NodeRef::energy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeEnergy {
    /// Energy since the plugin started counting (J).
    pub consumed_j: u64,
    /// Power at the last reading (W).
    pub current_w: u32,
    /// Unix time of the last reading.
    pub poll_time: i64,
}

/// Number of slots in the node table (some may be empty).
pub(crate) fn table_len(api: &Api) -> usize {
    // SAFETY: address of slurmctld's node_record_count (non-NULL after resolve); read under the
    // node lock by every caller.
    unsafe { (*api.raw().node_record_count).max(0) as usize }
}

impl SlurmctldLock {
    /// Every node, in table order (the order job bitmaps use). Needs the node read lock.
    pub fn nodes(&self) -> Result<Vec<NodeRef<'_>>, NotLocked> {
        self.require("node records", |l| l.node, LockLevel::Read)?;
        let api = self.api();
        let count = table_len(api);
        // SAFETY: under the node lock the table pointer and its `count` slots are stable; each
        // slot is NULL or a valid record.
        let table = unsafe { *api.raw().node_record_table_ptr };
        if table.is_null() {
            return Ok(Vec::new());
        }
        Ok((0..count)
            // SAFETY: `i < count` slots exist (see above).
            .filter_map(|i| unsafe { (*table.add(i)).as_ref() })
            .filter(|rec| !rec.name.is_null())
            .map(|rec| NodeRef { rec })
            .collect())
    }

    /// The name of the node at table index `index` now (`None`: no such node). Needs the node
    /// read lock.
    pub fn node_name_at(&self, index: usize) -> Result<Option<&str>, NotLocked> {
        self.require("node records", |l| l.node, LockLevel::Read)?;
        let api = self.api();
        if index >= table_len(api) {
            return Ok(None);
        }
        // SAFETY: under the node lock the table pointer and its slots are stable; `index` is
        // below the count; a slot is NULL or a valid record.
        let table = unsafe { *api.raw().node_record_table_ptr };
        if table.is_null() {
            return Ok(None);
        }
        // SAFETY: as above.
        let rec = unsafe { (*table.add(index)).as_ref() };
        Ok(rec.filter(|r| !r.name.is_null()).map(|rec| NodeRef { rec }.name()))
    }
}
