//! AFL target: see `fuzz_targets::plugin_args`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::plugin_args(data));
}
