//! What the report reads from sched/energy's decision record (the job's `AdminComment`, see
//! `model::decision`): `policy=`, `clock=<n>MHz`, `share=`, `slow=` (predicted slowdown against
//! the default clock), `pred_w=`, `pred_kwh=`, and when the plugin stored them `carbon_g=` (the
//! job's carbon at the intensity of the moment) and `tag=` (the `--energy-tag` hint).

use model::decision::{recorded_clock_mhz, recorded_field as field};
use serde::Serialize;

/// The fields of one job's record; `None` where the record has no such field (or no record).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RecordFields {
    pub policy: Option<String>,
    pub clock_mhz: Option<u32>,
    /// Jobs it shared GPUs with (`share=` other than `none`).
    pub shared: bool,
    pub predicted_slowdown: Option<f64>,
    pub predicted_power_w: Option<f64>,
    pub predicted_energy_j: Option<f64>,
    pub carbon_g: Option<f64>,
    pub tag: Option<String>,
}

impl RecordFields {
    /// Reads an admin comment; text that is not a record gives all `None`.
    pub fn read(admin_comment: &str) -> RecordFields {
        let number = |key: &str| {
            field(admin_comment, key)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        RecordFields {
            policy: field(admin_comment, "policy").map(str::to_string),
            clock_mhz: recorded_clock_mhz(admin_comment),
            shared: field(admin_comment, "share").is_some_and(|s| s != "none"),
            predicted_slowdown: number("slow").filter(|s| *s >= 1.0),
            predicted_power_w: number("pred_w"),
            predicted_energy_j: number("pred_kwh").map(|kwh| kwh * 3.6e6),
            carbon_g: number("carbon_g"),
            tag: field(admin_comment, "tag").filter(|t| !t.is_empty()).map(str::to_string),
        }
    }

    pub fn is_record(&self) -> bool {
        self.policy.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_fields_are_read_and_site_text_ignored() {
        let r = RecordFields::read("energy:policy=efficiency nodes=n2 clock=1085MHz share=none slow=1.085 pred_w=213 pred_kwh=0.023 carbon_g=4.5; tag=site");
        assert_eq!(r.policy.as_deref(), Some("efficiency"));
        assert_eq!(r.clock_mhz, Some(1085));
        assert!(!r.shared);
        assert_eq!(r.predicted_slowdown, Some(1.085));
        assert_eq!(r.predicted_power_w, Some(213.0));
        assert!((r.predicted_energy_j.unwrap_or(0.0) - 82_800.0).abs() < 1e-6);
        assert_eq!(r.carbon_g, Some(4.5));
        assert_eq!(r.tag, None, "the site's part is not ours");
        assert!(RecordFields::read("energy:policy=a share=7+9 tag=sweep").shared);
        assert_eq!(RecordFields::read("energy:policy=a tag=sweep").tag.as_deref(), Some("sweep"));
        assert!(!RecordFields::read("a site note").is_record());
        assert_eq!(RecordFields::read("energy:policy=a carbon_g=nan").carbon_g, None);
    }
}
