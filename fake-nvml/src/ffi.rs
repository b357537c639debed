//! The exported C surface: NVML functions with NVML's names and signatures (taken from
//! `nvml-wrapper-sys`, so the struct layouts match the caller's byte for byte).
//!
//! Every exported function goes through [`run`]: it catches panics (none must cross into C),
//! returns `NVML_ERROR_UNINITIALIZED` before `nvmlInit`, reads the shared state, applies the
//! state's fail rules, then runs the simulated call. Mutating calls re-read and write the state
//! under the exclusive lock ([`crate::state::StateStore::update`]).
//!
//! Device handles are opaque tokens `index + 1` cast to a pointer; they are never dereferenced.
//! Unsafe code is confined to the out-pointer helpers at the bottom, each with its invariant.
//! Functions nvml-wrapper or Slurm may call that the fake does not model are exported and
//! return `NVML_ERROR_NOT_SUPPORTED`, as on a GPU without the feature.

#![allow(non_snake_case)]

use std::borrow::Cow;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulong, c_ulonglong};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use nvml_wrapper_sys::bindings::{
    nvmlClockId_t, nvmlClockType_t, nvmlDevice_st, nvmlDevice_t, nvmlEnableState_t, nvmlMemory_t,
    nvmlMemory_v2_t, nvmlPciInfo_t, nvmlProcessInfo_t, nvmlProcessInfo_v1_t, nvmlProcessUtilizationSample_t, nvmlPstates_t,
    nvmlReturn_t, nvmlTemperatureSensors_t, nvmlUtilization_t,
};

use crate::codes::{self, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NO_PERMISSION, NOT_FOUND, NOT_SUPPORTED, Ret, SUCCESS, UNKNOWN};
use crate::config::{Config, GpuSpec, parse_bus_id};
use crate::generations::{Answer, Control};
use crate::model;
use crate::session::{self, Session};
use crate::state::{GpuState, State, now_unix_ns};

const CLOCK_GRAPHICS: nvmlClockType_t = 0;
const CLOCK_SM: nvmlClockType_t = 1;
const CLOCK_MEM: nvmlClockType_t = 2;
const CLOCK_ID_CURRENT: nvmlClockId_t = 0;
const CLOCK_ID_APP_TARGET: nvmlClockId_t = 1;
const CLOCK_ID_APP_DEFAULT: nvmlClockId_t = 2;
const CLOCK_ID_BOOST_MAX: nvmlClockId_t = 3;
const FEATURE_DISABLED: nvmlEnableState_t = 0;
const FEATURE_ENABLED: nvmlEnableState_t = 1;
const NVLINK_MAX_LINKS: u32 = nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS;
/// `nvmlClockLimitId_t`: symbolic bounds of `nvmlDeviceSetGpuLockedClocks`.
const CLOCK_LIMIT_ID_RANGE_START: c_uint = 0xffff_ff00;
const CLOCK_LIMIT_ID_TDP: c_uint = 0xffff_ff01;
const CLOCK_LIMIT_ID_UNLIMITED: c_uint = 0xffff_ff02;
/// NVML_STRUCT_VERSION(Memory, 2)
const MEMORY_V2_VERSION: c_uint = (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

fn handle_of(index: usize) -> nvmlDevice_t {
    std::ptr::without_provenance_mut::<nvmlDevice_st>(index + 1)
}

/// What a call is about, for validation and for fail rules with `@<gpu>`.
enum Target {
    System,
    Index(c_uint),
    Device(nvmlDevice_t),
}

/// What a simulated call sees: the session, the state as read at entry and, for device calls,
/// the GPU and the config as that GPU's model sees it ([`Config::for_gpu`]).
struct Ctx<'a> {
    session: &'a Session,
    state: &'a State,
    index: usize,
    call: &'static str,
    view: Cow<'a, Config>,
}

/// Effective uid 0, from `/proc/self/status` (`Uid: real effective saved fs`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").map(|r| r.split_whitespace().nth(1) == Some("0"))))
        .unwrap_or(false)
}

