//! The `--energy-tag` rule, in one place for every reader of a tag: the SPANK plugin checks it
//! at submission, and sched/energy and the node side check it again when they read a job's
//! SPANK environment, which a user can fill without the client (their own libslurm, a private
//! plugstack). A tag that breaks the rule is no tag: it must never reach a log line, a decision
//! record or the learning state.

/// Longest `--energy-tag`.
pub const MAX_TAG_LEN: usize = 64;

/// 1 to [`MAX_TAG_LEN`] ASCII letters, digits, `-`, `_` or `.`: one token in a decision record
/// and a log line, whatever reads it.
pub fn valid_tag(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_TAG_LEN && s.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// What a log line may show of a refused tag: its first characters, escaped, and its length.
pub fn describe_refused(s: &str) -> String {
    let shown: String = s.chars().take(32).flat_map(char::escape_debug).collect();
    format!("'{shown}'{} ({} bytes)", if s.chars().count() > 32 { "..." } else { "" }, s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_of_bounded_length() {
        assert!(valid_tag("ResNet-50_v1.5"));
        assert!(valid_tag(&"a".repeat(MAX_TAG_LEN)));
        for bad in ["", "a b", "a\nb", "a;b", "a; energy_j=0", "ü", "a\u{1b}[2J", &"a".repeat(MAX_TAG_LEN + 1)] {
            assert!(!valid_tag(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_refused_tag_is_shown_escaped_and_short() {
        let shown = describe_refused(&format!("x\nsched/energy: forged{}", "y".repeat(100_000)));
        assert_eq!(shown, "'x\\nsched/energy: forgedyyyyyyyyyy'... (100022 bytes)");
    }
}
