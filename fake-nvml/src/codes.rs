//! NVML return codes: numbers, the names used in state files (`NO_PERMISSION`), and the
//! messages `nvmlErrorString` returns. Pure data; no I/O.

use std::ffi::CStr;

/// An `nvmlReturn_t` value.
pub type Ret = u32;

pub const SUCCESS: Ret = 0;
pub const UNINITIALIZED: Ret = 1;
pub const INVALID_ARGUMENT: Ret = 2;
pub const NOT_SUPPORTED: Ret = 3;
pub const NO_PERMISSION: Ret = 4;
pub const NOT_FOUND: Ret = 6;
pub const INSUFFICIENT_SIZE: Ret = 7;
pub const GPU_IS_LOST: Ret = 15;
pub const UNKNOWN: Ret = 999;

/// (code, name without the `NVML_ERROR_` prefix, message of `nvmlErrorString`).
const TABLE: &[(Ret, &str, &CStr)] = &[
    (0, "SUCCESS", c"Success"),
    (1, "UNINITIALIZED", c"Uninitialized"),
    (2, "INVALID_ARGUMENT", c"Invalid Argument"),
    (3, "NOT_SUPPORTED", c"Not Supported"),
    (4, "NO_PERMISSION", c"Insufficient Permissions"),
    (5, "ALREADY_INITIALIZED", c"Already Initialized"),
    (6, "NOT_FOUND", c"Not Found"),
    (7, "INSUFFICIENT_SIZE", c"Insufficient Size"),
    (8, "INSUFFICIENT_POWER", c"Insufficient External Power"),
    (9, "DRIVER_NOT_LOADED", c"Driver Not Loaded"),
    (10, "TIMEOUT", c"Timeout"),
    (11, "IRQ_ISSUE", c"Interrupt request issue"),
    (12, "LIBRARY_NOT_FOUND", c"NVML Shared Library Not Found"),
    (13, "FUNCTION_NOT_FOUND", c"Function Not Found"),
    (14, "CORRUPTED_INFOROM", c"Corrupted infoROM"),
    (15, "GPU_IS_LOST", c"GPU is lost"),
    (16, "RESET_REQUIRED", c"GPU requires restart"),
    (17, "OPERATING_SYSTEM", c"The operating system has blocked the request"),
    (18, "LIB_RM_VERSION_MISMATCH", c"RM has detected an NVML/RM version mismatch"),
    (19, "IN_USE", c"In use by another client"),
    (20, "MEMORY", c"Insufficient Memory"),
    (21, "NO_DATA", c"No data"),
    (22, "VGPU_ECC_NOT_SUPPORTED", c"ECC is not supported for vGPU"),
    (23, "INSUFFICIENT_RESOURCES", c"Insufficient resources"),
    (24, "FREQ_NOT_SUPPORTED", c"Frequency not supported"),
    (25, "ARGUMENT_VERSION_MISMATCH", c"Argument version mismatch"),
    (26, "DEPRECATED", c"Deprecated"),
    (27, "NOT_READY", c"Not ready"),
    (28, "GPU_NOT_FOUND", c"GPU not found"),
    (29, "INVALID_STATE", c"Invalid state"),
    (999, "UNKNOWN", c"Unknown Error"),
];

/// Parses a code as written in a state file: a number (`4`) or a name (`NO_PERMISSION`,
/// `NVML_ERROR_NO_PERMISSION`, any case).
pub fn parse(text: &str) -> Option<Ret> {
    let text = text.trim();
    if let Ok(n) = text.parse::<Ret>() {
        return Some(n);
    }
    let upper = text.to_ascii_uppercase();
    let bare = upper
        .strip_prefix("NVML_ERROR_")
        .or_else(|| upper.strip_prefix("NVML_"))
        .unwrap_or(&upper);
    TABLE.iter().find(|(_, name, _)| *name == bare).map(|(code, _, _)| *code)
}

/// The name of a code (`NO_PERMISSION`), or its number when it has none.
pub fn name(code: Ret) -> String {
    TABLE
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or_else(|| code.to_string(), |(_, name, _)| (*name).to_string())
}

/// The message of `nvmlErrorString` for a code; static, as NVML's are.
pub fn message(code: Ret) -> &'static CStr {
    TABLE
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(c"Unknown Error", |(_, _, msg)| msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numbers_and_names() {
        assert_eq!(parse("4"), Some(NO_PERMISSION));
        assert_eq!(parse("no_permission"), Some(NO_PERMISSION));
        assert_eq!(parse("NVML_ERROR_GPU_IS_LOST"), Some(GPU_IS_LOST));
        assert_eq!(parse("bogus"), None);
        assert_eq!(name(NOT_SUPPORTED), "NOT_SUPPORTED");
        assert_eq!(message(UNKNOWN), c"Unknown Error");
    }
}
