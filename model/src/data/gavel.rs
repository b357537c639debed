//! Gavel's measured throughputs (`gavel/*_throughputs.json`): steps/s of each job type alone and
//! space-shared with another job type, per GPU model.
//!
//! Reads the file as Gavel wrote it (Python tuple reprs as keys) and exposes lookups plus the
//! co-location summary of the README. Never fills in a pair that was not measured: unknown and
//! `[0, 0]` ("could not run together") pairs are `None`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::DataError;
use super::csv::read_text;
use super::stats::percentile;

/// `(job type name, number of GPUs)`, e.g. `("ResNet-50 (batch size 64)", 1)`.
type JobKey = (String, u32);

#[derive(Debug, Clone, Default, PartialEq)]
struct JobEntry {
    isolated: Option<f64>,
    /// Other job type -> (steps/s of this job, steps/s of the other) when sharing.
    pairs: BTreeMap<JobKey, (f64, f64)>,
}

/// All throughputs of one file, per worker type (`"v100"`, `"p100"`, `"k80"` and the
/// `*_unconsolidated` variants, which are only returned when asked for by name).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GavelThroughputs {
    workers: BTreeMap<String, BTreeMap<JobKey, JobEntry>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawValue {
    Alone(f64),
    Pair([f64; 2]),
}

type RawFile = BTreeMap<String, BTreeMap<String, BTreeMap<String, RawValue>>>;

/// Reads a Gavel throughputs file. JSON errors carry serde_json's line; a malformed key or a
/// negative throughput carries the line where that key first appears.
pub fn load_gavel(path: &Path) -> Result<GavelThroughputs, DataError> {
    let text = read_text(path)?;
    let raw: RawFile = serde_json::from_str(&text).map_err(|e| DataError {
        path: path.to_path_buf(),
        line: (e.line() > 0).then_some(e.line()),
        reason: format!("invalid throughputs JSON: {e}"),
    })?;
    let key_error = |key: &str, what: &str| DataError {
        path: path.to_path_buf(),
        line: line_of(&text, key),
        reason: format!("{what} (key {key:?})"),
    };
    let mut workers = BTreeMap::new();
    for (worker, jobs) in raw {
        let mut table = BTreeMap::new();
        for (job, inner) in jobs {
            let key = parse_job_key(&job).ok_or_else(|| key_error(&job, "malformed job key"))?;
            let mut entry = JobEntry::default();
            for (other, value) in inner {
                match (other.as_str(), value) {
                    ("null", RawValue::Alone(t)) if t.is_finite() && t >= 0.0 => {
                        entry.isolated = Some(t)
                    }
                    ("null", _) => {
                        return Err(key_error(&job, "isolated throughput is not a number >= 0"));
                    }
                    (_, RawValue::Pair([a, b]))
                        if a.is_finite() && b.is_finite() && a >= 0.0 && b >= 0.0 =>
                    {
                        let other_key = parse_job_key(&other)
                            .ok_or_else(|| key_error(&other, "malformed job key"))?;
                        entry.pairs.insert(other_key, (a, b));
                    }
                    _ => {
                        return Err(key_error(
                            &job,
                            "pair throughput is not [a, b] with a, b >= 0",
                        ));
                    }
                }
            }
            table.insert(key, entry);
        }
        workers.insert(worker, table);
    }
    Ok(GavelThroughputs { workers })
}

/// Parses `('name', 1)` (Python's repr of a tuple) into `("name", 1)`.
fn parse_job_key(key: &str) -> Option<JobKey> {
    let inner = key.strip_prefix('(')?.strip_suffix(')')?;
    let (name, scale) = inner.rsplit_once(',')?;
    let name = name.trim();
    let unquoted = name
        .strip_prefix('\'')
        .and_then(|n| n.strip_suffix('\''))
        .or_else(|| name.strip_prefix('"').and_then(|n| n.strip_suffix('"')))?;
    Some((unquoted.to_string(), scale.trim().parse().ok()?))
}

/// 1-based line of the first occurrence of `"key"` in the text.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let at = text.find(&format!("\"{key}\""))?;
    Some(text[..at].matches('\n').count() + 1)
}

impl GavelThroughputs {
    /// Worker types in the file, including the `*_unconsolidated` ones, sorted.
    pub fn worker_types(&self) -> Vec<String> {
        self.workers.keys().cloned().collect()
    }

