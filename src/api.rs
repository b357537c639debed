//! The Slurm functions and data objects the bundle uses, resolved once per process.
//!
//! Resolution happens in the C shim (`energy_slurm_api_resolve`), where `__typeof__` gives each
//! pointer the exact type of the running tree's prototype. A process that lacks a symbol (a
//! test binary, `slurmd` for a slurmctld-only function) gets an [`ApiError`] naming it instead of
//! a failed `dlopen`.

use std::ffi::CStr;
use std::sync::OnceLock;

use crate::sys;

/// The resolved table: every member is non-null.
pub struct Api {
    raw: sys::energy_slurm_api_t,
}

// SAFETY: the table holds only addresses of functions and of process-global objects, which stay
// valid (and at the same address) for the life of the process; sharing the addresses between
// threads is harmless, and every access to the objects they point at goes through the lock
// discipline documented on each wrapper.
unsafe impl Send for Api {}
// SAFETY: see `Send`; the table itself is never written after resolution.
unsafe impl Sync for Api {}

/// A symbol this process does not define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub missing: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "symbol '{}' is not defined in this process (is this plugin loaded by the daemon and the Slurm release ({}) it was built for?)",
            self.missing,
            crate::SLURM_VERSION
        )
    }
}

impl std::error::Error for ApiError {}

static API: OnceLock<Result<Api, ApiError>> = OnceLock::new();

/// The table, resolved on first use.
pub fn api() -> Result<&'static Api, ApiError> {
    API.get_or_init(|| {
        let mut raw = std::mem::MaybeUninit::<sys::energy_slurm_api_t>::zeroed();
        // SAFETY: the shim writes the whole table before returning NULL and touches nothing
        // else; a non-NULL return is a pointer to a string literal in the shim.
        let missing = unsafe { sys::energy_slurm_api_resolve(raw.as_mut_ptr()) };
        if missing.is_null() {
            // SAFETY: zero-initialised, then fully written by the successful resolve; every
            // member is an `Option` of a function pointer or a raw pointer, for which any bit
            // pattern the shim wrote is valid.
            Ok(Api { raw: unsafe { raw.assume_init() } })
        } else {
            // SAFETY: non-NULL results are NUL-terminated literals (see above).
            let name = unsafe { CStr::from_ptr(missing) };
            Err(ApiError { missing: name.to_string_lossy().into_owned() })
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

impl Api {
    /// The raw table, for the wrappers of this crate.
    pub(crate) fn raw(&self) -> &sys::energy_slurm_api_t {
        &self.raw
    }
}

/// Calls a member of the resolved table: `call!(api, name(args...))`.
macro_rules! call {
    ($api:expr, $name:ident($($arg:expr),* $(,)?)) => {
        match $api.raw().$name {
            Some(f) => f($($arg),*),
            // A successful resolve leaves no member empty.
            None => unreachable!(concat!("Slurm API member ", stringify!($name), " is empty")),
        }
    };
}
pub(crate) use call;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_slurmctld_gets_a_named_error() {
        // A test binary defines none of Slurm's symbols: resolution must fail cleanly.
        let err = api().err().expect("a test binary has no Slurm symbols");
        assert_eq!(err.missing, "log_var");
        assert!(err.to_string().contains("log_var"));
    }
}
