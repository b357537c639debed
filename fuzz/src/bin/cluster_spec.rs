//! AFL target: see `fuzz_targets::cluster_spec`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::cluster_spec(data));
}