    /// Names of the single-GPU job types measured on `gpu`, sorted.
    pub fn job_types(&self, gpu: &str) -> Vec<String> {
        let Some(jobs) = self.workers.get(gpu) else {
            return Vec::new();
        };
        jobs.keys()
            .filter(|(_, scale)| *scale == 1)
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn entry(&self, gpu: &str, job_type: &str, scale: u32) -> Option<&JobEntry> {
        self.workers.get(gpu)?.get(&(job_type.to_string(), scale))
    }

    /// Steps/s of `job_type` on `scale` GPUs of type `gpu`, running alone.
    pub fn isolated(&self, gpu: &str, job_type: &str, scale: u32) -> Option<f64> {
        self.entry(gpu, job_type, scale)?.isolated
    }

    /// Steps/s `(t_a, t_b)` of single-GPU jobs `a` and `b` sharing one GPU; `None` when not
    /// measured or when they could not run together (`[0, 0]`).
    pub fn pair(&self, gpu: &str, a: &str, b: &str) -> Option<(f64, f64)> {
        let (t_a, t_b) = *self.entry(gpu, a, 1)?.pairs.get(&(b.to_string(), 1))?;
        (t_a > 0.0 || t_b > 0.0).then_some((t_a, t_b))
    }

    /// A copy with only the job types that `keep` accepts, and only their pairs with each other,
    /// on every worker type: for fitting a model on part of the data and scoring it on the rest.
    pub fn retain_job_types(&self, keep: impl Fn(&str) -> bool) -> GavelThroughputs {
        let workers = self
            .workers
            .iter()
            .map(|(worker, jobs)| {
                let kept = jobs
                    .iter()
                    .filter(|((name, _), _)| keep(name))
                    .map(|(key, entry)| {
                        let pairs = entry.pairs.iter().filter(|((other, _), _)| keep(other)).map(|(k, v)| (k.clone(), *v)).collect();
                        (key.clone(), JobEntry { isolated: entry.isolated, pairs })
                    })
                    .collect();
                (worker.clone(), kept)
            })
            .collect();
        GavelThroughputs { workers }
    }

    /// [`Self::pair`] divided by each job's isolated throughput: the share of its solo speed
    /// each job keeps while sharing.
    pub fn pair_normalised(&self, gpu: &str, a: &str, b: &str) -> Option<(f64, f64)> {
        let (t_a, t_b) = self.pair(gpu, a, b)?;
        let iso_a = self.isolated(gpu, a, 1).filter(|t| *t > 0.0)?;
        let iso_b = self.isolated(gpu, b, 1).filter(|t| *t > 0.0)?;
        Some((t_a / iso_a, t_b / iso_b))
    }
}

/// Distribution of the combined normalised throughput `t_a/iso_a + t_b/iso_b` of co-located
/// single-GPU pairs (above 1.0: sharing beats running them one after the other).
#[derive(Debug, Clone, PartialEq)]
pub struct PairStats {
    pub pairs: usize,
    pub median: f64,
    pub p25: f64,
    pub p75: f64,
    pub frac_above_one: f64,
}

/// [`PairStats`] over unordered pairs `a < b` of distinct single-GPU job types (no self pairs,
/// `[0, 0]` pairs skipped), with linear-interpolation percentiles. This is the definition that
/// reproduces the README's V100 figures (306 pairs; 19 `[0, 0]` pairs skipped). The files store
/// each pair both ways with swapped values, so ordered pairs give the same median and fraction.
pub fn combined_pair_stats(t: &GavelThroughputs, gpu: &str) -> PairStats {
    let types = t.job_types(gpu);
    let mut combined = Vec::new();
    for (i, a) in types.iter().enumerate() {
        for b in &types[i + 1..] {
            if let Some((n_a, n_b)) = t.pair_normalised(gpu, a, b) {
                combined.push(n_a + n_b);
            }
        }
    }
    combined.sort_by(f64::total_cmp);
    let above = combined.iter().filter(|c| **c > 1.0).count();
    PairStats {
        pairs: combined.len(),
        median: percentile(&combined, 0.5),
        p25: percentile(&combined, 0.25),
        p75: percentile(&combined, 0.75),
        frac_above_one: above as f64 / combined.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_keys_parse_like_python_tuples() {
        assert_eq!(
            parse_job_key("('ResNet-50 (batch size 64)', 1)"),
            Some(("ResNet-50 (batch size 64)".to_string(), 1))
        );
        assert_eq!(
            parse_job_key("(\"it's\", 8)"),
            Some(("it's".to_string(), 8))
        );
        assert_eq!(parse_job_key("ResNet-50"), None);
        assert_eq!(parse_job_key("('A3C', x)"), None);
    }

    #[test]
    fn retained_types_keep_only_their_own_pairs() {
        let text = r#"{"v100": {
            "('A', 1)": {"null": 10.0, "('A', 1)": [5.0, 5.0], "('B', 1)": [6.0, 3.0]},
            "('B', 1)": {"null": 4.0, "('A', 1)": [3.0, 6.0]}
        }}"#;
        let dir = std::env::temp_dir().join(format!("gavel-retain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("t.json");
        std::fs::write(&path, text).expect("write");
        let all = load_gavel(&path).expect("parses");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(all.pair("v100", "A", "B").is_some());
        let only_a = all.retain_job_types(|t| t == "A");
        assert_eq!(only_a.job_types("v100"), vec!["A".to_string()]);
        assert_eq!(only_a.pair("v100", "A", "A"), Some((5.0, 5.0)));
        assert_eq!(only_a.pair("v100", "A", "B"), None, "a pair with a left-out type is gone");
    }
}
