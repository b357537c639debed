//! Value grammar of the `--energy-*` options and of the plugin's `plugstack.conf` arguments.
//! Pure functions: every error is a sentence for the user that says what is allowed.

use std::fmt;

/// Site bounds, from the plugin's arguments in `plugstack.conf` (`max_defer=12h max_slowdown=3.0`).
/// The defaults match `model::config::HintDefaults` (`max_defer_s`, `max_slowdown_limit`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Largest `--energy-defer` accepted, in seconds.
    pub max_defer_s: u64,
    /// Largest `--energy-max-slowdown` accepted (>= 1.0).
    pub max_slowdown: f64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { max_defer_s: 12 * 3600, max_slowdown: 3.0 }
    }
}

/// The `--energy-tag` rule, shared with sched/energy and the node side.
pub use model::tag::{MAX_TAG_LEN, valid_tag};

pub const POLICIES: [&str; 3] = ["performance", "balanced", "efficiency"];

/// The options this plugin registers (the name after `--`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    Policy,
    MaxSlowdown,
    Share,
    Defer,
    Tag,
    /// `--energy-gpu-freq`: `--gpu-freq`'s grammar, accepted also with shared GPUs
    /// (`gres/shard`), where stock Slurm refuses `--gpu-freq`; applied as an explicit request.
    GpuFreq,
}

impl Opt {
    pub const ALL: [Opt; 6] = [Opt::Policy, Opt::MaxSlowdown, Opt::Share, Opt::Defer, Opt::Tag, Opt::GpuFreq];

    /// Option name as registered (`sbatch --<name>=...`).
    pub fn name(self) -> &'static str {
        match self {
            Opt::Policy => "energy-policy",
            Opt::MaxSlowdown => "energy-max-slowdown",
            Opt::Share => "energy-share",
            Opt::Defer => "energy-defer",
            Opt::Tag => "energy-tag",
            Opt::GpuFreq => "energy-gpu-freq",
        }
    }

    /// One word shown after `=` in `--help`.
    pub fn arginfo(self) -> &'static str {
        match self {
            Opt::Policy => "POLICY",
            Opt::MaxSlowdown => "RATIO",
            Opt::Share => "allow|deny",
            Opt::Defer => "DURATION",
            Opt::Tag => "NAME",
            Opt::GpuFreq => "SPEC",
        }
    }

    /// The `val` the option is registered with (and its callback receives).
    pub fn val(self) -> i32 {
        self as i32 + 1
    }

    pub fn from_val(val: i32) -> Option<Opt> {
        Opt::ALL.into_iter().find(|o| o.val() == val)
    }

    /// What values are allowed, given the site bounds (used in `--help` and in error messages).
    pub fn allowed(self, b: &Bounds) -> String {
        match self {
            Opt::Policy => "performance, balanced or efficiency".to_string(),
            Opt::MaxSlowdown => format!("a number from 1.0 to {}", fmt_ratio(b.max_slowdown)),
            Opt::Share => "allow or deny".to_string(),
            Opt::Defer => format!(
                "a duration up to {} (e.g. 30 = minutes, 45s, 30m, 2h, 1h30m, 1d, HH:MM:SS)",
                fmt_duration(b.max_defer_s)
            ),
            Opt::Tag => format!("1 to {MAX_TAG_LEN} letters, digits, '-', '_' or '.'"),
            Opt::GpuFreq => "what --gpu-freq allows: [low|medium|high|highm1|MHz][,memory=...][,verbose]".to_string(),
        }
    }

    /// One-line `--help` text.
    pub fn usage(self, b: &Bounds) -> String {
        let what = match self {
            Opt::Policy => "Energy policy for scheduling",
            Opt::MaxSlowdown => "Largest accepted slowdown from lower GPU clocks",
            Opt::Share => "May the job's GPUs be shared with other jobs",
            Opt::Defer => "How long the start may be deferred to save energy",
            Opt::Tag => "Workload tag (jobs with the same tag behave alike)",
            Opt::GpuFreq => "GPU clocks like --gpu-freq, also on shared GPUs (gres/shard; the highest request wins)",
        };
        format!("{what}: {}", self.allowed(b))
    }

    /// Checks a value; `Err` is the message for the user.
    pub fn check(self, value: &str, b: &Bounds) -> Result<(), OptError> {
        let ok = match self {
            Opt::Policy => POLICIES.contains(&value),
            Opt::MaxSlowdown => parse_ratio(value).is_some_and(|r| r >= 1.0 && r <= b.max_slowdown),
            Opt::Share => value == "allow" || value == "deny",
            Opt::Defer => parse_duration_s(value).is_some_and(|s| s <= b.max_defer_s),
            Opt::Tag => valid_tag(value),
            Opt::GpuFreq => gpu_control::gpu_freq::parse_gpu_freq(value).is_ok_and(|r| r.graphics.is_some() || r.memory.is_some()),
        };
        if ok {
            Ok(())
        } else {
            Err(OptError { opt: self, value: value.to_string(), allowed: self.allowed(b) })
        }
    }
}

