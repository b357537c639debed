//! AFL target: see `fuzz_targets::sacct_output`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::sacct_output(data));
}
