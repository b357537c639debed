//! AFL target: see `fuzz_targets::gpu_use_report`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::gpu_use_report(data));
}
