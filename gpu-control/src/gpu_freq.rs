//! Slurm's `--gpu-freq` grammar and its resolution against a GPU's supported clocks, with the
//! semantics of stock Slurm 22.05 (`src/common/tres_frequency.c` validates at submission,
//! `src/plugins/gpu/common/gpu_common.c` resolves in slurmstepd).
//!
//! Grammar: comma-separated items, empty items ignored, keywords case-sensitive as srun
//! checks them:
//!
//! ```text
//! spec  := item ("," item)*
//! item  := value | "memory=" value | "verbose"
//! value := "low" | "medium" | "high" | "highm1" | <MHz, decimal digits>
//! ```
//!
//! e.g. `high,memory=low,verbose` or `1312`. A later item of the same kind overrides an earlier
//! one. A value of `0` counts as "not given", as in Slurm.
//!
//! Resolution against a list of supported clocks (sorted descending, as NVML gives them):
//! `low` = the lowest; `high` = the highest; `highm1` = the second highest (the highest if
//! there is one); `medium` = element `(n - 1) / 2` of the descending list; a number in MHz =
//! that clock if supported, else the next supported clock **above** it (Slurm rounds up), clamped
//! to the highest/lowest for values outside the range. The memory clock is resolved first,
//! then the graphics clock against the graphics clocks supported at that memory clock. What the
//! request leaves out comes from `GpuFreqDef` (Slurm's default: `high,memory=high`).

use std::fmt;
use std::str::FromStr;

use crate::control::{AppClocksMhz, GpuControl};
use crate::error::GpuError;

/// One frequency value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FreqValue {
    Low,
    Medium,
    High,
    /// One step below the highest.
    HighM1,
    Mhz(u32),
}

/// A parsed `--gpu-freq` (or `GpuFreqDef`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuFreqRequest {
    pub graphics: Option<FreqValue>,
    pub memory: Option<FreqValue>,
    pub verbose: bool,
}

/// Slurm's `GpuFreqDef` when slurm.conf sets none.
pub const SLURM_DEFAULT_GPU_FREQ_DEF: GpuFreqRequest = GpuFreqRequest {
    graphics: Some(FreqValue::High),
    memory: Some(FreqValue::High),
    verbose: false,
};

const ALLOWED_VALUES: &str = "low, medium, high, highm1 or a frequency in MHz";

/// A `--gpu-freq` that does not parse: the offending item and what would have been allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFreqError {
    pub token: String,
    pub message: String,
}

impl fmt::Display for GpuFreqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid --gpu-freq item {:?}: {}", self.token, self.message)
    }
}

impl std::error::Error for GpuFreqError {}

impl fmt::Display for FreqValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreqValue::Low => f.write_str("low"),
            FreqValue::Medium => f.write_str("medium"),
            FreqValue::High => f.write_str("high"),
            FreqValue::HighM1 => f.write_str("highm1"),
            FreqValue::Mhz(mhz) => write!(f, "{mhz}"),
        }
    }
}

impl fmt::Display for GpuFreqRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items = Vec::new();
        if let Some(g) = self.graphics {
            items.push(g.to_string());
        }
        if let Some(m) = self.memory {
            items.push(format!("memory={m}"));
        }
        if self.verbose {
            items.push("verbose".to_string());
        }
        f.write_str(&items.join(","))
    }
}

/// `Ok(None)` for `0`, which Slurm reads as "not given".
fn parse_value(text: &str, token: &str) -> Result<Option<FreqValue>, GpuFreqError> {
    let bad = |message: String| GpuFreqError { token: token.to_string(), message };
    match text {
        "low" => Ok(Some(FreqValue::Low)),
        "medium" => Ok(Some(FreqValue::Medium)),
        "high" => Ok(Some(FreqValue::High)),
        "highm1" => Ok(Some(FreqValue::HighM1)),
        "" => Err(bad(format!("missing value; expected {ALLOWED_VALUES}"))),
        digits if digits.bytes().all(|b| b.is_ascii_digit()) => match digits.parse::<u32>() {
            Ok(0) => Ok(None),
            Ok(mhz) => Ok(Some(FreqValue::Mhz(mhz))),
            Err(_) => Err(bad(format!("{digits} MHz is out of range"))),
        },
        other => Err(bad(format!("unknown value {other:?}; expected {ALLOWED_VALUES}"))),
    }
}

