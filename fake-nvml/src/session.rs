//! Where a process's fake NVML finds its config and its state, and the process-wide
//! `nvmlInit`/`nvmlShutdown` reference count.
//!
//! Resolution, at every first `nvmlInit` of a process (and after the last `nvmlShutdown`):
//! - config: `$FAKE_NVML_CONFIG` if set and non-empty, else `fake-nvml.conf` in the directory
//!   the loaded library file sits in (if that file exists), else the built-in V100 defaults;
//! - state directory: `$FAKE_NVML_STATE_DIR` if set and non-empty, else `fake-nvml-state/` in
//!   the library's directory.
//!
//! The library-directory fallback lets each test copy the library into its own directory with
//! its own config and run in parallel with other tests in one process without touching the
//! (process-global) environment. Copies must be real copies: the dynamic loader treats hard or
//! symbolic links to one file as one library.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::state::StateStore;

pub const CONFIG_ENV: &str = "FAKE_NVML_CONFIG";
pub const STATE_DIR_ENV: &str = "FAKE_NVML_STATE_DIR";
pub const CONFIG_FILE_NAME: &str = "fake-nvml.conf";
pub const STATE_DIR_NAME: &str = "fake-nvml-state";

/// A resolved config and state directory.
#[derive(Debug, Clone)]
pub struct Session {
    pub config: Config,
    pub store: StateStore,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

impl Session {
    /// Resolves as the library does, given the directory the library was loaded from.
    pub fn resolve(lib_dir: Option<&Path>) -> Result<Session, String> {
        let config_path = env_path(CONFIG_ENV).or_else(|| {
            lib_dir
                .map(|d| d.join(CONFIG_FILE_NAME))
                .filter(|p| p.is_file())
        });
        let config = match config_path {
            Some(path) => Config::load(&path).map_err(|e| e.to_string())?,
            None => Config::default(),
        };
        let state_dir = env_path(STATE_DIR_ENV)
            .or_else(|| lib_dir.map(|d| d.join(STATE_DIR_NAME)))
            .ok_or_else(|| {
                format!("set {STATE_DIR_ENV}: the library's own directory could not be found")
            })?;
        Ok(Session { config, store: StateStore::new(state_dir) })
    }
}

/// The directory of the shared object (or executable) this code was loaded from, found by
/// looking up one of its own addresses in `/proc/self/maps`.
pub fn own_object_dir() -> Option<PathBuf> {
    let addr = own_object_dir as fn() -> Option<PathBuf> as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        // start-end perms offset dev inode path
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
        if !(start..end).contains(&addr) {
            return None;
        }
        let path = fields.nth(4)?;
        Path::new(path).parent().map(Path::to_path_buf)
    })
}

struct Active {
    session: Arc<Session>,
    init_count: u32,
}

static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);

fn active() -> std::sync::MutexGuard<'static, Option<Active>> {
    // A panic while holding this lock leaves plain data behind; keep going.
    ACTIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `nvmlInit`: resolves on the first call, counts the others.
pub fn init() -> Result<Arc<Session>, String> {
    let mut guard = active();
    if let Some(a) = guard.as_mut() {
        a.init_count += 1;
        return Ok(a.session.clone());
    }
    let session = Arc::new(Session::resolve(own_object_dir().as_deref())?);
    *guard = Some(Active { session: session.clone(), init_count: 1 });
    Ok(session)
}

/// `nvmlShutdown`: false if NVML was not initialised.
pub fn shutdown() -> bool {
    let mut guard = active();
    match guard.as_mut() {
        Some(a) if a.init_count > 1 => {
            a.init_count -= 1;
            true
        }
        Some(_) => {
            *guard = None;
            true
        }
        None => false,
    }
}

/// The session of an initialised library.
pub fn current() -> Option<Arc<Session>> {
    active().as_ref().map(|a| a.session.clone())
}
