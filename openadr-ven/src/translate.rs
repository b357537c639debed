//! OpenADR 3 events -> the power cap file's `<time>,<cap W|none>` lines (pure; no I/O).
//!
//! An event speaks to the cap when one of its intervals carries a payload of the configured
//! type (default `IMPORT_CAPACITY_LIMIT`, in kW). Its intervals follow OpenADR 3: an interval
//! without its own period starts where the previous one ended (the first at the event's
//! period's start) and lasts the event's period's duration; no duration means "until further
//! notice". Where events overlap, the one of highest priority (lowest number; no priority is
//! the lowest) decides; among equals, the lowest cap. The cap never exceeds the baseline (when
//! there is one): an event can only lower the envelope. Outside every event the baseline
//! holds, or `none` when the baseline is 0.

use chrono::{DateTime, Utc};
use openleadr_wire::event::{EventRequest, EventType, EventValuesMap};
use openleadr_wire::values_map::Value;

/// How the configured payload's value becomes watts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PayloadUnit {
    KiloWatt,
    Watt,
    /// A fraction of the baseline cap, in (0, 1] (a private payload type; OpenADR 3 defines none).
    FractionOfBaseline,
}

impl PayloadUnit {
    pub fn parse(text: &str) -> Result<PayloadUnit, String> {
        match text.to_ascii_lowercase().as_str() {
            "kw" => Ok(PayloadUnit::KiloWatt),
            "w" => Ok(PayloadUnit::Watt),
            "fraction" => Ok(PayloadUnit::FractionOfBaseline),
            other => Err(format!("payload_unit '{other}': expected kW, W or fraction")),
        }
    }
}

/// Which payload is a power limit, and how to read it.
#[derive(Clone, Debug, PartialEq)]
pub struct PayloadRule {
    /// As on the wire: `IMPORT_CAPACITY_LIMIT`, or a private type name.
    pub payload_type: String,
    pub unit: PayloadUnit,
    /// The cap outside events; 0 means no cap (`none`).
    pub baseline_cap_w: f64,
}

/// One interval of an event, in Unix seconds, with its cap.
#[derive(Clone, Debug, PartialEq)]
pub struct CapInterval {
    pub start_s: i64,
    /// `None`: open-ended.
    pub end_s: Option<i64>,
    pub cap_w: f64,
}

/// An event reduced to what the cap needs.
#[derive(Clone, Debug, PartialEq)]
pub struct CapEvent {
    pub id: String,
    /// OpenADR priority: 0 is the highest; `None` is below every number.
    pub priority: Option<u32>,
    pub intervals: Vec<CapInterval>,
}

fn type_name(event_type: &EventType) -> String {
    match serde_json::to_value(event_type) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{event_type:?}"),
    }
}

fn payload_value_w(payload: &EventValuesMap, rule: &PayloadRule) -> Result<f64, String> {
    let [value] = payload.values.as_slice() else {
        return Err(format!("{} payload has {} values, expected exactly 1", rule.payload_type, payload.values.len()));
    };
    let number = match value {
        Value::Number(n) => *n,
        Value::Integer(i) => *i as f64,
        other => return Err(format!("{} value {other:?} is not a number", rule.payload_type)),
    };
    if !number.is_finite() || number <= 0.0 {
        return Err(format!("{} value {number} must be a number above 0", rule.payload_type));
    }
    match rule.unit {
        PayloadUnit::KiloWatt => Ok(number * 1000.0),
        PayloadUnit::Watt => Ok(number),
        PayloadUnit::FractionOfBaseline => {
            if number > 1.0 {
                return Err(format!("{} value {number} is a fraction of the baseline and must be in (0, 1]", rule.payload_type));
            }
            if rule.baseline_cap_w <= 0.0 {
                return Err(format!("{} is a fraction of the baseline, but baseline_cap_w is 0 (no envelope)", rule.payload_type));
            }
            Ok(number * rule.baseline_cap_w)
        }
    }
}

