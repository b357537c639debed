//! AFL target: see `fuzz_targets::slurm_gres`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::slurm_gres(data));
}
