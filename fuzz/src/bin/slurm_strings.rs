//! AFL target: see `fuzz_targets::slurm_strings`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::slurm_strings(data));
}