impl Ctx<'_> {
    fn config(&self) -> &Config {
        &self.view
    }

    /// May this caller use `control` on this GPU? NVML's answers: `NO_PERMISSION` for a
    /// non-root caller where setters need root, else what the GPU's support matrix says.
    fn permitted(&self, control: Control) -> Result<(), Ret> {
        if self.view.set_requires_root && !is_root() {
            return Err(NO_PERMISSION);
        }
        match self.view.support.answer(control) {
            Answer::Supported => Ok(()),
            Answer::NotSupported => Err(NOT_SUPPORTED),
            Answer::NoPermission => Err(NO_PERMISSION),
        }
    }

    fn spec(&self) -> Result<&GpuSpec, Ret> {
        self.session.config.gpus.get(self.index).ok_or(INVALID_ARGUMENT)
    }

    fn gpu(&self) -> Result<&GpuState, Ret> {
        self.state.gpus.get(self.index).ok_or(UNKNOWN)
    }

    /// Read-modify-write of this GPU's state under the exclusive lock.
    fn update(&self, change: impl FnOnce(&mut GpuState)) -> Result<(), Ret> {
        let index = self.index;
        self.session
            .store
            .update(&self.session.config, |state| state.gpus.get_mut(index).map(change).is_some())
            .map_err(|e| {
                eprintln!("fake-nvml: {}: {e}", self.call);
                UNKNOWN
            })?
            .then_some(())
            .ok_or(UNKNOWN)
    }
}

fn run(call: &'static str, target: Target, body: impl FnOnce(&Ctx) -> Result<(), Ret>) -> nvmlReturn_t {
    catch_unwind(AssertUnwindSafe(|| run_unguarded(call, target, body))).unwrap_or(UNKNOWN)
}

fn run_unguarded(call: &'static str, target: Target, body: impl FnOnce(&Ctx) -> Result<(), Ret>) -> Ret {
    let Some(session) = session::current() else {
        return codes::UNINITIALIZED;
    };
    let state = match session.store.load(&session.config) {
        Ok(state) => state,
        Err(e) => {
            eprintln!("fake-nvml: {call}: {e}");
            return UNKNOWN;
        }
    };
    let count = session.config.gpu_count();
    let index = match target {
        Target::System => None,
        Target::Index(i) => Some(i as usize),
        Target::Device(handle) => match handle.addr().checked_sub(1).filter(|i| *i < count) {
            Some(i) => Some(i),
            None => return INVALID_ARGUMENT,
        },
    };
    if let Some(code) = state.failure_for(call, index.map(|i| i as u32)) {
        return code;
    }
    let index = index.unwrap_or(0);
    let ctx = Ctx { session: &session, state: &state, index, call, view: session.config.for_gpu(index) };
    match body(&ctx) {
        Ok(()) => SUCCESS,
        Err(code) => code,
    }
}

fn init(call: &'static str) -> nvmlReturn_t {
    catch_unwind(|| {
        let session: Arc<Session> = match session::init() {
            Ok(s) => s,
            Err(msg) => {
                eprintln!("fake-nvml: {call}: {msg}");
                return UNKNOWN;
            }
        };
        let failure = session
            .store
            .load(&session.config)
            .map(|state| state.failure_for(call, None));
        match failure {
            Ok(None) => SUCCESS,
            Ok(Some(code)) => {
                session::shutdown();
                code
            }
            Err(e) => {
                eprintln!("fake-nvml: {call}: {e}");
                session::shutdown();
                UNKNOWN
            }
        }
    })
    .unwrap_or(UNKNOWN)
}