/// The event's cap intervals; `Ok(None)` when it carries no payload of the rule's type (not a
/// cap event: ignored); `Err` names the event and what is wrong with it.
pub fn cap_event(id: &str, event: &EventRequest, rule: &PayloadRule) -> Result<Option<CapEvent>, String> {
    let Some(intervals) = &event.intervals else { return Ok(None) };
    let ours = |p: &&EventValuesMap| type_name(&p.value_type) == rule.payload_type;
    if !intervals.iter().any(|i| i.payloads.iter().any(|p| ours(&p))) {
        return Ok(None);
    }
    let fail = |why: String| format!("event {id} ({}): {why}", event.event_name.as_deref().unwrap_or("no name"));
    let default_period = event.interval_period.as_ref();
    let mut next_start = default_period.map(|p| p.start);
    let mut out = Vec::new();
    for interval in intervals {
        let (start, duration) = match (&interval.interval_period, default_period) {
            (Some(p), _) => (p.start, p.duration.as_ref()),
            (None, Some(d)) => match next_start {
                Some(s) => (s, d.duration.as_ref()),
                None => return Err(fail(format!("interval {} follows an open-ended one", interval.id))),
            },
            (None, None) => return Err(fail(format!("interval {} has no period and the event has none", interval.id))),
        };
        let end: Option<DateTime<Utc>> = duration.map(|d| start + d.to_chrono_at_datetime(start));
        if let Some(end) = end {
            if end <= start {
                return Err(fail(format!("interval {} has a duration of 0 or less", interval.id)));
            }
        }
        next_start = end;
        let payloads: Vec<&EventValuesMap> = interval.payloads.iter().filter(ours).collect();
        match payloads.as_slice() {
            [] => continue,
            [p] => {
                let cap_w = payload_value_w(p, rule).map_err(|why| fail(format!("interval {}: {why}", interval.id)))?;
                out.push(CapInterval { start_s: start.timestamp(), end_s: end.map(|e| e.timestamp()), cap_w });
            }
            _ => return Err(fail(format!("interval {} has {} {} payloads, expected 1", interval.id, payloads.len(), rule.payload_type))),
        }
    }
    let priority: Option<i64> = event.priority.into();
    Ok(Some(CapEvent { id: id.to_string(), priority: priority.map(|p| p as u32), intervals: out }))
}

/// The cap in force at `t_s`: `None` for no cap.
fn cap_at(events: &[CapEvent], baseline_cap_w: f64, t_s: i64) -> Option<f64> {
    let baseline = (baseline_cap_w > 0.0).then_some(baseline_cap_w);
    // Rank: Some(p) beats None, lower p beats higher.
    let rank = |p: Option<u32>| p.map_or(u64::MAX, u64::from);
    let mut best: Option<(u64, f64)> = None;
    for event in events {
        for iv in &event.intervals {
            if iv.start_s <= t_s && iv.end_s.is_none_or(|e| t_s < e) {
                let r = rank(event.priority);
                best = match best {
                    Some((br, bc)) if br < r || (br == r && bc <= iv.cap_w) => Some((br, bc)),
                    _ => Some((r, iv.cap_w)),
                };
            }
        }
    }
    match (best, baseline) {
        (Some((_, c)), Some(b)) => Some(c.min(b)),
        (Some((_, c)), None) => Some(c),
        (None, b) => b,
    }
}

/// The schedule from `now_s` on: `(time, cap)` changes, the first at `now_s`, consecutive equal
/// caps merged. Intervals that ended before `now_s` play no part.
pub fn schedule(events: &[CapEvent], baseline_cap_w: f64, now_s: i64) -> Vec<(i64, Option<f64>)> {
    let mut times: Vec<i64> = vec![now_s];
    for iv in events.iter().flat_map(|e| &e.intervals) {
        times.extend([Some(iv.start_s), iv.end_s].into_iter().flatten().filter(|&t| t > now_s));
    }
    times.sort_unstable();
    times.dedup();
    let mut out: Vec<(i64, Option<f64>)> = Vec::new();
    for t in times {
        let cap = cap_at(events, baseline_cap_w, t);
        if out.last().is_none_or(|(_, last)| *last != cap) {
            out.push((t, cap));
        }
    }
    out
}

/// The cap file's lines for a schedule (RFC 3339 times, whole watts).
pub fn render(schedule: &[(i64, Option<f64>)]) -> String {
    let mut text = String::new();
    for (t, cap) in schedule {
        let time = DateTime::<Utc>::from_timestamp(*t, 0).map_or_else(|| t.to_string(), |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string());
        match cap {
            Some(w) => text.push_str(&format!("{time},{}\n", w.round().max(1.0) as i64)),
            None => text.push_str(&format!("{time},none\n")),
        }
    }
    text
}

