//! slurm-energy-openadr: see `--help` and docs/openadr.md.

use openadr_ven::config::Config;
use openadr_ven::ven::{self, LOG};
use std::path::PathBuf;
use std::time::Duration;

const HELP: &str = "\
slurm-energy-openadr: drive sched/energy's cluster power cap from an OpenADR 3 program

USAGE: slurm-energy-openadr [--once] [--config <file>]

A VEN (OpenADR 3 client, LF Energy OpenLEADR) that polls the VTN for the events of one
demand-response program, turns their intervals into the power cap file's '<time>,<cap W|none>'
lines ([power_cap] file in energy.toml, docs/power-cap.md) and replaces that file atomically
(mode 0644) when they say something new. It runs apart from slurmctld, which only re-reads
the file.

An event's payload of type payload_type (default IMPORT_CAPACITY_LIMIT, in kW) is the cap
during its interval; overlapping events: the highest priority wins, then the lowest cap; an
event never raises the cap above baseline_cap_w; outside events the baseline holds (none if 0).
If the VTN cannot be reached, or an event's limit cannot be read, the file is left as it was
and the next poll retries.

OPTIONS
  --config <file>  the TOML configuration (default /etc/slurm-energy/openadr.toml):
                     vtn_url = \"https://vtn.example.org/openadr3/\"
                     credentials_file = \"/etc/slurm-energy/openadr-credentials\"  # or
                     # client_id = \"...\"  client_secret = \"...\"  (file: those two keys, mode 600)
                     # oauth_token_url = \"...\"  (default <vtn origin>/auth/token)
                     program_name = \"site-demand-response\"
                     payload_type = \"IMPORT_CAPACITY_LIMIT\"   # or a private type
                     payload_unit = \"kW\"                      # kW, W or fraction (of the baseline)
                     baseline_cap_w = 60000                    # 0: no cap outside events
                     cap_file = \"/var/lib/slurm-energy/power-cap\"
                     poll_s = 60
  --once           poll once and exit (for cron): exit status 0 if the file is up to date,
                   1 if the poll failed (the file is left as it was), 2 on a usage or
                   configuration error
  --help           this text
";

fn main() {
    let mut once = false;
    let mut config_path = PathBuf::from("/etc/slurm-energy/openadr.toml");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--help" | "-h" => {
                print!("{HELP}");
                return;
            }
            "--once" => once = true,
            "--config" => match args.next() {
                Some(p) => config_path = PathBuf::from(p),
                None => usage_error("--config needs a file"),
            },
            other => usage_error(&format!("unknown argument '{other}'")),
        }
    }
    let config = match Config::from_file(&config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{LOG}: error: configuration {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{LOG}: error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    std::process::exit(runtime.block_on(run(config, once)));
}

fn usage_error(why: &str) -> ! {
    eprintln!("{LOG}: error: {why} (see --help)");
    std::process::exit(2);
}

async fn run(config: Config, once: bool) -> i32 {
    let client = ven::client(&config);
    println!(
        "{LOG}: VTN {}, program '{}', payload {} ({:?}), baseline {} W, cap file {}, {}",
        config.vtn_url,
        config.program_name,
        config.rule.payload_type,
        config.rule.unit,
        config.rule.baseline_cap_w,
        config.cap_file.display(),
        if once { "once".to_string() } else { format!("every {} s", config.poll_s) }
    );
    loop {
        let now_s = chrono::Utc::now().timestamp();
        let ok = match ven::poll_once(&config, &client, now_s).await {
            Ok(_) => true,
            Err(e) => {
                eprintln!("{LOG}: error: {e}; {} kept as it was, retrying{}", config.cap_file.display(), if once { " at the next run" } else { " at the next poll" });
                false
            }
        };
        if once {
            return if ok { 0 } else { 1 };
        }
        tokio::time::sleep(Duration::from_secs(config.poll_s)).await;
    }
}
