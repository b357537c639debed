//! Trace parsing against the real Philly trace and hand-made generic traces, and the SVG charts.
//!
//! The reference data is read from `SLURM_ENERGY_DATA` when set, else from `../shared/data`
//! relative to the project root.

use std::path::{Path, PathBuf};

use tools::plots::{Series, downsample, line_chart_svg, stacked_bar_svg};
use tools::trace::{TraceError, TraceFormat, load_trace, parse_trace};

fn data_dir() -> PathBuf {
    match std::env::var_os("SLURM_ENERGY_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")),
    }
}

fn philly_path() -> PathBuf {
    data_dir().join("traces/philly.csv")
}

/// Nearest-rank percentile: the value at rank ceil(p/100 * n) of the sorted values.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[test]
fn philly_trace_matches_the_published_figures() {
    let trace = load_trace(&philly_path(), None).expect("the Philly trace parses");
    assert_eq!(trace.format, TraceFormat::Philly);
    assert_eq!(trace.jobs.len(), 82_247);
    assert_eq!(
        trace.jobs.iter().filter(|j| j.num_gpus == 1).count(),
        76_627
    );

    let mut durations: Vec<f64> = trace.jobs.iter().map(|j| j.duration_s).collect();
    durations.sort_by(f64::total_cmp);
    assert_eq!(nearest_rank(&durations, 50.0), 1_144.0);
    assert_eq!(nearest_rank(&durations, 90.0), 11_266.0);
    assert_eq!(nearest_rank(&durations, 99.0), 254_884.0);

    // Earliest timestamp in the file is 2017-09-04 10:30:41 UTC.
    assert_eq!(trace.start_unix_s, Some(1_504_521_041));
    assert_eq!(trace.jobs[0].submit_time_s, 0.0);
    assert!(
        trace
            .jobs
            .windows(2)
            .all(|w| w[0].submit_time_s <= w[1].submit_time_s)
    );
    // The file is not in time order, so sorting must have moved jobs.
    assert!(trace.jobs.windows(2).any(|w| w[0].line > w[1].line));
    // Ties keep file order.
    assert!(
        trace
            .jobs
            .windows(2)
            .filter(|w| w[0].submit_time_s == w[1].submit_time_s)
            .all(|w| w[0].line < w[1].line)
    );
    // Spans 2017-09-04 .. 2017-12-22: a bit over 109 days.
    let last_day = trace.jobs[trace.jobs.len() - 1].submit_time_s / 86_400.0;
    assert!(
        (100.0..110.0).contains(&last_day),
        "last submit at day {last_day}"
    );
    // The virtual cluster is the user; nothing else is in the file.
    assert!(trace.jobs.iter().all(|j| j.user.is_some()));
    assert!(
        trace
            .jobs
            .iter()
            .all(|j| j.job_type.is_none() && j.num_cpus.is_none())
    );
    assert_eq!(trace.jobs.iter().map(|j| j.line).max(), Some(82_248));
}

#[test]
fn philly_max_jobs_keeps_the_earliest_jobs() {
    let full = load_trace(&philly_path(), None).expect("the Philly trace parses");
    let first = load_trace(&philly_path(), Some(1_000)).expect("the Philly trace parses");
    assert_eq!(first.jobs.len(), 1_000);
    assert_eq!(first.jobs[..], full.jobs[..1_000]);
    assert_eq!(first.start_unix_s, full.start_unix_s);
    let all = load_trace(&philly_path(), Some(1_000_000)).expect("the Philly trace parses");
    assert_eq!(all.jobs.len(), 82_247);
}

const GOOD_GENERIC: &str = "\u{feff}user,num_gpus,submit_time_s,duration_s,job_type,num_cpus,mem_gb,priority\r\n\
alice,1,100,60.5,ResNet-50 (batch size 64),4,16.5,2\r\n\
\r\n\
bob,8,40,3600,,,,\r\n\
,2,100,10,\"Transformer, big\",8.0,0,0\r\n\
carol , 4 , 250 , 1e3 , LM (batch size 20) , 16 , 64 , 1\r\n";

