//! AFL target: see `fuzz_targets::trace_csv`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::trace_csv(data));
}
