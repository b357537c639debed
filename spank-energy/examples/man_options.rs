//! Prints the `--energy-*` options exactly as `spank_energy.so` registers them with Slurm
//! (name, arginfo and usage, with the default site bounds of plugstack.conf), one option a line,
//! tab-separated: `name<TAB>arginfo<TAB>usage`.
//!
//! `slurm-energy package` builds the man page's option list from this output, so the page
//! cannot drift from what the plugin registers.
//!
//! `cargo run --release -p spank-energy --example man_options`

use spank_energy::parse::{Bounds, Opt};

fn main() {
    let bounds = Bounds::default();
    for opt in Opt::ALL {
        println!("{}\t{}\t{}", opt.name(), opt.arginfo(), opt.usage(&bounds));
    }
    // The flag registered beside them (sbatch only), without an argument.
    println!("{}\t\t{}", spank_energy::whatif::OPTION, spank_energy::whatif::USAGE.to_string_lossy());
}