#[test]
fn generic_trace_is_parsed_sorted_and_relative() {
    let trace = parse_trace(GOOD_GENERIC, Path::new("good.csv"), None).expect("parses");
    assert_eq!(trace.format, TraceFormat::Generic);
    assert_eq!(trace.start_unix_s, None);
    let lines: Vec<usize> = trace.jobs.iter().map(|j| j.line).collect();
    // bob (t=40) first; alice and the anonymous job tie at t=100 and keep file order.
    assert_eq!(lines, [4, 2, 5, 6]);
    let times: Vec<f64> = trace.jobs.iter().map(|j| j.submit_time_s).collect();
    assert_eq!(times, [0.0, 60.0, 60.0, 210.0]);

    let bob = &trace.jobs[0];
    assert_eq!(bob.user.as_deref(), Some("bob"));
    assert_eq!((bob.num_gpus, bob.duration_s), (8, 3600.0));
    assert_eq!(
        (
            bob.job_type.as_deref(),
            bob.num_cpus,
            bob.mem_gb,
            bob.priority
        ),
        (None, None, None, None)
    );

    let alice = &trace.jobs[1];
    assert_eq!(alice.job_type.as_deref(), Some("ResNet-50 (batch size 64)"));
    assert_eq!(
        (alice.num_cpus, alice.mem_gb, alice.priority),
        (Some(4), Some(16.5), Some(2))
    );
    assert_eq!(alice.duration_s, 60.5);

    let anonymous = &trace.jobs[2];
    assert_eq!(anonymous.user, None);
    assert_eq!(anonymous.job_type.as_deref(), Some("Transformer, big"));
    assert_eq!(
        (anonymous.num_cpus, anonymous.mem_gb, anonymous.priority),
        (Some(8), Some(0.0), Some(0))
    );

    let carol = &trace.jobs[3];
    assert_eq!(carol.user.as_deref(), Some("carol"));
    assert_eq!(carol.job_type.as_deref(), Some("LM (batch size 20)"));
    assert_eq!(
        (carol.num_gpus, carol.duration_s, carol.num_cpus),
        (4, 1000.0, Some(16))
    );

    let first_two = parse_trace(GOOD_GENERIC, Path::new("good.csv"), Some(2)).expect("parses");
    assert_eq!(first_two.jobs[..], trace.jobs[..2]);
}

#[test]
fn only_the_required_columns_are_needed() {
    let trace = parse_trace(
        "duration_s,num_gpus,submit_time_s\n5,1,7\n",
        Path::new("min.csv"),
        None,
    )
    .expect("parses");
    assert_eq!(trace.jobs.len(), 1);
    assert_eq!(
        (trace.jobs[0].submit_time_s, trace.jobs[0].duration_s),
        (0.0, 5.0)
    );
}

fn parse_err(text: &str) -> TraceError {
    match parse_trace(text, Path::new("t.csv"), None) {
        Ok(trace) => panic!("expected an error, got {} jobs", trace.jobs.len()),
        Err(e) => e,
    }
}

