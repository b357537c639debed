//! AFL target: see `fuzz_targets::clock_ledger`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz_targets::clock_ledger(data));
}
