//! `fake-nvml-ctl`: puts the fake NVML library in place and reads or changes the state it
//! shares between processes. A test and demo tool; it never touches a real GPU.

use std::path::PathBuf;
use std::process::ExitCode;

use fake_nvml::{FailRule, FakeNvml, GpuProcess, Session, model, state::now_unix_ns};

const USAGE: &str = "\
usage: fake-nvml-ctl [--lib-dir DIR | [--config FILE] [--state-dir DIR]] COMMAND

Where the state is: --lib-dir resolves config and state as a library copy in DIR would
(fake-nvml.conf and fake-nvml-state/ there); otherwise --config/--state-dir, falling back to
$FAKE_NVML_CONFIG and $FAKE_NVML_STATE_DIR.

commands:
  install DIR [--lib PATH]   copy the built fake into DIR as libnvidia-ml.so.1, plus the
                             symlink libnvidia-ml.so (PATH defaults to the libfake_nvml.so
                             next to this program, or $FAKE_NVML_LIB)
  show                       one line per GPU: utilisation, clocks, power, energy
  dump                       the raw state file (format: see fake-nvml's state.rs)
  set-util GPU|all GPU_PCT [MEM_PCT]
  set-procs GPU [PID:BYTES[:SM_PCT] ...]   SM_PCT: the process's utilisation sample
  reset-counter GPU          restart the GPU's energy counter from 0 (a driver reload/GPU reset)
  fail RULE                  add a fail rule: CALL[@GPU][:CODE], e.g.
                             nvmlDeviceSetGpuLockedClocks:NO_PERMISSION or '*:GPU_IS_LOST'
  clear-fail                 remove every fail rule
  reset                      forget the state: GPUs back to their boot state
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fake-nvml-ctl: {message}");
            ExitCode::FAILURE
        }
    }
}

fn take_flag(args: &mut Vec<String>, flag: &str) -> Result<Option<String>, String> {
    match args.iter().position(|a| a == flag) {
        Some(i) if i + 1 < args.len() => {
            let value = args.remove(i + 1);
            args.remove(i);
            Ok(Some(value))
        }
        Some(_) => Err(format!("{flag} needs a value")),
        None => Ok(None),
    }
}

fn open(lib_dir: Option<String>, config: Option<String>, state_dir: Option<String>) -> Result<FakeNvml, String> {
    if let Some(dir) = lib_dir {
        return FakeNvml::for_library_dir(&PathBuf::from(dir));
    }
    let resolved = Session::resolve(None);
    let config = match config {
        Some(path) => fake_nvml::Config::load(&PathBuf::from(path)).map_err(|e| e.to_string())?,
        None => resolved.as_ref().map(|s| s.config.clone()).unwrap_or_default(),
    };
    let state_dir = match state_dir {
        Some(dir) => PathBuf::from(dir),
        None => resolved?.store.dir().to_path_buf(),
    };
    Ok(FakeNvml::new(config, state_dir))
}

fn gpu_index(text: &str) -> Result<usize, String> {
    text.parse().map_err(|_| format!("bad GPU index {text:?}"))
}

fn percent(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|p| *p <= 100)
        .ok_or_else(|| format!("bad percentage {text:?}: expected 0..=100"))
}