/// Events -> the file's schedule lines, checked by `model::power_cap`'s parser. Any bad cap
/// event rejects the whole set (a limit misread must not leave the cluster uncapped).
pub fn events_to_lines(events: &[(String, EventRequest)], rule: &PayloadRule, now_s: i64) -> Result<(String, usize), String> {
    let mut caps = Vec::new();
    for (id, event) in events {
        if let Some(cap) = cap_event(id, event, rule)? {
            caps.push(cap);
        }
    }
    let text = render(&schedule(&caps, rule.baseline_cap_w, now_s));
    model::power_cap::CapSchedule::parse(&text)
        .map_err(|(line, why)| format!("the schedule does not parse as a power cap file (line {line:?}): {why}"))?;
    Ok((text, caps.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_795_000_000; // 2026-11-18T...Z

    fn rule(baseline: f64) -> PayloadRule {
        PayloadRule { payload_type: "IMPORT_CAPACITY_LIMIT".into(), unit: PayloadUnit::KiloWatt, baseline_cap_w: baseline }
    }

    fn iso(t: i64) -> String {
        DateTime::<Utc>::from_timestamp(t, 0).unwrap().format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// An event as the VTN sends it: one interval per (start, seconds, kW) triple.
    fn event(priority: Option<u32>, intervals: &[(i64, i64, serde_json::Value)]) -> EventRequest {
        let ivs: Vec<_> = intervals
            .iter()
            .enumerate()
            .map(|(i, (s, d, v))| {
                serde_json::json!({"id": i, "intervalPeriod": {"start": iso(*s), "duration": format!("PT{d}S")},
                    "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [v]}]})
            })
            .collect();
        let mut e = serde_json::json!({"programID": "p1", "eventName": "dr", "intervals": ivs});
        if let Some(p) = priority {
            e["priority"] = p.into();
        }
        serde_json::from_value(e).unwrap()
    }

    fn lines(events: Vec<EventRequest>, baseline: f64, now: i64) -> Result<String, String> {
        let named: Vec<_> = events.into_iter().enumerate().map(|(i, e)| (format!("e{i}"), e)).collect();
        events_to_lines(&named, &rule(baseline), now).map(|(t, _)| t)
    }

    #[test]
    fn no_events_is_the_baseline_or_none() {
        assert_eq!(lines(vec![], 60000.0, T0).unwrap(), format!("{},60000\n", iso(T0)));
        assert_eq!(lines(vec![], 0.0, T0).unwrap(), format!("{},none\n", iso(T0)));
    }

    #[test]
    fn an_event_lowers_the_cap_for_its_interval_then_the_baseline_returns() {
        let e = event(None, &[(T0 + 3600, 7200, serde_json::json!(42.0))]);
        assert_eq!(
            lines(vec![e.clone()], 60000.0, T0).unwrap(),
            format!("{},60000\n{},42000\n{},60000\n", iso(T0), iso(T0 + 3600), iso(T0 + 10800))
        );
        // Without a baseline: none, the cap, none.
        assert_eq!(lines(vec![e], 0.0, T0).unwrap(), format!("{},none\n{},42000\n{},none\n", iso(T0), iso(T0 + 3600), iso(T0 + 10800)));
    }

    #[test]
    fn an_ended_event_plays_no_part_and_a_running_one_starts_now() {
        let ended = event(None, &[(T0 - 7200, 3600, serde_json::json!(10.0))]);
        let running = event(None, &[(T0 - 600, 1200, serde_json::json!(30.0))]);
        assert_eq!(lines(vec![ended.clone()], 60000.0, T0).unwrap(), format!("{},60000\n", iso(T0)));
        assert_eq!(lines(vec![ended, running], 60000.0, T0).unwrap(), format!("{},30000\n{},60000\n", iso(T0), iso(T0 + 600)));
    }

    #[test]
    fn overlapping_events_of_equal_priority_take_the_lower_cap() {
        let a = event(None, &[(T0, 3600, serde_json::json!(40.0))]);
        let b = event(None, &[(T0 + 1800, 3600, serde_json::json!(30.0))]);
        assert_eq!(
            lines(vec![a, b], 60000.0, T0).unwrap(),
            format!("{},40000\n{},30000\n{},60000\n", iso(T0), iso(T0 + 1800), iso(T0 + 5400))
        );
    }

    #[test]
    fn a_higher_priority_event_wins_even_with_a_higher_cap() {
        let low = event(Some(5), &[(T0, 3600, serde_json::json!(20.0))]);
        let high = event(Some(0), &[(T0 + 600, 600, serde_json::json!(50.0))]);
        let unprioritised = event(None, &[(T0, 7200, serde_json::json!(10.0))]);
        assert_eq!(
            lines(vec![low, high, unprioritised], 60000.0, T0).unwrap(),
            format!("{},20000\n{},50000\n{},20000\n{},10000\n{},60000\n", iso(T0), iso(T0 + 600), iso(T0 + 1200), iso(T0 + 3600), iso(T0 + 7200))
        );
    }

    #[test]
    fn an_event_above_the_baseline_does_not_raise_it() {
        let e = event(None, &[(T0, 3600, serde_json::json!(90.0))]);
        assert_eq!(lines(vec![e], 60000.0, T0).unwrap(), format!("{},60000\n", iso(T0)));
    }

    #[test]
    fn sequential_intervals_follow_the_events_period() {
        let e: EventRequest = serde_json::from_value(serde_json::json!({
            "programID": "p1",
            "intervalPeriod": {"start": iso(T0), "duration": "PT15M"},
            "intervals": [
                {"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [45.0]}]},
                {"id": 1, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [40]}]}
            ]
        }))
        .unwrap();
        assert_eq!(
            lines(vec![e], 60000.0, T0).unwrap(),
            format!("{},45000\n{},40000\n{},60000\n", iso(T0), iso(T0 + 900), iso(T0 + 1800))
        );
    }

    #[test]
    fn other_payload_types_are_not_cap_events() {
        let e: EventRequest = serde_json::from_value(serde_json::json!({
            "programID": "p1",
            "intervals": [{"id": 0, "intervalPeriod": {"start": iso(T0), "duration": "PT1H"},
                "payloads": [{"type": "PRICE", "values": [0.3]}]}]
        }))
        .unwrap();
        assert_eq!(lines(vec![e], 60000.0, T0).unwrap(), format!("{},60000\n", iso(T0)));
    }

    #[test]
    fn bad_payloads_are_rejected_with_the_event_and_the_reason() {
        let zero = event(None, &[(T0, 3600, serde_json::json!(0.0))]);
        let err = lines(vec![zero], 60000.0, T0).unwrap_err();
        assert!(err.contains("event e0 (dr): interval 0: IMPORT_CAPACITY_LIMIT value 0 must be a number above 0"), "{err}");

        let two: EventRequest = serde_json::from_value(serde_json::json!({
            "programID": "p1",
            "intervals": [{"id": 3, "intervalPeriod": {"start": iso(T0), "duration": "PT1H"},
                "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [40.0, 30.0]}]}]
        }))
        .unwrap();
        let err = lines(vec![two], 60000.0, T0).unwrap_err();
        assert!(err.contains("interval 3: IMPORT_CAPACITY_LIMIT payload has 2 values, expected exactly 1"), "{err}");

        let no_period: EventRequest = serde_json::from_value(serde_json::json!({
            "programID": "p1",
            "intervals": [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [40.0]}]}]
        }))
        .unwrap();
        let err = lines(vec![no_period], 60000.0, T0).unwrap_err();
        assert!(err.contains("has no period and the event has none"), "{err}");
    }

    #[test]
    fn a_fraction_payload_scales_the_baseline_and_needs_one() {
        let e: EventRequest = serde_json::from_value(serde_json::json!({
            "programID": "p1",
            "intervals": [{"id": 0, "intervalPeriod": {"start": iso(T0), "duration": "PT1H"},
                "payloads": [{"type": "CAP_FRACTION", "values": [0.7]}]}]
        }))
        .unwrap();
        let mut r = PayloadRule { payload_type: "CAP_FRACTION".into(), unit: PayloadUnit::FractionOfBaseline, baseline_cap_w: 60000.0 };
        let named = vec![("e0".to_string(), e)];
        assert_eq!(events_to_lines(&named, &r, T0).unwrap().0, format!("{},42000\n{},60000\n", iso(T0), iso(T0 + 3600)));
        r.baseline_cap_w = 0.0;
        assert!(events_to_lines(&named, &r, T0).unwrap_err().contains("baseline_cap_w is 0"));
    }
}
