//! GRES strings as slurmctld stores them, parsed into counts. Pure string handling: the
//! formats are documented Slurm syntax, so reading them is safer across releases than reading
//! the GRES plugin's internal structures.
//!
//! - node `Gres=`: `gpu:4`, `gpu:v100:2(S:0-1),gpu:a100:2`, `gpu:v100:no_consume:1`;
//! - job `tres_per_node` / `tres_per_job` / `tres_per_task`: `gres:gpu:2` (22.05),
//!   `gres/gpu:2` (23.02+), `gres:gpu:v100:1`, several joined by commas; 24.11 writes
//!   `tres_per_task` in TRES form, `gres/gpu=3` or `gres/gpu:a100=3`.

/// One GRES entry: name, optional type, count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresEntry {
    pub name: String,
    pub type_name: Option<String>,
    pub count: u64,
}

fn parse_count(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1024),
        (i, 'm' | 'M') => (&s[..i], 1024 * 1024),
        (i, 'g' | 'G') => (&s[..i], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// Splits on commas that are outside parentheses (`gpu:2(S:0,1)` is one entry).
fn split_entries(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            // A stray `)` must not hide the commas after it.
            ')' => depth = (depth - 1).max(0),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|e| !e.is_empty()).collect()
}

/// Parses one `name[:type][:flags...][:count]` entry (a missing count means 1), or one in TRES
/// form, `name[:type]=count`.
fn parse_entry(entry: &str) -> Option<GresEntry> {
    let entry = entry.split('(').next()?.trim();
    let entry = entry.strip_prefix("gres:").or_else(|| entry.strip_prefix("gres/")).unwrap_or(entry);
    let (entry, tres_count) = match entry.rsplit_once('=') {
        Some((left, right)) => (left, Some(parse_count(right).unwrap_or(1))),
        None => (entry, None),
    };
    let parts: Vec<&str> = entry.split(':').filter(|p| !p.is_empty()).collect();
    let name = parts.first()?.to_string();
    let (count, rest) = match (tres_count, parts.last().and_then(|p| parse_count(p))) {
        (Some(n), _) => (n, &parts[1..]),
        (None, Some(n)) if parts.len() > 1 => (n, &parts[1..parts.len() - 1]),
        _ => (1, &parts[1..]),
    };
    let type_name = rest.iter().find(|p| **p != "no_consume").map(|p| p.to_string());
    Some(GresEntry { name, type_name, count })
}

/// Every entry of a GRES or TRES-per-X string.
pub fn parse(s: &str) -> Vec<GresEntry> {
    split_entries(s).into_iter().filter_map(parse_entry).collect()
}

/// Total count of GRES `name` (e.g. `gpu`) in a string, summed over types.
pub fn count(s: &str, name: &str) -> u64 {
    parse(s).iter().filter(|e| e.name == name).map(|e| e.count).fold(0, u64::saturating_add)
}

/// The type of the first `name` entry that has one (`v100` in `gpu:v100:4`).
pub fn first_type(s: &str, name: &str) -> Option<String> {
    parse(s).into_iter().filter(|e| e.name == name).find_map(|e| e.type_name)
}

/// Every distinct type of the `name` entries, in order (`a100`, `a40` in
/// `gpu:a100:4,gpu:a40:2`; MIG profiles such as `1g.10gb` are types too).
pub fn types(s: &str, name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in parse(s).into_iter().filter(|e| e.name == name).filter_map(|e| e.type_name) {
        if !out.iter().any(|o| o.eq_ignore_ascii_case(&t)) {
            out.push(t);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_strings() {
        assert_eq!(count("gpu:4", "gpu"), 4);
        assert_eq!(count("gpu:v100:2(S:0-1),gpu:a100:2", "gpu"), 4);
        assert_eq!(first_type("gpu:v100:2(S:0-1),gpu:a100:2", "gpu").as_deref(), Some("v100"));
        assert_eq!(count("gpu:v100:no_consume:1", "gpu"), 1);
        assert_eq!(count("mps:200,gpu:2(S:0,1)", "gpu"), 2);
        assert_eq!(count("gpu", "gpu"), 1);
        assert_eq!(count("", "gpu"), 0);
        assert_eq!(first_type("gpu:4", "gpu"), None);
        assert_eq!(types("gpu:a100:4(S:0),gpu:a40:2,gpu:a100:1", "gpu"), vec!["a100".to_string(), "a40".to_string()]);
        assert_eq!(types("gpu:1g.10gb:7,gpu:3g.40gb:2,shard:8", "gpu"), vec!["1g.10gb".to_string(), "3g.40gb".to_string()]);
        assert!(types("gpu:4", "gpu").is_empty());
    }

    #[test]
    fn job_strings_of_both_releases() {
        assert_eq!(count("gres:gpu:2", "gpu"), 2);
        assert_eq!(count("gres/gpu:2", "gpu"), 2);
        assert_eq!(count("gres:gpu:v100:1,gres:shard:3", "gpu"), 1);
        assert_eq!(count("gres:shard:3", "shard"), 3);
        assert_eq!(count("gres:gpu", "gpu"), 1);
        assert_eq!(count("cpu:4", "gpu"), 0);
    }

    // 24.11 keeps --gpus-per-task as `gres/gpu=3` (seen live: such a job looked GPU-less).
    #[test]
    fn tres_form_of_24_11() {
        assert_eq!(count("gres/gpu=3", "gpu"), 3);
        assert_eq!(count("gres/gpu:a100=2,gres/shard=4", "gpu"), 2);
        assert_eq!(first_type("gres/gpu:a100=2", "gpu").as_deref(), Some("a100"));
        assert_eq!(count("gres/shard=4", "shard"), 4);
        assert_eq!(count("gres/gpu=x", "gpu"), 1, "an unreadable count is one, as elsewhere");
    }

    // Found by the slurm_gres fuzz target (fuzz/): these panicked or merged entries.
    #[test]
    fn counts_that_overflow_are_no_count() {
        assert_eq!(count("gpu:99999999999G", "gpu"), 1, "an overflowing count is not a count");
        assert_eq!(count("gpu:18446744073709551615,gpu:1", "gpu"), u64::MAX);
    }

    #[test]
    fn a_stray_parenthesis_does_not_join_entries() {
        assert_eq!(parse("gres:gpu:v100:1,gres),shard:3").len(), 3);
        assert_eq!(count("gpu:1),gpu:2", "gpu"), 3);
        assert_eq!(count("gpu:2(S:0,1)),gpu:1", "gpu"), 3);
    }
}
