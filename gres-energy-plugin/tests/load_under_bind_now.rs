//! Both plugins load with `RTLD_NOW` in a process that has none of Slurm's symbols: they carry
//! no undefined daemon-only symbol (Debian 22.05.8's stock acct_gather_energy/gpu does: `conf`,
//! which kills slurmctld), and export every symbol Slurm's loaders resolve.

use std::ffi::CString;

fn check(lib: &str, symbols: &[&str]) {
    let path = CString::new(slurm_testcluster::require_built(lib).display().to_string()).unwrap();
    // SAFETY: dlopen/dlsym/dlerror with valid C strings; the library's constructors are Rust's
    // own (no Slurm code runs), and the handle is closed after the look-ups.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let err = std::ffi::CStr::from_ptr(libc::dlerror()).to_string_lossy().into_owned();
            panic!("{lib} does not load with RTLD_NOW: {err}");
        }
        for sym in symbols {
            let name = CString::new(*sym).unwrap();
            assert!(!libc::dlsym(handle, name.as_ptr()).is_null(), "{lib} does not export {sym}");
        }
        libc::dlclose(handle);
    }
}

const COMMON: [&str; 5] = ["plugin_name", "plugin_type", "plugin_version", "init", "fini"];

#[test]
fn gpu_nvml_loads_and_exports_the_gpu_interface_of_its_release() {
    let mut syms = COMMON.to_vec();
    // 22.05 src/common/gpu.c, 24.11 src/interfaces/gpu.c: syms[]
    #[cfg(not(slurm_ge_24_11))]
    syms.push("gpu_p_reconfig");
    #[cfg(slurm_ge_24_11)]
    syms.push("gpu_p_usage_read");
    syms.extend([
        "gpu_p_get_system_gpu_list",
        "gpu_p_step_hardware_init",
        "gpu_p_step_hardware_fini",
        "gpu_p_test_cpu_conv",
        "gpu_p_energy_read",
        "gpu_p_get_device_count",
    ]);
    check("libgpu_nvml.so", &syms);
}

#[test]
fn acct_gather_energy_nvml_loads_and_exports_the_energy_interface() {
    let mut syms = COMMON.to_vec();
    // 22.05 src/common/slurm_acct_gather_energy.c, 24.11 src/interfaces/acct_gather_energy.c
    // (unchanged): syms[]
    syms.extend([
        "acct_gather_energy_p_update_node_energy",
        "acct_gather_energy_p_get_data",
        "acct_gather_energy_p_set_data",
        "acct_gather_energy_p_conf_options",
        "acct_gather_energy_p_conf_set",
        "acct_gather_energy_p_conf_values",
    ]);
    check("libacct_gather_energy_nvml.so", &syms);
}
