// See ../fuzz-targets/build.rs: the plugins' exported Slurm symbols clash in one executable,
// and no parser reads them.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--allow-multiple-definition");
}
