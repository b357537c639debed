//! AFL target: see `fuzz_targets::spank_option_values`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::spank_option_values(data));
}
