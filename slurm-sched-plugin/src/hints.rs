//! A job's energy hints from its SPANK environment (`sbatch --energy-policy=...` arrives as
//! `_SLURM_SPANK_OPTION_energy_energy_policy=...`, or `_SLURM_SPANK_OPTION_energy_policy`
//! depending on how the option is named), with the site's defaults for anything missing.
//!
//! The SPANK plugin rejects bad values at submission; a bad value that still gets here (an
//! older submission, a hand-edited environment, a client without the plugin) falls back to the
//! default and never blocks. A tag is checked with the client's rule ([`model::tag`]): one that
//! breaks it is dropped (the job runs without a tag) and logged once, escaped, so that it never
//! reaches a log line, a decision record or the learning state as it is.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use model::config::HintDefaults;
use model::tag::{describe_refused, valid_tag};
use model::types::{EnergyPolicy, Hints};
use slurm_bindings::slurm_log;

use crate::LOG;

const PREFIX: &str = "_SLURM_SPANK_OPTION_energy_";

/// The job's hints: its SPANK options over the configured defaults.
pub fn from_spank_env<'a>(env: impl IntoIterator<Item = (&'a str, &'a str)>, defaults: &HintDefaults) -> Hints {
    let mut policy = None;
    let mut max_slowdown = None;
    let mut share = None;
    let mut defer = None;
    let mut tag = None;
    for (key, value) in env {
        let Some(opt) = key.strip_prefix(PREFIX) else { continue };
        let opt = opt.strip_prefix("energy_").unwrap_or(opt);
        let value = value.trim();
        match opt {
            "policy" => policy = value.parse::<EnergyPolicy>().ok(),
            "max_slowdown" => max_slowdown = value.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 1.0),
            "share" => {
                share = match value {
                    "allow" => Some(true),
                    "deny" => Some(false),
                    _ => None,
                }
            }
            "defer" => defer = parse_duration_s(value),
            "tag" if valid_tag(value) => tag = Some(value.to_string()),
            "tag" if !value.is_empty() => {
                log_refused_tag(value);
                tag = None;
            }
            _ => {}
        }
    }
    let policy = policy.unwrap_or(defaults.policy);
    Hints {
        policy,
        max_slowdown: max_slowdown.unwrap_or_else(|| defaults.slowdown_for(policy)).min(defaults.max_slowdown_limit),
        share_allowed: share.unwrap_or(defaults.share_allowed),
        defer_max_s: defer.unwrap_or(defaults.defer_s).min(defaults.max_defer_s),
        tag,
    }
}

/// Distinct refused tags logged; a job's hints are read every cycle, so each is logged once, and
/// a user who sends many cannot fill the log either.
const REFUSED_TAGS_LOGGED: usize = 100;

/// Hashes of the refused tags already logged.
static REFUSED_TAGS: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn log_refused_tag(value: &str) {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    let key = hasher.finish();
    let Ok(mut seen) = REFUSED_TAGS.lock() else { return };
    let seen = seen.get_or_insert_with(HashSet::new);
    if seen.len() > REFUSED_TAGS_LOGGED || !seen.insert(key) {
        return;
    }
    if seen.len() > REFUSED_TAGS_LOGGED {
        LOG.error("a job's --energy-tag is not a tag: dropped; further ones are dropped without a log line");
    } else {
        slurm_log!(LOG, error, "a job's --energy-tag {} is not a tag (1 to {} letters, digits, '-', '_' or '.'): dropped, the job runs without one", describe_refused(value), model::tag::MAX_TAG_LEN);
    }
}

/// The job's own `--energy-share` option, if it gave one (`Some(true)` = allow): a
/// `gres/shard` job shares unless it said `deny`, whatever the configured default.
pub fn explicit_share<'a>(env: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<bool> {
    let mut share = None;
    for (key, value) in env {
        let Some(opt) = key.strip_prefix(PREFIX) else { continue };
        if opt.strip_prefix("energy_").unwrap_or(opt) == "share" {
            share = match value.trim() {
                "allow" => Some(true),
                "deny" => Some(false),
                _ => share,
            };
        }
    }
    share
}

