//! AFL target: see `fuzz_targets::carbon_source`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::carbon_source(data));
}