#[test]
fn bad_generic_rows_name_the_line_and_the_column() {
    let header = "submit_time_s,duration_s,num_gpus,job_type,user,num_cpus,mem_gb,priority";
    let good = "0,10,1,A,u,2,8,1";
    let cases: [(&str, &str); 14] = [
        ("1,10,1,A,u,2,8", "expected 8 fields"),
        ("1,10,1,A,u,2,8,1,9", "expected 8 fields"),
        (
            "x,10,1,A,u,2,8,1",
            "submit_time_s: expected a non-negative number, found \"x\"",
        ),
        (
            "-1,10,1,A,u,2,8,1",
            "submit_time_s: expected a non-negative number",
        ),
        (
            "inf,10,1,A,u,2,8,1",
            "submit_time_s: expected a non-negative number",
        ),
        (
            "1,NaN,1,A,u,2,8,1",
            "duration_s: expected a positive number",
        ),
        ("1,0,1,A,u,2,8,1", "duration_s: expected a positive number"),
        ("1,-5,1,A,u,2,8,1", "duration_s: expected a positive number"),
        (
            "1,10,0,A,u,2,8,1",
            "num_gpus: expected a positive integer, found \"0\"",
        ),
        (
            "1,10,x,A,u,2,8,1",
            "num_gpus: expected a positive integer, found \"x\"",
        ),
        (
            "1,10,1.5,A,u,2,8,1",
            "num_gpus: expected a positive integer",
        ),
        ("1,10,1,A,u,-2,8,1", "num_cpus: expected a positive integer"),
        (
            "1,10,1,A,u,2,lots,1",
            "mem_gb: expected a non-negative number, found \"lots\"",
        ),
        (
            "1,10,1,A,u,2,8,high",
            "priority: expected a non-negative integer, found \"high\"",
        ),
    ];
    for (bad, expected) in cases {
        // Header on line 1, a good row, a blank line, then the bad row on line 4.
        let text = format!("{header}\r\n{good}\r\n\r\n{bad}\r\n{good}\r\n");
        let e = parse_err(&text);
        assert_eq!(e.line, 4, "{bad}: {e}");
        assert!(
            e.reason.contains(expected),
            "{bad}: got \"{}\", want \"{expected}\"",
            e.reason
        );
        assert_eq!(e.to_string(), format!("t.csv:4: {}", e.reason));
    }
}

#[test]
fn bad_philly_rows_name_the_line() {
    let header = "timestamp,duration,num_gpus,gpu_time,cluster";
    let good = "2017-10-09 07:01:55,66.0,1,66.0,11cb48";
    let cases = [
        ("2017-10-09 07:01:55,66.0,1,66.0", "expected 5 fields"),
        ("2017-10-09,66.0,1,66.0,11cb48", "timestamp: expected"),
        (
            "2017-02-30 07:01:55,66.0,1,66.0,11cb48",
            "found \"2017-02-30 07:01:55\"",
        ),
        (
            "2017-10-09 25:01:55,66.0,1,66.0,11cb48",
            "timestamp: expected",
        ),
        (
            "2017-10-09 07:01:55,soon,1,66.0,11cb48",
            "duration: expected a positive number",
        ),
        (
            "2017-10-09 07:01:55,66.0,0,0,11cb48",
            "num_gpus: expected a positive integer",
        ),
    ];
    for (bad, expected) in cases {
        let e = parse_err(&format!("{header}\n{good}\n{bad}\n"));
        assert_eq!(e.line, 3, "{bad}: {e}");
        assert!(
            e.reason.contains(expected),
            "{bad}: got \"{}\", want \"{expected}\"",
            e.reason
        );
    }
}

#[test]
fn bad_headers_and_empty_files_are_errors() {
    let e = parse_err("submit_time_s,duration_s,num_gpus,gpu_type\n0,1,1,V100\n");
    assert_eq!(e.line, 1);
    assert!(e.reason.contains("unknown column \"gpu_type\""), "{e}");
    assert!(
        e.reason
            .contains("job_type, user, num_cpus, mem_gb, priority"),
        "{e}"
    );

    let e = parse_err("\nsubmit_time_s,num_gpus\n0,1\n");
    assert_eq!(e.line, 2);
    assert!(
        e.reason.contains("missing required column \"duration_s\""),
        "{e}"
    );

    let e = parse_err("submit_time_s,duration_s,num_gpus,num_gpus\n0,1,1,1\n");
    assert!(e.reason.contains("appears twice"), "{e}");

    for empty in ["", "\n", "\r\n\r\n  \n"] {
        let e = parse_err(empty);
        assert_eq!(e.line, 0);
        assert!(e.reason.starts_with("no jobs"), "{e}");
    }
    for header_only in [
        "submit_time_s,duration_s,num_gpus\n\n",
        "timestamp,duration,num_gpus,gpu_time,cluster",
    ] {
        let e = parse_err(header_only);
        assert_eq!(e.line, 1);
        assert!(e.reason.starts_with("no jobs"), "{e}");
    }

    let missing = Path::new("/nonexistent/trace.csv");
    let e = load_trace(missing, None).expect_err("no such file");
    assert_eq!((e.path.as_path(), e.line), (missing, 0));
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(
        boxed
            .to_string()
            .starts_with("/nonexistent/trace.csv:0: cannot read")
    );
}