/// A rejected option value.
#[derive(Debug, Clone, PartialEq)]
pub struct OptError {
    pub opt: Opt,
    pub value: String,
    pub allowed: String,
}

impl fmt::Display for OptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.value.chars().take(80).flat_map(char::escape_debug).collect();
        write!(f, "invalid --{} value '{}': allowed is {}", self.opt.name(), shown, self.allowed)
    }
}

/// A plain decimal number (`1`, `1.5`, `.5`): no sign, exponent, `inf` or `nan`.
pub fn parse_ratio(s: &str) -> Option<f64> {
    let s = s.trim();
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    let dots = s.bytes().filter(|&c| c == b'.').count();
    if digits == 0 || dots > 1 || digits + dots != s.len() {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

pub use model::duration::parse_duration_s;

/// `12h`, `1h30m`, `45s`, `0s`.
pub fn fmt_duration(s: u64) -> String {
    if s == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (scale, unit) in [(86400, 'd'), (3600, 'h'), (60, 'm'), (1, 's')] {
        let n = (s / scale) % if scale == 86400 { u64::MAX } else if scale == 3600 { 24 } else { 60 };
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// `3.0`, `1.25`.
pub fn fmt_ratio(r: f64) -> String {
    if r.fract() == 0.0 { format!("{r:.1}") } else { format!("{r}") }
}

/// Parses the plugin's arguments from `plugstack.conf` (`max_defer=12h max_slowdown=3.0`).
pub fn parse_plugin_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Bounds, String> {
    let mut b = Bounds::default();
    for arg in args {
        let (key, value) = arg.split_once('=').unwrap_or((arg, ""));
        match key {
            "max_defer" => {
                b.max_defer_s = parse_duration_s(value).ok_or_else(|| {
                    format!("plugstack.conf argument '{arg}': max_defer takes a duration (e.g. 12h, 1h30m, 90 = minutes, HH:MM:SS)")
                })?
            }
            "max_slowdown" => {
                b.max_slowdown = parse_ratio(value).filter(|r| *r >= 1.0).ok_or_else(|| {
                    format!("plugstack.conf argument '{arg}': max_slowdown takes a number >= 1.0 (e.g. 3.0)")
                })?
            }
            // The remote side's GPU clock settings (crate::clocks::ClockArgs).
            k if crate::clocks::ARG_KEYS.contains(&k) => {}
            // sbatch --energy-whatif's binary (crate::whatif).
            k if k == crate::whatif::ARG_KEY => {}
            _ => {
                return Err(format!(
                    "unknown plugstack.conf argument '{arg}': allowed are max_defer=DURATION, max_slowdown=RATIO, \
                     gpu_clocks=on|off, clock_ledger=DIR, nvml=PATH, data_dir=DIR, energy_config=PATH and whatif=PATH"
                ));
            }
        }
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios() {
        assert_eq!(parse_ratio("1"), Some(1.0));
        assert_eq!(parse_ratio("1.5"), Some(1.5));
        assert_eq!(parse_ratio(".5"), Some(0.5));
        for bad in ["", ".", "inf", "nan", "NaN", "1e0", "+1", "-1", "1.2.3", "1,5"] {
            assert_eq!(parse_ratio(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn checks_against_bounds() {
        let b = Bounds::default();
        assert!(Opt::Policy.check("efficiency", &b).is_ok());
        assert!(Opt::Policy.check("Efficiency", &b).is_err());
        assert!(Opt::MaxSlowdown.check("1.0", &b).is_ok());
        assert!(Opt::MaxSlowdown.check("3", &b).is_ok());
        assert!(Opt::MaxSlowdown.check("3.01", &b).is_err());
        assert!(Opt::MaxSlowdown.check("0.99", &b).is_err());
        assert!(Opt::Share.check("deny", &b).is_ok());
        assert!(Opt::Share.check("yes", &b).is_err());
        assert!(Opt::Defer.check("12h", &b).is_ok());
        assert!(Opt::Defer.check("12:00:01", &b).is_err());
        assert!(Opt::Defer.check("721", &b).is_err());
        assert!(Opt::Tag.check("resnet50_v1.2-a", &b).is_ok());
        assert!(Opt::Tag.check(&"a".repeat(64), &b).is_ok());
        assert!(Opt::Tag.check(&"a".repeat(65), &b).is_err());
        assert!(Opt::Tag.check("a b", &b).is_err());
        assert!(Opt::Tag.check("", &b).is_err());
        assert!(Opt::Tag.check("é", &b).is_err());
    }

    #[test]
    fn messages_say_what_is_allowed() {
        let b = Bounds::default();
        let e = Opt::Policy.check("bogus", &b).unwrap_err().to_string();
        assert_eq!(e, "invalid --energy-policy value 'bogus': allowed is performance, balanced or efficiency");
        let e = Opt::MaxSlowdown.check("9", &b).unwrap_err().to_string();
        assert!(e.contains("a number from 1.0 to 3.0"), "{e}");
        let e = Opt::Defer.check("13h", &b).unwrap_err().to_string();
        assert!(e.contains("a duration up to 12h"), "{e}");
        let e = Opt::Tag.check("a\nb", &b).unwrap_err().to_string();
        assert!(e.contains("'a\\nb'") && e.contains("1 to 64 letters"), "{e}");
        assert!(Opt::Share.usage(&b).contains("allow or deny"));
    }

    #[test]
    fn option_vals_round_trip() {
        for o in Opt::ALL {
            assert_eq!(Opt::from_val(o.val()), Some(o));
        }
        assert_eq!(Opt::from_val(0), None);
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_duration(43200), "12h");
        assert_eq!(fmt_duration(5400), "1h30m");
        assert_eq!(fmt_duration(90061), "1d1h1m1s");
        assert_eq!(fmt_duration(0), "0s");
        assert_eq!(fmt_ratio(3.0), "3.0");
        assert_eq!(fmt_ratio(2.5), "2.5");
    }

    #[test]
    fn plugin_args() {
        assert_eq!(parse_plugin_args([]), Ok(Bounds::default()));
        let b = parse_plugin_args(["max_defer=2h", "max_slowdown=1.5"]).unwrap();
        assert_eq!(b, Bounds { max_defer_s: 7200, max_slowdown: 1.5 });
        assert!(parse_plugin_args(["max_slowdown=0.5"]).unwrap_err().contains(">= 1.0"));
        assert!(parse_plugin_args(["max_defer=soon"]).unwrap_err().contains("duration"));
        assert!(parse_plugin_args(["foo=1"]).unwrap_err().contains("unknown"));
        // Limits show up in help and messages.
        assert!(Opt::Defer.usage(&b).contains("up to 2h"));
        assert!(Opt::MaxSlowdown.usage(&b).contains("1.0 to 1.5"));
    }
}
