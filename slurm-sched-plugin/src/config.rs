//! `energy.toml`, the plugin's configuration file next to slurm.conf: the types and the parser
//! live in `model::energy_toml` (shared with `slurm-energy whatif`, so both read the file alike
//! and name the same file:line on an error).
//!
//! Every error names the file, the line and the key, so slurmctld's log says what to fix.

pub use model::energy_toml::*;

#[cfg(test)]
use std::path::Path;

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("/etc/slurm/energy.toml")
    }

    #[test]
    fn empty_file_gives_defaults_with_a_cycle_bound() {
        let c = parse(p(), "").unwrap();
        assert_eq!(c.planner.max_cycle_ms, DEFAULT_MAX_CYCLE_MS);
        assert_eq!(c.sched, SchedSettings::default());
    }

    #[test]
    fn full_file_parses() {
        let text = "[sched]\ninterval_s = 2\ndebug = true\n\n[planner]\nreservation_depth = 1\nmax_cycle_ms = 50\n\n[planner.hints]\npolicy = \"efficiency\"\n\n[gpu_types.v100]\nmax_power_w = 250\n";
        let c = parse(p(), text).unwrap();
        assert_eq!(c.sched.interval_s, 2.0);
        assert!(c.sched.debug);
        assert_eq!(c.planner.reservation_depth, 1);
        assert_eq!(c.planner.max_cycle_ms, 50);
        assert_eq!(c.planner.hints.policy, model::types::EnergyPolicy::Efficiency);
        assert_eq!(c.gpu_spec("v100").max_power_w, 250.0);
        assert_eq!(c.gpu_spec("a100"), GpuSpec::default());
    }

    #[test]
    fn an_untyped_gpu_can_be_predicted_as_a_measured_model() {
        let c = parse(p(), "[gpu_types.gpu]\nmodel = \"v100\"\nmax_power_w = 250\n").unwrap();
        let t = c.gpu_spec("gpu").gpu_type("gpu");
        assert_eq!((t.name.as_str(), t.max_power_w), ("v100", 250.0));
        assert_eq!(c.gpu_spec("a40").gpu_type("a40").name, "a40");
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let text = "[planner]\nreservation_depth = 1\nreservaton_depth = 2\n";
        let e = parse(p(), text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("reservaton_depth"));
        assert_eq!(e.line, Some(3));
        let shown = e.to_string();
        assert!(shown.starts_with("/etc/slurm/energy.toml:3: key 'reservaton_depth': unknown field"), "{shown}");
    }

    #[test]
    fn invalid_value_names_its_key() {
        let text = "[planner.hints]\nbalanced_max_slowdown = 0.5\n";
        let e = parse(p(), text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("planner.hints.balanced_max_slowdown"));
        assert_eq!(e.line, Some(2));
        let e = parse(p(), "[sched]\ninterval_s = 0\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("sched.interval_s"), Some(2)));
    }

    #[test]
    fn power_cap_section() {
        let c = parse(p(), "[planner]\npower_cap_w = 60000\n[power_cap]\nfile = \"/var/lib/slurm-energy/power-cap\"\nrefresh_s = 5\n").unwrap();
        assert_eq!(c.power_cap.file.as_deref(), Some(Path::new("/var/lib/slurm-energy/power-cap")));
        assert_eq!(c.power_cap.refresh_s, 5.0);
        assert_eq!(c.planner.power_cap_w, 60_000.0);
        let e = parse(p(), "[power_cap]\nfile = \"cap\"\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("power_cap.file"), Some(2)));
        let e = parse(p(), "[power_cap]\nrefresh_s = 0\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("power_cap.refresh_s"), Some(2)));
        assert_eq!(parse(p(), "").unwrap().power_cap, PowerCapSettings::default());
    }

    #[test]
    fn carbon_and_learning_sections() {
        let c = parse(p(), "[carbon]\nsource = \"/var/lib/ci.csv\"\nformat = \"watttime\"\nrefresh_s = 30\n[learning]\nearly_after_s = 60\n").unwrap();
        assert_eq!(c.carbon.source.as_deref(), Some(Path::new("/var/lib/ci.csv")));
        assert_eq!(c.carbon.source_format(), Some(model::carbon_source::SourceFormat::WattTime));
        assert_eq!(c.learning.early_after_s, 60.0);
        assert!(c.learning.enabled);
        let e = parse(p(), "[carbon]\nsource = \"/x\"\nformat = \"xml\"\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("carbon.format"), Some(3)));
        assert!(e.reason.contains("national-grid-uk"), "{}", e.reason);
        let e = parse(p(), "[carbon]\nsource = \"relative.csv\"\n").unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("carbon.source"), Some(2)));
    }

    #[test]
    fn syntax_error_has_a_line() {
        let e = parse(p(), "[sched]\ninterval_s = = 3\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.key.is_none());
    }

    #[test]
    fn wrong_type_is_reported() {
        let e = parse(p(), "[sched]\n\ninterval_s = \"fast\"\n").unwrap_err();
        assert!(e.reason.contains("invalid type"), "{}", e.reason);
    }
}