/// A small XML well-formedness check: tags nest and close, attribute quotes pair up, and every
/// `&` starts a known entity.
fn assert_well_formed(svg: &str) {
    assert!(svg.starts_with("<svg"), "does not start with <svg");
    assert!(
        svg.trim_end().ends_with("</svg>"),
        "does not end with </svg>"
    );
    assert!(
        !svg.contains("NaN") && !svg.contains("inf"),
        "non-finite number in the SVG"
    );
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        check_text(&rest[..open]);
        let close = rest[open..].find('>').expect("unclosed tag") + open;
        let tag = &rest[open + 1..close];
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{tag}>"
        );
        assert!(!tag.contains('<'), "'<' inside <{tag}>");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name.trim()), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().expect("tag name"));
        }
        rest = &rest[close + 1..];
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed elements {stack:?}");
}

/// The text content of every `<text>` element, trimmed.
fn texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim())
        })
        .collect()
}

fn check_text(text: &str) {
    assert!(!text.contains('>'), "raw '>' in text {text:?}");
    for (i, _) in text.match_indices('&') {
        let entity = &text[i..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| entity.starts_with(e)),
            "bare '&' in {text:?}"
        );
    }
}

fn cdf(durations: &[f64]) -> Vec<(f64, f64)> {
    let n = durations.len() as f64;
    durations
        .iter()
        .enumerate()
        .map(|(i, &d)| (d, (i + 1) as f64 / n))
        .collect()
}

#[test]
fn line_chart_is_well_formed_svg_with_escaped_names() {
    let mut durations: Vec<f64> = (1..=5_000).map(|i| f64::from(i).powf(1.7)).collect();
    durations.sort_by(f64::total_cmp);
    let series = vec![
        Series {
            name: "FIFO <baseline> & co".into(),
            points: downsample(&cdf(&durations), 500),
        },
        Series {
            name: "\"energy-aware\"".into(),
            points: cdf(&durations[..100]),
        },
    ];
    let svg = line_chart_svg(
        "JCT CDF <all jobs>",
        "Job completion time (s)",
        "Fraction of jobs",
        &series,
        true,
    );
    assert_well_formed(&svg);
    assert!(svg.contains("FIFO &lt;baseline&gt; &amp; co"));
    assert!(svg.contains("&quot;energy-aware&quot;"));
    assert!(svg.contains("JCT CDF &lt;all jobs&gt;"));
    assert!(svg.contains("font-family=\"sans-serif\""));
    let labels = texts(&svg);
    assert!(
        labels.contains(&"1 min") && labels.contains(&"1 h"),
        "time ticks on a (s) log axis: {labels:?}"
    );

    let power: Vec<(f64, f64)> = (0..100_000)
        .map(|i| (f64::from(i) / 1e3, 300.0 + f64::from(i % 97)))
        .collect();
    let svg = line_chart_svg(
        "Cluster power",
        "Time (days)",
        "Power (kW)",
        &[Series {
            name: "FIFO".into(),
            points: downsample(&power, 1_000),
        }],
        false,
    );
    assert_well_formed(&svg);
    assert!(
        svg.len() < 40_000,
        "downsampled chart is {} bytes",
        svg.len()
    );
}

