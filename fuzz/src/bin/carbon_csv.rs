//! AFL target: see `fuzz_targets::carbon_csv`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::carbon_csv(data));
}