/// Seconds in a `--energy-defer` value, in the grammar the SPANK plugin accepted it in
/// (`model::duration`).
pub fn parse_duration_s(s: &str) -> Option<f64> {
    model::duration::parse_duration_s(s).map(|v| v as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_hints_give_the_defaults() {
        let d = HintDefaults::default();
        assert_eq!(from_spank_env([("PATH", "/bin")], &d), d.default_hints());
    }

    #[test]
    fn options_override_defaults_and_stay_within_bounds() {
        let d = HintDefaults::default();
        let env = [
            ("_SLURM_SPANK_OPTION_energy_energy_policy", "efficiency"),
            ("_SLURM_SPANK_OPTION_energy_energy_share", "allow"),
            ("_SLURM_SPANK_OPTION_energy_energy_defer", "1000d"),
            ("_SLURM_SPANK_OPTION_energy_energy_tag", "resnet50"),
        ];
        let h = from_spank_env(env, &d);
        assert_eq!(h.policy, EnergyPolicy::Efficiency);
        assert_eq!(h.max_slowdown, d.efficiency_max_slowdown);
        assert!(h.share_allowed);
        assert_eq!(h.defer_max_s, d.max_defer_s);
        assert_eq!(h.tag.as_deref(), Some("resnet50"));
        let h = from_spank_env([("_SLURM_SPANK_OPTION_energy_max_slowdown", "99")], &d);
        assert_eq!(h.max_slowdown, d.max_slowdown_limit);
    }

    #[test]
    fn bad_values_fall_back() {
        let d = HintDefaults::default();
        let h = from_spank_env([("_SLURM_SPANK_OPTION_energy_policy", "turbo"), ("_SLURM_SPANK_OPTION_energy_max_slowdown", "0.5")], &d);
        assert_eq!(h, d.default_hints());
    }

    #[test]
    fn explicit_share_only_when_given() {
        assert_eq!(explicit_share([("PATH", "/bin")]), None);
        assert_eq!(explicit_share([("_SLURM_SPANK_OPTION_energy_energy_share", "deny")]), Some(false));
        assert_eq!(explicit_share([("_SLURM_SPANK_OPTION_energy_share", "allow")]), Some(true));
        assert_eq!(explicit_share([("_SLURM_SPANK_OPTION_energy_share", "maybe")]), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_s("90"), Some(5400.0));
        assert_eq!(parse_duration_s("30s"), Some(30.0));
        assert_eq!(parse_duration_s("2h"), Some(7200.0));
        assert_eq!(parse_duration_s("1h30m"), Some(5400.0));
        assert_eq!(parse_duration_s("01:30:00"), Some(5400.0));
        assert_eq!(parse_duration_s("x"), None);
        assert_eq!(parse_duration_s("-1h"), None);
    }

    /// `--energy-tag` is checked in the client only; a job can carry any value (its own
    /// libslurm, a private plugstack). What the client would refuse never gets past here: not
    /// into the decision record, the learning state or a log line.
    #[test]
    fn a_tag_the_client_would_refuse_is_dropped() {
        let d = HintDefaults::default();
        let huge = "a".repeat(100 * 1024);
        for bad in ["resnet\nsched/energy: forged line", "x; energy_j=0", "x y", "ünïcode", huge.as_str(), &"b".repeat(model::tag::MAX_TAG_LEN + 1)] {
            let h = from_spank_env([("_SLURM_SPANK_OPTION_energy_energy_tag", bad), ("_SLURM_SPANK_OPTION_energy_energy_policy", "efficiency")], &d);
            assert_eq!(h.tag, None, "{:?}", &bad[..bad.len().min(40)]);
            // The rest of the job's hints still hold: it runs, without a tag.
            assert_eq!(h.policy, EnergyPolicy::Efficiency);
        }
        let longest = "c".repeat(model::tag::MAX_TAG_LEN);
        assert_eq!(from_spank_env([("_SLURM_SPANK_OPTION_energy_tag", longest.as_str())], &d).tag.as_deref(), Some(longest.as_str()));
        // Blanks around a value are the option parser's, not the tag's.
        assert_eq!(from_spank_env([("_SLURM_SPANK_OPTION_energy_tag", " bert ")], &d).tag.as_deref(), Some("bert"));
    }
}