/// Parses a `--gpu-freq` value.
pub fn parse_gpu_freq(spec: &str) -> Result<GpuFreqRequest, GpuFreqError> {
    if spec.trim().is_empty() {
        return Err(GpuFreqError {
            token: spec.to_string(),
            message: format!("empty; expected a comma-separated list of {ALLOWED_VALUES}, memory=<value> or verbose"),
        });
    }
    let mut request = GpuFreqRequest::default();
    for token in spec.split(',').filter(|t| !t.is_empty()) {
        match token.split_once('=') {
            None if token == "verbose" => request.verbose = true,
            None => {
                if let Some(v) = parse_value(token, token)? {
                    request.graphics = Some(v);
                }
            }
            Some(("memory", value)) => {
                if let Some(v) = parse_value(value, token)? {
                    request.memory = Some(v);
                }
            }
            Some((kind, _)) => {
                return Err(GpuFreqError {
                    token: token.to_string(),
                    message: format!("unknown frequency type {kind:?}; the only type is memory=<value>"),
                });
            }
        }
    }
    Ok(request)
}

impl FromStr for GpuFreqRequest {
    type Err = GpuFreqError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_gpu_freq(s)
    }
}

/// The GPU part of a step's `tres_freq` (`gpu:high,memory=low;...`), as slurmstepd passes it
/// to `gpu_p_step_hardware_init`; `Ok(None)` if it has none.
pub fn parse_tres_freq(tres_freq: &str) -> Result<Option<GpuFreqRequest>, GpuFreqError> {
    tres_freq
        .split(';')
        .find_map(|part| part.strip_prefix("gpu:"))
        .map(parse_gpu_freq)
        .transpose()
}

impl GpuFreqRequest {
    /// Fills what this request leaves out from `defaults` (slurm.conf `GpuFreqDef`).
    pub fn or_defaults(self, defaults: &GpuFreqRequest) -> GpuFreqRequest {
        GpuFreqRequest {
            graphics: self.graphics.or(defaults.graphics),
            memory: self.memory.or(defaults.memory),
            verbose: self.verbose || defaults.verbose,
        }
    }
}

/// Picks a clock from `supported_desc` (descending) with Slurm's rules; `None` if the list is
/// empty.
pub fn resolve_freq_mhz(value: FreqValue, supported_desc: &[u32]) -> Option<u32> {
    let highest = *supported_desc.first()?;
    let lowest = *supported_desc.last()?;
    match value {
        FreqValue::Low => Some(lowest),
        FreqValue::High => Some(highest),
        FreqValue::HighM1 => supported_desc.get(1).or(supported_desc.first()).copied(),
        FreqValue::Medium => supported_desc.get((supported_desc.len() - 1) / 2).copied(),
        FreqValue::Mhz(mhz) if mhz >= highest => Some(highest),
        FreqValue::Mhz(mhz) if mhz <= lowest => Some(lowest),
        // The smallest supported clock not below the request.
        FreqValue::Mhz(mhz) => supported_desc.iter().copied().filter(|&c| c >= mhz).min(),
    }
}