#[test]
fn charts_survive_empty_and_degenerate_input() {
    let nan = f64::NAN;
    let inputs: Vec<Vec<Series>> = vec![
        vec![],
        vec![Series {
            name: "empty".into(),
            points: vec![],
        }],
        vec![Series {
            name: "one".into(),
            points: vec![(5.0, 2.0)],
        }],
        vec![Series {
            name: "flat".into(),
            points: vec![(0.0, 0.0), (0.0, 0.0)],
        }],
        vec![Series {
            name: "bad".into(),
            points: vec![(nan, 1.0), (1.0, f64::INFINITY), (-1.0, -1.0), (2.0, -3.0)],
        }],
        vec![Series {
            name: "huge".into(),
            points: vec![(1e-300, 1e300), (1e300, -1e300)],
        }],
        vec![Series {
            name: "extreme".into(),
            points: vec![(f64::MIN_POSITIVE, f64::MAX), (f64::MAX, f64::MIN)],
        }],
    ];
    for series in &inputs {
        for log_x in [false, true] {
            assert_well_formed(&line_chart_svg("t", "x (s)", "y", series, log_x));
        }
    }
    let stacks = ["GPU active", "GPU idle", "node base"];
    assert_well_formed(&stacked_bar_svg("t", "y", &stacks, &[]));
    assert_well_formed(&stacked_bar_svg("t", "y", &[], &[("a".into(), vec![1.0])]));
    assert_well_formed(&stacked_bar_svg(
        "t",
        "y",
        &stacks,
        &[("zero".into(), vec![0.0, 0.0, 0.0])],
    ));
    assert_well_formed(&stacked_bar_svg(
        "t",
        "y",
        &stacks,
        &[
            ("short".into(), vec![1.0]),
            ("odd".into(), vec![nan, -2.0, 3.0, 99.0]),
        ],
    ));
}

#[test]
fn stacked_bars_are_well_formed_and_labelled() {
    let bars = vec![
        ("FIFO".to_string(), vec![120.0, 40.0, 30.0]),
        ("energy-aware <ours>".to_string(), vec![90.0, 10.0, 26.0]),
    ];
    let svg = stacked_bar_svg(
        "Energy & carbon",
        "Energy (kWh)",
        &["GPU active", "GPU idle", "node base"],
        &bars,
    );
    assert_well_formed(&svg);
    assert!(svg.contains("Energy &amp; carbon"));
    assert!(svg.contains("energy-aware &lt;ours&gt;"));
    let labels = texts(&svg);
    assert!(
        labels.contains(&"GPU idle") && labels.contains(&"190"),
        "legend and total label: {labels:?}"
    );
}

#[test]
fn downsample_keeps_endpoints_and_extremes() {
    let points: Vec<(f64, f64)> = (0..100_000)
        .map(|i| {
            (
                f64::from(i),
                (f64::from(i) / 500.0).sin() * 10.0 + f64::from(i % 7),
            )
        })
        .collect();
    let (max_at, max_y) = (31_337, 1e6);
    let (min_at, min_y) = (77_777, -1e6);
    let mut points = points;
    points[max_at].1 = max_y;
    points[min_at].1 = min_y;

    let small = downsample(&points, 1_000);
    assert!(
        small.len() <= 1_000 && small.len() >= 900,
        "{} points",
        small.len()
    );
    assert_eq!(small.first(), points.first());
    assert_eq!(small.last(), points.last());
    assert!(small.contains(&points[max_at]) && small.contains(&points[min_at]));
    assert!(small.windows(2).all(|w| w[0].0 < w[1].0), "x order is kept");

    assert_eq!(downsample(&points[..10], 1_000), points[..10]);
    assert_eq!(downsample(&[], 10), []);
    assert_eq!(downsample(&points, 2), [points[0], points[99_999]]);
    assert_eq!(downsample(&points, 0), []);
    assert!(downsample(&points, 5).len() <= 5);
}
