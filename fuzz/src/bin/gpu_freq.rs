//! AFL target: see `fuzz_targets::gpu_freq`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::gpu_freq(data));
}
