//! AFL target: see `fuzz_targets::energy_toml`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::energy_toml(data));
}
