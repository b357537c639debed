//! AFL target: see `fuzz_targets::decision_record`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::decision_record(data));
}
