// The targets link two Slurm plugins into one executable (sched/energy reads the SPANK options
// that spank_energy checked), and each plugin exports the symbols Slurm looks up by name
// (`plugin_name`, `plugin_type`, `plugin_version`, `init`, `fini`). No parser reads them, so
// the replay test and the unit tests let the first definition stand instead of failing to link.
fn main() {
    println!("cargo:rustc-link-arg=-Wl,--allow-multiple-definition");
}
