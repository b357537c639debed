//! Gives the cdylib the SONAME of the real library, so a copy named `libnvidia-ml.so.1` looks
//! like NVML to `ldd`/`ldconfig` and to programs that link against the SONAME.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
