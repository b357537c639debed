//! Test machine: a private copy of the fake libnvidia-ml.so with its own config and state
//! directory, so tests run in parallel in one process without touching the environment.
//!
//! The library is the `libfake_nvml.so` cargo builds for the `fake-nvml` dev-dependency
//! (`target/<profile>/deps/`, next to the test binary), or `$FAKE_NVML_LIB`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use fake_nvml::FakeNvml;
use gpu_control::NvmlGpu;

pub struct FakeMachine {
    pub dir: PathBuf,
    /// `<dir>/libnvidia-ml.so.1`
    pub lib: PathBuf,
    pub fake: FakeNvml,
    /// Removes `dir` on drop (only the creating process does).
    owned: bool,
}

impl FakeMachine {
    /// A machine in `<tmp>/gpu-control-tests/<pid>-<name>` with `config` as its fake-nvml.conf.
    pub fn new(name: &str, config: &str) -> FakeMachine {
        for var in [fake_nvml::session::CONFIG_ENV, fake_nvml::session::STATE_DIR_ENV] {
            assert!(
                std::env::var_os(var).is_none(),
                "unset {var}: these tests give each library copy its own config and state"
            );
        }
        let dir = std::env::temp_dir()
            .join("gpu-control-tests")
            .join(format!("{}-{name}", std::process::id()));
        FakeMachine::at(&dir, Some(config), true)
    }

    /// The machine another process created in `dir`.
    pub fn existing(dir: &Path) -> FakeMachine {
        FakeMachine::at(dir, None, false)
    }

    fn at(dir: &Path, config: Option<&str>, fresh: bool) -> FakeMachine {
        if fresh {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).unwrap();
        }
        let lib = dir.join(fake_nvml::NVML_SONAME);
        if let Some(config) = config {
            std::fs::write(dir.join(fake_nvml::session::CONFIG_FILE_NAME), config).unwrap();
            let built = fake_nvml::find_built_library()
                .expect("libfake_nvml.so not found next to the test binary; set FAKE_NVML_LIB");
            fake_nvml::install_library(&built, dir).unwrap();
        }
        let fake = FakeNvml::for_library_dir(dir).unwrap();
        FakeMachine { dir: dir.to_path_buf(), lib, fake, owned: fresh }
    }

    pub fn open(&self) -> NvmlGpu {
        NvmlGpu::open(&self.lib).unwrap_or_else(|e| panic!("open {}: {e}", self.lib.display()))
    }

    pub fn state(&self) -> fake_nvml::State {
        self.fake.state().unwrap()
    }

    pub fn state_text(&self) -> String {
        std::fs::read_to_string(self.fake.store.state_path()).unwrap()
    }
}

impl Drop for FakeMachine {
    fn drop(&mut self) {
        if self.owned && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