fn run(args: &[String]) -> Result<(), String> {
    let mut args = args.to_vec();
    if args.iter().any(|a| a == "-h" || a == "--help") || args.is_empty() {
        print!("{USAGE}");
        return Ok(());
    }
    let lib_dir = take_flag(&mut args, "--lib-dir")?;
    let config = take_flag(&mut args, "--config")?;
    let state_dir = take_flag(&mut args, "--state-dir")?;
    let lib = take_flag(&mut args, "--lib")?;
    let (command, rest) = args.split_first().ok_or("missing command")?;
    let err = |e: fake_nvml::StateError| e.to_string();
    match (command.as_str(), rest) {
        ("install", [dir]) => {
            let built = lib
                .map(PathBuf::from)
                .or_else(fake_nvml::find_built_library)
                .ok_or("cannot find libfake_nvml.so: build it (cargo build -p fake-nvml) or pass --lib")?;
            let path = fake_nvml::install_library(&built, &PathBuf::from(dir))
                .map_err(|e| format!("install into {dir}: {e}"))?;
            println!("{}", path.display());
            Ok(())
        }
        ("show", []) => {
            let fake = open(lib_dir, config, state_dir)?;
            let state = fake.state().map_err(err)?;
            let now = now_unix_ns();
            println!("state: {}", fake.store.state_path().display());
            for rule in &state.fail {
                println!("fail: {rule}");
            }
            for (i, g) in state.gpus.iter().enumerate().take(fake.config.gpu_count()) {
                let locked = g
                    .locked_clocks_mhz
                    .map_or_else(|| "-".to_string(), |(lo, hi)| format!("{lo}-{hi}"));
                let view = fake.config.for_gpu(i);
                println!(
                    "gpu {i}: util {:>3}%/{:>3}%  app {}/{} MHz  locked {locked}  clock {} MHz  power {:.1} W  energy {:.3} J  limit {:.1} W  model {}",
                    g.util_gpu_pct,
                    g.util_memory_pct,
                    g.app_memory_clock_mhz,
                    g.app_graphics_clock_mhz,
                    model::current_graphics_clock_mhz(&view, g),
                    model::power_mw(&view, g) / 1000.0,
                    model::energy_mj_at(&view, g, now) / 1000.0,
                    f64::from(g.power_limit_mw) / 1000.0,
                    view.model,
                );
            }
            Ok(())
        }
        ("dump", []) => {
            let fake = open(lib_dir, config, state_dir)?;
            print!("{}", fake.state().map_err(err)?.to_text());
            Ok(())
        }
        ("set-util", [gpu, gpu_pct, more @ ..]) if more.len() <= 1 => {
            let fake = open(lib_dir, config, state_dir)?;
            let gpu_pct = percent(gpu_pct)?;
            let mem_pct = more.first().map(|m| percent(m)).transpose()?.unwrap_or(0);
            if gpu == "all" {
                fake.update(|s| {
                    for g in &mut s.gpus {
                        (g.util_gpu_pct, g.util_memory_pct) = (gpu_pct, mem_pct);
                    }
                })
                .map_err(err)
            } else {
                fake.set_utilization(gpu_index(gpu)?, gpu_pct, mem_pct).map_err(err)
            }
        }
        ("set-procs", [gpu, procs @ ..]) => {
            let fake = open(lib_dir, config, state_dir)?;
            let procs = procs
                .iter()
                .map(|p| GpuProcess::parse(p).ok_or_else(|| format!("bad process {p:?}: expected PID:BYTES[:SM_PCT]")))
                .collect::<Result<Vec<_>, _>>()?;
            fake.set_processes(gpu_index(gpu)?, procs).map_err(err)
        }
        ("reset-counter", [gpu]) => open(lib_dir, config, state_dir)?.reset_energy_counter(gpu_index(gpu)?).map_err(err),
        ("fail", [rule]) => {
            let fake = open(lib_dir, config, state_dir)?;
            let rule = FailRule::parse(rule)
                .ok_or_else(|| format!("bad rule {rule:?}: expected CALL[@GPU][:CODE]"))?;
            fake.inject_failure(rule).map_err(err)
        }
        ("clear-fail", []) => open(lib_dir, config, state_dir)?.clear_failures().map_err(err),
        ("reset", []) => {
            let fake = open(lib_dir, config, state_dir)?;
            let path = fake.store.state_path();
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("{}: {e}", path.display())),
                _ => Ok(()),
            }
        }
        _ => Err(format!("bad command line {args:?}\n{USAGE}")),
    }
}