/// Resolves a request (defaults already applied) to the application clocks to set on `gpu`.
/// A part still missing resolves as `high`.
pub fn resolve_application_clocks(
    request: &GpuFreqRequest,
    control: &dyn GpuControl,
    gpu: u32,
) -> Result<AppClocksMhz, GpuError> {
    let no_clocks = |call| {
        GpuError::new(Some(gpu), call, crate::error::GpuErrorKind::NotSupported, "the GPU reports no supported clocks")
    };
    let memory_clocks = control.supported_memory_clocks_mhz(gpu)?;
    let memory_mhz = resolve_freq_mhz(request.memory.unwrap_or(FreqValue::High), &memory_clocks)
        .ok_or_else(|| no_clocks("nvmlDeviceGetSupportedMemoryClocks"))?;
    let graphics_clocks = control.supported_graphics_clocks_mhz(gpu, memory_mhz)?;
    let graphics_mhz = resolve_freq_mhz(request.graphics.unwrap_or(FreqValue::High), &graphics_clocks)
        .ok_or_else(|| no_clocks("nvmlDeviceGetSupportedGraphicsClocks"))?;
    Ok(AppClocksMhz { memory_mhz, graphics_mhz })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCKS: [u32; 5] = [1530, 1312, 1000, 500, 135];

    #[test]
    fn parses_stock_examples() {
        let r = parse_gpu_freq("high,memory=low,verbose").unwrap();
        assert_eq!(r.graphics, Some(FreqValue::High));
        assert_eq!(r.memory, Some(FreqValue::Low));
        assert!(r.verbose);
        assert_eq!(parse_gpu_freq("450").unwrap().graphics, Some(FreqValue::Mhz(450)));
        let r = parse_gpu_freq("memory=877").unwrap();
        assert_eq!((r.graphics, r.memory), (None, Some(FreqValue::Mhz(877))));
        assert_eq!(parse_gpu_freq("medium,,highm1").unwrap().graphics, Some(FreqValue::HighM1));
        assert_eq!(parse_gpu_freq("0").unwrap().graphics, None);
        assert_eq!(r.to_string(), "memory=877");
        assert_eq!("low,verbose".parse::<GpuFreqRequest>().unwrap().to_string(), "low,verbose");
    }

    #[test]
    fn bad_input_names_the_token_and_what_is_allowed() {
        let e = parse_gpu_freq("high,turbo").unwrap_err();
        assert_eq!(e.token, "turbo");
        assert!(e.to_string().contains("\"turbo\""), "{e}");
        assert!(e.message.contains("low, medium, high, highm1 or a frequency in MHz"), "{e}");
        let e = parse_gpu_freq("core=high").unwrap_err();
        assert_eq!(e.token, "core=high");
        assert!(e.message.contains("memory=<value>"), "{e}");
        let e = parse_gpu_freq("memory=").unwrap_err();
        assert!(e.message.contains("missing value"), "{e}");
        let e = parse_gpu_freq("1500MHz").unwrap_err();
        assert_eq!(e.token, "1500MHz");
        assert!(parse_gpu_freq("HIGH").is_err(), "keywords are case-sensitive, as srun checks them");
        assert!(parse_gpu_freq("99999999999").unwrap_err().message.contains("out of range"));
        assert!(parse_gpu_freq("").unwrap_err().message.contains("empty"));
        assert!(parse_gpu_freq("-5").is_err());
    }

    #[test]
    fn resolves_like_slurm() {
        assert_eq!(resolve_freq_mhz(FreqValue::Low, &CLOCKS), Some(135));
        assert_eq!(resolve_freq_mhz(FreqValue::High, &CLOCKS), Some(1530));
        assert_eq!(resolve_freq_mhz(FreqValue::HighM1, &CLOCKS), Some(1312));
        assert_eq!(resolve_freq_mhz(FreqValue::Medium, &CLOCKS), Some(1000));
        assert_eq!(resolve_freq_mhz(FreqValue::Medium, &CLOCKS[..4]), Some(1312), "(4-1)/2 = 1");
        assert_eq!(resolve_freq_mhz(FreqValue::Mhz(1000), &CLOCKS), Some(1000));
        assert_eq!(resolve_freq_mhz(FreqValue::Mhz(1001), &CLOCKS), Some(1312), "rounds up");
        assert_eq!(resolve_freq_mhz(FreqValue::Mhz(9999), &CLOCKS), Some(1530));
        assert_eq!(resolve_freq_mhz(FreqValue::Mhz(1), &CLOCKS), Some(135));
        assert_eq!(resolve_freq_mhz(FreqValue::HighM1, &[877]), Some(877));
        assert_eq!(resolve_freq_mhz(FreqValue::Low, &[]), None);
    }

    #[test]
    fn tres_freq_and_defaults() {
        let r = parse_tres_freq("gpu:medium,memory=high").unwrap().unwrap();
        assert_eq!(r.graphics, Some(FreqValue::Medium));
        assert_eq!(parse_tres_freq("cpu:high").unwrap(), None);
        assert!(parse_tres_freq("gpu:fast").is_err());
        let filled = parse_gpu_freq("low").unwrap().or_defaults(&SLURM_DEFAULT_GPU_FREQ_DEF);
        assert_eq!((filled.graphics, filled.memory), (Some(FreqValue::Low), Some(FreqValue::High)));
    }
}