// ---- init, shutdown, errors, system -------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init("nvmlInit_v2")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    init("nvmlInit")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    init("nvmlInitWithFlags")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    catch_unwind(|| if session::shutdown() { SUCCESS } else { codes::UNINITIALIZED }).unwrap_or(UNKNOWN)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    codes::message(result).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run("nvmlSystemGetDriverVersion", Target::System, |c| put_str(version, length, &c.config().driver_version))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run("nvmlSystemGetNVMLVersion", Target::System, |c| {
        let major = c.config().cuda_driver_version / 1000;
        put_str(version, length, &format!("{major}.{}", c.config().driver_version))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> nvmlReturn_t {
    run("nvmlSystemGetCudaDriverVersion", Target::System, |c| put(version, c.config().cuda_driver_version))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> nvmlReturn_t {
    run("nvmlSystemGetCudaDriverVersion_v2", Target::System, |c| put(version, c.config().cuda_driver_version))
}

// ---- enumeration and identity ---------------------------------------------------------------

fn device_count(call: &'static str, count: *mut c_uint) -> nvmlReturn_t {
    run(call, Target::System, |c| put(count, c.config().gpu_count() as c_uint))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    device_count("nvmlDeviceGetCount_v2", count)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> nvmlReturn_t {
    device_count("nvmlDeviceGetCount", count)
}

fn handle_by_index(call: &'static str, index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    run(call, Target::Index(index), |c| {
        if index as usize >= c.config().gpu_count() {
            return Err(INVALID_ARGUMENT);
        }
        put(device, handle_of(index as usize))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    handle_by_index("nvmlDeviceGetHandleByIndex_v2", index, device)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    handle_by_index("nvmlDeviceGetHandleByIndex", index, device)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    run("nvmlDeviceGetHandleByUUID", Target::System, |c| {
        let wanted = read_cstr(uuid)?;
        let index = c.config().gpus.iter().position(|g| g.uuid == wanted).ok_or(NOT_FOUND)?;
        put(device, handle_of(index))
    })
}

fn handle_by_bus_id(call: &'static str, bus_id: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    run(call, Target::System, |c| {
        let wanted = parse_bus_id(&read_cstr(bus_id)?).ok_or(INVALID_ARGUMENT)?;
        let index = c
            .config()
            .gpus
            .iter()
            .position(|g| (g.pci_domain, g.pci_bus, g.pci_device) == wanted)
            .ok_or(NOT_FOUND)?;
        put(device, handle_of(index))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    handle_by_bus_id("nvmlDeviceGetHandleByPciBusId_v2", bus_id, device)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId(bus_id: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    handle_by_bus_id("nvmlDeviceGetHandleByPciBusId", bus_id, device)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetName", Target::Device(device), |c| put_str(name, length, &c.spec()?.name))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetUUID", Target::Device(device), |c| put_str(uuid, length, &c.spec()?.uuid))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSerial(device: nvmlDevice_t, serial: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetSerial", Target::Device(device), |c| put_str(serial, length, &format!("03236180{:05}", c.index)))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetIndex", Target::Device(device), |c| put(index, c.index as c_uint))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minor: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetMinorNumber", Target::Device(device), |c| put(minor, c.spec()?.minor_number))
}

fn pci_info_of(config: &Config, spec: &GpuSpec) -> nvmlPciInfo_t {
    let mut info = nvmlPciInfo_t {
        busIdLegacy: [0; 16],
        domain: spec.pci_domain,
        bus: spec.pci_bus,
        device: spec.pci_device,
        pciDeviceId: config.pci_device_id,
        pciSubSystemId: config.pci_subsystem_id,
        busId: [0; 32],
    };
    let legacy = format!("{:04X}:{:02X}:{:02X}.0", spec.pci_domain & 0xffff, spec.pci_bus, spec.pci_device);
    copy_c_string(&mut info.busIdLegacy, &legacy);
    copy_c_string(&mut info.busId, &spec.pci_bus_id);
    info
}

fn copy_c_string(dst: &mut [c_char], src: &str) {
    let n = src.len().min(dst.len().saturating_sub(1));
    for (d, s) in dst.iter_mut().zip(src.bytes().take(n)) {
        *d = s as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    run("nvmlDeviceGetPciInfo_v3", Target::Device(device), |c| put(pci, pci_info_of(c.config(), c.spec()?)))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo_v2(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    run("nvmlDeviceGetPciInfo_v2", Target::Device(device), |c| put(pci, pci_info_of(c.config(), c.spec()?)))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCpuAffinity(device: nvmlDevice_t, size: c_uint, cpu_set: *mut c_ulong) -> nvmlReturn_t {
    run("nvmlDeviceGetCpuAffinity", Target::Device(device), |c| {
        let bits = c_ulong::BITS;
        let mut words = vec![0 as c_ulong; size as usize];
        for cpu in c.config().cpu_affinity(c.index) {
            if let Some(word) = words.get_mut((cpu / bits) as usize) {
                *word |= 1 << (cpu % bits);
            }
        }
        put_array(cpu_set, &words)
    })
}

// ---- clocks ---------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedMemoryClocks(device: nvmlDevice_t, count: *mut c_uint, clocks_mhz: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetSupportedMemoryClocks", Target::Device(device), |c| {
        put_list(count, clocks_mhz, &c.config().memory_clocks_mhz)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedGraphicsClocks(
    device: nvmlDevice_t,
    memory_clock_mhz: c_uint,
    count: *mut c_uint,
    clocks_mhz: *mut c_uint,
) -> nvmlReturn_t {
    run("nvmlDeviceGetSupportedGraphicsClocks", Target::Device(device), |c| {
        if !c.config().memory_clocks_mhz.contains(&memory_clock_mhz) {
            return Err(NOT_FOUND);
        }
        put_list(count, clocks_mhz, &c.config().graphics_clocks_mhz)
    })
}

/// `(memory, graphics)` application clocks in MHz: the current target or the default.
fn app_clock(c: &Ctx, clock_type: nvmlClockType_t, default: bool) -> Result<c_uint, Ret> {
    let gpu = c.gpu()?;
    let config = c.config();
    match (clock_type, default) {
        (CLOCK_GRAPHICS | CLOCK_SM, false) => Ok(gpu.app_graphics_clock_mhz),
        (CLOCK_GRAPHICS | CLOCK_SM, true) => Ok(config.default_graphics_clock_mhz),
        (CLOCK_MEM, false) => Ok(gpu.app_memory_clock_mhz),
        (CLOCK_MEM, true) => Ok(config.default_memory_clock_mhz),
        (3, _) => Err(NOT_SUPPORTED),
        _ => Err(INVALID_ARGUMENT),
    }
}

fn current_clock(c: &Ctx, clock_type: nvmlClockType_t) -> Result<c_uint, Ret> {
    let gpu = c.gpu()?;
    match clock_type {
        CLOCK_GRAPHICS | CLOCK_SM => Ok(model::current_graphics_clock_mhz(c.config(), gpu)),
        CLOCK_MEM => Ok(gpu.app_memory_clock_mhz),
        3 => Err(NOT_SUPPORTED),
        _ => Err(INVALID_ARGUMENT),
    }
}

fn max_clock(c: &Ctx, clock_type: nvmlClockType_t) -> Result<c_uint, Ret> {
    let config = c.config();
    match clock_type {
        CLOCK_GRAPHICS | CLOCK_SM => Ok(config.max_graphics_clock_mhz()),
        CLOCK_MEM => config.memory_clocks_mhz.first().copied().ok_or(UNKNOWN),
        3 => Err(NOT_SUPPORTED),
        _ => Err(INVALID_ARGUMENT),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetApplicationsClock(device: nvmlDevice_t, clock_type: nvmlClockType_t, clock_mhz: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetApplicationsClock", Target::Device(device), |c| put(clock_mhz, app_clock(c, clock_type, false)?))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDefaultApplicationsClock(device: nvmlDevice_t, clock_type: nvmlClockType_t, clock_mhz: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetDefaultApplicationsClock", Target::Device(device), |c| put(clock_mhz, app_clock(c, clock_type, true)?))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetClockInfo(device: nvmlDevice_t, clock_type: nvmlClockType_t, clock_mhz: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetClockInfo", Target::Device(device), |c| put(clock_mhz, current_clock(c, clock_type)?))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxClockInfo(device: nvmlDevice_t, clock_type: nvmlClockType_t, clock_mhz: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetMaxClockInfo", Target::Device(device), |c| put(clock_mhz, max_clock(c, clock_type)?))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetClock(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock_id: nvmlClockId_t,
    clock_mhz: *mut c_uint,
) -> nvmlReturn_t {
    run("nvmlDeviceGetClock", Target::Device(device), |c| {
        let value = match clock_id {
            CLOCK_ID_CURRENT => current_clock(c, clock_type)?,
            CLOCK_ID_APP_TARGET => app_clock(c, clock_type, false)?,
            CLOCK_ID_APP_DEFAULT => app_clock(c, clock_type, true)?,
            CLOCK_ID_BOOST_MAX => max_clock(c, clock_type)?,
            _ => return Err(INVALID_ARGUMENT),
        };
        put(clock_mhz, value)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetApplicationsClocks(device: nvmlDevice_t, memory_clock_mhz: c_uint, graphics_clock_mhz: c_uint) -> nvmlReturn_t {
    run("nvmlDeviceSetApplicationsClocks", Target::Device(device), |c| {
        c.permitted(Control::ApplicationClocks)?;
        let config = c.config();
        if !config.memory_clocks_mhz.contains(&memory_clock_mhz) || !config.graphics_clocks_mhz.contains(&graphics_clock_mhz) {
            return Err(INVALID_ARGUMENT);
        }
        c.update(|g| {
            g.app_memory_clock_mhz = memory_clock_mhz;
            g.app_graphics_clock_mhz = graphics_clock_mhz;
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceResetApplicationsClocks(device: nvmlDevice_t) -> nvmlReturn_t {
    run("nvmlDeviceResetApplicationsClocks", Target::Device(device), |c| {
        c.permitted(Control::ApplicationClocks)?;
        let (memory, graphics) = (c.config().default_memory_clock_mhz, c.config().default_graphics_clock_mhz);
        c.update(|g| {
            g.app_memory_clock_mhz = memory;
            g.app_graphics_clock_mhz = graphics;
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetGpuLockedClocks(device: nvmlDevice_t, min_mhz: c_uint, max_mhz: c_uint) -> nvmlReturn_t {
    run("nvmlDeviceSetGpuLockedClocks", Target::Device(device), |c| {
        c.permitted(Control::LockedClocks)?;
        let (lowest, highest) = (c.config().min_graphics_clock_mhz(), c.config().max_graphics_clock_mhz());
        let symbolic = |v: c_uint| v >= CLOCK_LIMIT_ID_RANGE_START;
        match (symbolic(min_mhz), symbolic(max_mhz)) {
            // Both symbolic: unlimited/unlimited unlocks; TDP bounds act as the full range
            // (the fake has no separate TDP clock).
            (true, true) => {
                let known = |v| v == CLOCK_LIMIT_ID_TDP || v == CLOCK_LIMIT_ID_UNLIMITED;
                if !known(min_mhz) || !known(max_mhz) {
                    return Err(INVALID_ARGUMENT);
                }
                if min_mhz == CLOCK_LIMIT_ID_UNLIMITED && max_mhz == CLOCK_LIMIT_ID_UNLIMITED {
                    return c.update(|g| g.locked_clocks_mhz = None);
                }
                c.update(|g| g.locked_clocks_mhz = Some((lowest, highest)))
            }
            (false, false) => {
                let range = lowest..=highest;
                if min_mhz > max_mhz || !range.contains(&min_mhz) || !range.contains(&max_mhz) {
                    return Err(INVALID_ARGUMENT);
                }
                c.update(|g| g.locked_clocks_mhz = Some((min_mhz, max_mhz)))
            }
            // Mixed numeric and symbolic: NVML refuses it.
            _ => Err(INVALID_ARGUMENT),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceResetGpuLockedClocks(device: nvmlDevice_t) -> nvmlReturn_t {
    run("nvmlDeviceResetGpuLockedClocks", Target::Device(device), |c| {
        c.permitted(Control::LockedClocks)?;
        c.update(|g| g.locked_clocks_mhz = None)
    })
}

// ---- power and energy -----------------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power_mw: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetPowerUsage", Target::Device(device), |c| {
        put(power_mw, model::power_mw(c.config(), c.gpu()?).round() as c_uint)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEnergyConsumption(device: nvmlDevice_t, energy_mj: *mut c_ulonglong) -> nvmlReturn_t {
    run("nvmlDeviceGetTotalEnergyConsumption", Target::Device(device), |c| {
        let energy = model::energy_mj_at(c.config(), c.gpu()?, now_unix_ns());
        put(energy_mj, energy.floor() as c_ulonglong)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementLimit(device: nvmlDevice_t, limit_mw: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetPowerManagementLimit", Target::Device(device), |c| put(limit_mw, c.gpu()?.power_limit_mw))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, limit_mw: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetEnforcedPowerLimit", Target::Device(device), |c| put(limit_mw, c.gpu()?.power_limit_mw))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(device: nvmlDevice_t, limit_mw: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetPowerManagementDefaultLimit", Target::Device(device), |c| {
        put(limit_mw, c.config().power_limit_default_mw)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementLimitConstraints(device: nvmlDevice_t, min_mw: *mut c_uint, max_mw: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetPowerManagementLimitConstraints", Target::Device(device), |c| {
        put(min_mw, c.config().power_limit_min_mw)?;
        put(max_mw, c.config().power_limit_max_mw)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetPowerManagementLimit(device: nvmlDevice_t, limit_mw: c_uint) -> nvmlReturn_t {
    run("nvmlDeviceSetPowerManagementLimit", Target::Device(device), |c| {
        c.permitted(Control::PowerLimit)?;
        if !(c.config().power_limit_min_mw..=c.config().power_limit_max_mw).contains(&limit_mw) {
            return Err(INVALID_ARGUMENT);
        }
        c.update(|g| g.power_limit_mw = limit_mw)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementMode(device: nvmlDevice_t, mode: *mut nvmlEnableState_t) -> nvmlReturn_t {
    run("nvmlDeviceGetPowerManagementMode", Target::Device(device), |_| put(mode, FEATURE_ENABLED))
}

// ---- utilisation, memory, processes, misc ---------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUtilizationRates(device: nvmlDevice_t, utilization: *mut nvmlUtilization_t) -> nvmlReturn_t {
    run("nvmlDeviceGetUtilizationRates", Target::Device(device), |c| {
        let g = c.gpu()?;
        put(utilization, nvmlUtilization_t { gpu: g.util_gpu_pct, memory: g.util_memory_pct })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) -> nvmlReturn_t {
    run("nvmlDeviceGetMemoryInfo", Target::Device(device), |c| {
        let total = c.config().memory_total_bytes;
        let used = c.gpu()?.memory_used_bytes().min(total);
        put(memory, nvmlMemory_t { total, free: total - used, used })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    run("nvmlDeviceGetMemoryInfo_v2", Target::Device(device), |c| {
        let total = c.config().memory_total_bytes;
        let used = c.gpu()?.memory_used_bytes().min(total);
        put(memory, nvmlMemory_v2_t { version: MEMORY_V2_VERSION, total, reserved: 0, free: total - used, used })
    })
}

fn compute_processes_v2(call: &'static str, device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    run(call, Target::Device(device), |c| {
        let list: Vec<nvmlProcessInfo_t> = c
            .gpu()?
            .processes
            .iter()
            .map(|p| nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used_memory_bytes,
                gpuInstanceId: u32::MAX,
                computeInstanceId: u32::MAX,
            })
            .collect();
        put_list(count, infos, &list)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    compute_processes_v2("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    compute_processes_v2("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t {
    run("nvmlDeviceGetComputeRunningProcesses", Target::Device(device), |c| {
        let list: Vec<nvmlProcessInfo_v1_t> = c
            .gpu()?
            .processes
            .iter()
            .map(|p| nvmlProcessInfo_v1_t { pid: p.pid, usedGpuMemory: p.used_memory_bytes })
            .collect();
        put_list(count, infos, &list)
    })
}

/// Per-process SM utilisation: one sample per process that has `sm_util_pct`, stamped now.
/// None at all is what a driver without samples answers: `NVML_ERROR_NOT_FOUND`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    _last_seen_timestamp: c_ulonglong,
) -> nvmlReturn_t {
    run("nvmlDeviceGetProcessUtilization", Target::Device(device), |c| {
        let now_us = (now_unix_ns() / 1000) as c_ulonglong;
        let list: Vec<nvmlProcessUtilizationSample_t> = c
            .gpu()?
            .processes
            .iter()
            .filter_map(|p| {
                let sm = p.sm_util_pct?;
                Some(nvmlProcessUtilizationSample_t { pid: p.pid, timeStamp: now_us, smUtil: sm, memUtil: 0, encUtil: 0, decUtil: 0 })
            })
            .collect();
        if list.is_empty() {
            return Err(NOT_FOUND);
        }
        put_list(count, utilization, &list)
    })
}

fn no_processes(call: &'static str, device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    run(call, Target::Device(device), |_| put_list::<nvmlProcessInfo_t>(count, infos, &[]))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    no_processes("nvmlDeviceGetGraphicsRunningProcesses_v3", device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    no_processes("nvmlDeviceGetMPSComputeRunningProcesses_v3", device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTemperature(device: nvmlDevice_t, _sensor: nvmlTemperatureSensors_t, temp_c: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetTemperature", Target::Device(device), |c| put(temp_c, 35 + c.gpu()?.util_gpu_pct * 45 / 100))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPersistenceMode(device: nvmlDevice_t, mode: *mut nvmlEnableState_t) -> nvmlReturn_t {
    run("nvmlDeviceGetPersistenceMode", Target::Device(device), |_| put(mode, FEATURE_ENABLED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPerformanceState(device: nvmlDevice_t, pstate: *mut nvmlPstates_t) -> nvmlReturn_t {
    run("nvmlDeviceGetPerformanceState", Target::Device(device), |c| {
        put(pstate, if c.gpu()?.util_gpu_pct > 0 { 0 } else { 8 })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCudaComputeCapability(device: nvmlDevice_t, major: *mut c_int, minor: *mut c_int) -> nvmlReturn_t {
    run("nvmlDeviceGetCudaComputeCapability", Target::Device(device), |c| {
        let (ma, mi) = c.config().compute_capability;
        put(major, ma)?;
        put(minor, mi)
    })
}

// ---- NVLink ---------------------------------------------------------------------------------

fn nvlink_peer(c: &Ctx, link: c_uint) -> Result<Option<usize>, Ret> {
    if link >= NVLINK_MAX_LINKS {
        return Err(INVALID_ARGUMENT);
    }
    if link >= c.config().nvlinks_per_gpu {
        return Err(NOT_SUPPORTED);
    }
    Ok(c.config().nvlink_peer(c.index, link))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkState(device: nvmlDevice_t, link: c_uint, is_active: *mut nvmlEnableState_t) -> nvmlReturn_t {
    run("nvmlDeviceGetNvLinkState", Target::Device(device), |c| {
        let state = if nvlink_peer(c, link)?.is_some() { FEATURE_ENABLED } else { FEATURE_DISABLED };
        put(is_active, state)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkVersion(device: nvmlDevice_t, link: c_uint, version: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetNvLinkVersion", Target::Device(device), |c| {
        nvlink_peer(c, link)?;
        put(version, 2)
    })
}

fn nvlink_remote_pci(call: &'static str, device: nvmlDevice_t, link: c_uint, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    run(call, Target::Device(device), |c| {
        let peer = nvlink_peer(c, link)?.ok_or(NOT_SUPPORTED)?;
        let spec = c.config().gpus.get(peer).ok_or(UNKNOWN)?;
        put(pci, pci_info_of(c.config(), spec))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(device: nvmlDevice_t, link: c_uint, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    nvlink_remote_pci("nvmlDeviceGetNvLinkRemotePciInfo_v2", device, link, pci)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo(device: nvmlDevice_t, link: c_uint, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    nvlink_remote_pci("nvmlDeviceGetNvLinkRemotePciInfo", device, link, pci)
}

// ---- not simulated: a V100 has no MIG ---------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigMode(device: nvmlDevice_t, _current: *mut c_uint, _pending: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetMigMode", Target::Device(device), |_| Err(NOT_SUPPORTED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, _count: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetMaxMigDeviceCount", Target::Device(device), |_| Err(NOT_SUPPORTED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(device: nvmlDevice_t, _index: c_uint, _mig: *mut nvmlDevice_t) -> nvmlReturn_t {
    run("nvmlDeviceGetMigDeviceHandleByIndex", Target::Device(device), |_| Err(NOT_SUPPORTED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, _id: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetGpuInstanceId", Target::Device(device), |_| Err(NOT_SUPPORTED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, _id: *mut c_uint) -> nvmlReturn_t {
    run("nvmlDeviceGetComputeInstanceId", Target::Device(device), |_| Err(NOT_SUPPORTED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetAttributes_v2(device: nvmlDevice_t, _attributes: *mut std::ffi::c_void) -> nvmlReturn_t {
    run("nvmlDeviceGetAttributes_v2", Target::Device(device), |_| Err(NOT_SUPPORTED))
}

// ---- out-pointer helpers: the only unsafe code of the fake ----------------------------------

/// Writes one value through an NVML out-parameter.
fn put<T>(ptr: *mut T, value: T) -> Result<(), Ret> {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: NVML's contract for out-parameters: a non-null pointer points to writable,
    // aligned memory for one `T` owned by the caller for the duration of the call.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Writes a NUL-terminated string into a caller buffer of `length` bytes.
fn put_str(buf: *mut c_char, length: c_uint, text: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if text.len() + 1 > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: NVML's contract for string out-parameters: `buf` points to `length` writable
    // bytes; we checked `text.len() + 1 <= length`.
    let out = unsafe { std::slice::from_raw_parts_mut(buf, length as usize) };
    copy_c_string(out, text);
    Ok(())
}

/// Fills a caller array of exactly `items.len()` elements (its size was given by the caller).
fn put_array<T: Copy>(buf: *mut T, items: &[T]) -> Result<(), Ret> {
    if items.is_empty() {
        return Ok(());
    }
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: the caller passed `buf` with room for `items.len()` elements (it passed that
    // size as an argument), aligned and writable for the duration of the call.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), buf, items.len()) };
    Ok(())
}

/// NVML's in/out count pattern: `*count` is the caller's capacity on entry and the number of
/// items on return; `NVML_ERROR_INSUFFICIENT_SIZE` (nothing written) if the capacity is short.
fn put_list<T: Copy>(count: *mut c_uint, buf: *mut T, items: &[T]) -> Result<(), Ret> {
    if count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: NVML's contract: a non-null `count` points to a readable and writable c_uint.
    let capacity = unsafe { count.read() } as usize;
    put(count, items.len() as c_uint)?;
    if capacity < items.len() {
        return Err(INSUFFICIENT_SIZE);
    }
    put_array(buf, items)
}

/// Reads a NUL-terminated input string.
fn read_cstr(ptr: *const c_char) -> Result<String, Ret> {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: NVML's contract for string inputs: a non-null pointer to a NUL-terminated string
    // that stays valid for the duration of the call.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str().map(str::to_owned).map_err(|_| INVALID_ARGUMENT)
}
