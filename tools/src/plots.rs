//! Small, dependency-free SVG charts for the simulator's reports: line charts (JCT CDFs on a
//! log time axis, cluster power over time) and stacked bars (energy by category per policy).
//!
//! The output is a standalone SVG document (720 x 420) with a title, axes with "nice" ticks,
//! grid lines, axis labels and a legend. Colours come from the Okabe-Ito palette, which stays
//! readable for colour-blind readers; lines also differ by dash pattern so a greyscale print
//! still tells them apart.
//!
//! These functions never panic and never write `NaN`: non-finite points are dropped, negative
//! bar values count as zero, and empty input gives an empty chart saying "no data". They do not
//! thin large series themselves: call [`downsample`] first.

use std::fmt::Write as _;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const PLOT_LEFT: f64 = 72.0;
const PLOT_RIGHT: f64 = 540.0;
const PLOT_TOP: f64 = 44.0;
const PLOT_BOTTOM: f64 = 364.0;
const LEGEND_LEFT: f64 = 554.0;
const LEGEND_MAX_CHARS: usize = 19;
/// Series of at most this many points get a marker at each point.
const MARKED_POINTS_MAX: usize = 16;

/// Okabe-Ito, without the yellow that vanishes on white paper.
const PALETTE: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];
const DASHES: [&str; 4] = ["", "7 4", "2 3", "9 3 2 3"];

/// One named line of a [`line_chart_svg`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart of `series`. With `log_x`, the x axis is logarithmic and points with `x <= 0`
/// are dropped; if `x_label` ends with `(s)`, its ticks are time units (1 s, 10 s, 1 min, 10 min, 1 h, 1 d, 1 wk, 30 d, 1 y).
/// The y axis starts at zero when the data is non-negative and its minimum is at most half its
/// maximum.
pub fn line_chart_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let drawable: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!log_x || x > 0.0))
                .collect()
        })
        .collect();
    let all = || drawable.iter().flatten();
    let xs = min_max(all().map(|p| p.0));
    let ys = min_max(all().map(|p| p.1));

    let x_axis = if log_x {
        Axis::log(xs, x_label.trim_end().ends_with("(s)"))
    } else {
        Axis::linear(xs, false)
    };
    let y_axis = Axis::linear(ys, true);

    let mut svg = open_svg(title);
    grid_and_axes(&mut svg, &x_axis, &y_axis, x_label, y_label);
    svg.push_str("<g clip-path=\"url(#plot-area)\" fill=\"none\" stroke-width=\"2\" stroke-linejoin=\"round\">\n");
    for (i, (points, s)) in drawable.iter().zip(series).enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        // The full name as a tooltip: the legend may have to shorten it.
        let title = format!("<title>{}</title>", escape(&s.name));
        let px = |&(x, y): &(f64, f64)| (x_axis.to_px_x(x), y_axis.to_px_y(y));
        match points.as_slice() {
            [] => {}
            [only] => {
                let (x, y) = px(only);
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\">{title}</circle>"
                );
            }
            _ => {
                let _ = write!(
                    svg,
                    "<polyline stroke=\"{colour}\"{} points=\"",
                    dash_attr(i)
                );
                for (j, p) in points.iter().enumerate() {
                    let (x, y) = px(p);
                    let sep = if j == 0 { "" } else { " " };
                    let _ = write!(svg, "{sep}{x:.1},{y:.1}");
                }
                let _ = writeln!(svg, "\">{title}</polyline>");
                // A short series is a set of measured points (a frontier): mark each one.
                if points.len() <= MARKED_POINTS_MAX {
                    for p in points {
                        let (x, y) = px(p);
                        let _ = writeln!(svg, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\" fill=\"{colour}\"/>");
                    }
                }
            }
        }
    }
    svg.push_str("</g>\n");
    if drawable.iter().all(Vec::is_empty) {
        no_data(&mut svg);
    }
    let entries: Vec<(&str, Swatch)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), Swatch::Line(i)))
        .collect();
    legend(&mut svg, &entries);
    svg.push_str("</svg>\n");
    svg
}

/// A stacked bar chart: one bar per `(label, values)`, `values[k]` being the height of the
/// segment named `stack_names[k]` (stacked bottom-up in that order). Missing values count as
/// zero and values beyond `stack_names` are ignored, as are negative and non-finite ones.
pub fn stacked_bar_svg(
    title: &str,
    y_label: &str,
    stack_names: &[&str],
    bars: &[(String, Vec<f64>)],
) -> String {
    let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
    let value = |values: &[f64], k: usize| values.get(k).copied().map_or(0.0, clean);
    let totals: Vec<f64> = bars
        .iter()
        .map(|(_, values)| (0..stack_names.len()).map(|k| value(values, k)).sum())
        .collect();
    let max_total = totals.iter().copied().fold(0.0, f64::max);
    let y_axis = Axis::linear(Some((0.0, max_total)), true);

    let mut svg = open_svg(title);
    grid_and_axes(&mut svg, &Axis::none(), &y_axis, "", y_label);
    let slot = (PLOT_RIGHT - PLOT_LEFT) / bars.len().max(1) as f64;
    let bar_w = (slot * 0.6).min(90.0);
    for (i, ((label, values), total)) in bars.iter().zip(&totals).enumerate() {
        let centre = PLOT_LEFT + slot * (i as f64 + 0.5);
        let left = centre - bar_w / 2.0;
        let mut base = 0.0;
        for (k, name) in stack_names.iter().enumerate() {
            let v = value(values, k);
            if v <= 0.0 {
                continue;
            }
            let (top_px, bottom_px) = (y_axis.to_px_y(base + v), y_axis.to_px_y(base));
            let _ = writeln!(
                svg,
                "<rect x=\"{left:.1}\" y=\"{top_px:.1}\" width=\"{bar_w:.1}\" height=\"{:.1}\" \
                 fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"0.75\"><title>{}: {} {}</title></rect>",
                bottom_px - top_px,
                PALETTE[k % PALETTE.len()],
                escape(label),
                escape(name),
                fmt_value(v),
            );
            base += v;
        }
        let _ = writeln!(
            svg,
            "<text x=\"{centre:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
            y_axis.to_px_y(*total) - 4.0,
            fmt_value(*total)
        );
        let max_chars = ((slot / 7.0) as usize).max(3);
        let _ = writeln!(
            svg,
            "<text x=\"{centre:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            PLOT_BOTTOM + 18.0,
            escape(&truncate(label, max_chars))
        );
    }
    if bars.is_empty() || max_total <= 0.0 {
        no_data(&mut svg);
    }
    // Top segment first, as the eye reads the bars.
    let entries: Vec<(&str, Swatch)> = stack_names
        .iter()
        .enumerate()
        .rev()
        .map(|(k, name)| (*name, Swatch::Block(k)))
        .collect();
    legend(&mut svg, &entries);
    svg.push_str("</svg>\n");
    svg
}

/// Thins `points` to at most `max_points` while keeping the shape: the first and last points,
/// and in each of `(max_points - 2) / 2` buckets of the rest its lowest and highest point, in
/// their original order. The global minimum and maximum therefore survive, so peaks in a
/// power trace stay visible. Points are assumed to be in x order; with `max_points < 4` only
/// the endpoints are kept.
pub fn downsample(points: &[(f64, f64)], max_points: usize) -> Vec<(f64, f64)> {
    let n = points.len();
    if n <= max_points {
        return points.to_vec();
    }
    match max_points {
        0 => return Vec::new(),
        1 => return vec![points[0]],
        2 | 3 => return vec![points[0], points[n - 1]],
        _ => {}
    }
    let inner = &points[1..n - 1];
    let buckets = (max_points - 2) / 2;
    let mut out = Vec::with_capacity(max_points);
    out.push(points[0]);
    for b in 0..buckets {
        let bucket = &inner[b * inner.len() / buckets..(b + 1) * inner.len() / buckets];
        let (mut lo, mut hi) = (0, 0);
        for (i, p) in bucket.iter().enumerate() {
            if p.1 < bucket[lo].1 {
                lo = i;
            }
            if p.1 > bucket[hi].1 {
                hi = i;
            }
        }
        if bucket.is_empty() {
            continue;
        }
        let (first, second) = (lo.min(hi), lo.max(hi));
        out.push(bucket[first]);
        if second != first {
            out.push(bucket[second]);
        }
    }
    out.push(points[n - 1]);
    out
}

/// A scale from data to pixels, with its ticks (value, SVG-safe label).
struct Axis {
    log: bool,
    /// Domain; for a log axis, the exponents of ten.
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
}

impl Axis {
    fn none() -> Self {
        Axis {
            log: false,
            lo: 0.0,
            hi: 1.0,
            ticks: Vec::new(),
        }
    }

    fn linear(range: Option<(f64, f64)>, from_zero: bool) -> Self {
        let (mut min, mut max) = range.unwrap_or((0.0, 1.0));
        if from_zero && min > 0.0 && min <= max * 0.5 {
            min = 0.0;
        }
        if max - min <= f64::EPSILON * max.abs().max(1.0) {
            let pad = if min == 0.0 { 1.0 } else { min.abs() * 0.1 };
            (min, max) = if from_zero && min == 0.0 {
                (0.0, 1.0)
            } else {
                (min - pad, max + pad)
            };
        }
        // Keep the domain's span finite, so that every position below stays finite.
        (min, max) = (min.max(-f64::MAX / 4.0), max.min(f64::MAX / 4.0));
        let step = nice_step((max - min) / 6.0);
        let lo = (min / step).floor() * step;
        let hi = (max / step).ceil() * step;
        let count = (((hi - lo) / step).round() as usize).min(20);
        let decimals = (-step.log10().floor()).clamp(0.0, 12.0) as usize;
        let ticks = (0..=count)
            .map(|i| {
                let v = lo + i as f64 * step;
                let v = if v.abs() < step * 1e-9 { 0.0 } else { v };
                (v, format!("{v:.decimals$}"))
            })
            .collect();
        Axis {
            log: false,
            lo,
            hi,
            ticks,
        }
    }

    fn log(range: Option<(f64, f64)>, seconds: bool) -> Self {
        let (min, max) = range.unwrap_or((1.0, 10.0));
        let lo = min.log10().floor();
        let mut hi = max.log10().ceil();
        if hi <= lo {
            hi = lo + 1.0;
        }
        let mut ticks = Vec::new();
        if seconds {
            ticks = TIME_TICKS
                .iter()
                .filter(|(s, _)| (lo..=hi).contains(&s.log10()))
                .map(|&(s, label)| (s, label.to_string()))
                .collect();
        }
        if ticks.len() < 2 {
            let stride = ((hi - lo) / 8.0).ceil().max(1.0);
            let mut k = lo;
            ticks.clear();
            while k <= hi {
                ticks.push((10f64.powf(k), power_of_ten_label(k as i32)));
                k += stride;
            }
        }
        Axis {
            log: true,
            lo,
            hi,
            ticks,
        }
    }

    fn fraction(&self, v: f64) -> f64 {
        let v = if self.log { v.log10() } else { v };
        let f = (v - self.lo) / (self.hi - self.lo);
        // Only data beyond f64's range can fall outside the domain; the clip path hides it.
        if f.is_nan() { 0.0 } else { f.clamp(-0.5, 1.5) }
    }

    fn to_px_x(&self, v: f64) -> f64 {
        PLOT_LEFT + self.fraction(v) * (PLOT_RIGHT - PLOT_LEFT)
    }

    fn to_px_y(&self, v: f64) -> f64 {
        PLOT_BOTTOM - self.fraction(v) * (PLOT_BOTTOM - PLOT_TOP)
    }
}

const MIN_S: f64 = 60.0;
const HOUR_S: f64 = 3_600.0;
const DAY_S: f64 = 86_400.0;
const TIME_TICKS: [(f64, &str); 12] = [
    (0.001, "1 ms"),
    (0.01, "10 ms"),
    (0.1, "100 ms"),
    (1.0, "1 s"),
    (10.0, "10 s"),
    (MIN_S, "1 min"),
    (10.0 * MIN_S, "10 min"),
    (HOUR_S, "1 h"),
    (DAY_S, "1 d"),
    (7.0 * DAY_S, "1 wk"),
    (30.0 * DAY_S, "30 d"),
    (365.0 * DAY_S, "1 y"),
];

fn power_of_ten_label(k: i32) -> String {
    if (-2..=4).contains(&k) {
        format!("{}", 10f64.powi(k))
    } else {
        format!("10<tspan dy=\"-5\" font-size=\"9\">{k}</tspan>")
    }
}

/// The 1-2-5 step nearest above `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

fn open_svg(title: &str) -> String {
    let mut svg = String::with_capacity(8 * 1024);
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#222222\">"
    );
    let _ = writeln!(
        svg,
        "<defs><clipPath id=\"plot-area\"><rect x=\"{PLOT_LEFT}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath></defs>",
        PLOT_TOP - 2.0,
        PLOT_RIGHT - PLOT_LEFT + 2.0,
        PLOT_BOTTOM - PLOT_TOP + 4.0
    );
    let _ = writeln!(
        svg,
        "<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"26\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>",
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        escape(title)
    );
    svg
}

fn grid_and_axes(svg: &mut String, x: &Axis, y: &Axis, x_label: &str, y_label: &str) {
    svg.push_str("<g stroke=\"#e3e3e3\" stroke-width=\"1\">\n");
    for (v, _) in &x.ticks {
        let px = x.to_px_x(*v);
        let _ = writeln!(
            svg,
            "<line x1=\"{px:.1}\" y1=\"{PLOT_TOP}\" x2=\"{px:.1}\" y2=\"{PLOT_BOTTOM}\"/>"
        );
    }
    for (v, _) in &y.ticks {
        let py = y.to_px_y(*v);
        let _ = writeln!(
            svg,
            "<line x1=\"{PLOT_LEFT}\" y1=\"{py:.1}\" x2=\"{PLOT_RIGHT}\" y2=\"{py:.1}\"/>"
        );
    }
    svg.push_str("</g>\n<g stroke=\"#333333\" stroke-width=\"1\">\n");
    let _ = writeln!(
        svg,
        "<line x1=\"{PLOT_LEFT}\" y1=\"{PLOT_BOTTOM}\" x2=\"{PLOT_RIGHT}\" y2=\"{PLOT_BOTTOM}\"/>"
    );
    let _ = writeln!(
        svg,
        "<line x1=\"{PLOT_LEFT}\" y1=\"{PLOT_TOP}\" x2=\"{PLOT_LEFT}\" y2=\"{PLOT_BOTTOM}\"/>"
    );
    for (v, _) in &x.ticks {
        let px = x.to_px_x(*v);
        let _ = writeln!(
            svg,
            "<line x1=\"{px:.1}\" y1=\"{PLOT_BOTTOM}\" x2=\"{px:.1}\" y2=\"{}\"/>",
            PLOT_BOTTOM + 5.0
        );
    }
    for (v, _) in &y.ticks {
        let py = y.to_px_y(*v);
        let _ = writeln!(
            svg,
            "<line x1=\"{}\" y1=\"{py:.1}\" x2=\"{PLOT_LEFT}\" y2=\"{py:.1}\"/>",
            PLOT_LEFT - 5.0
        );
    }
    svg.push_str("</g>\n<g font-size=\"11\">\n");
    for (v, label) in &x.ticks {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            x.to_px_x(*v),
            PLOT_BOTTOM + 18.0
        );
    }
    for (v, label) in &y.ticks {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            PLOT_LEFT - 8.0,
            y.to_px_y(*v) + 4.0
        );
    }
    svg.push_str("</g>\n");
    if !x_label.is_empty() {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            (PLOT_LEFT + PLOT_RIGHT) / 2.0,
            HEIGHT - 16.0,
            escape(x_label)
        );
    }
    let (lx, ly) = (18.0, (PLOT_TOP + PLOT_BOTTOM) / 2.0);
    let _ = writeln!(
        svg,
        "<text x=\"{lx}\" y=\"{ly}\" text-anchor=\"middle\" transform=\"rotate(-90 {lx} {ly})\">{}</text>",
        escape(y_label)
    );
}

enum Swatch {
    Line(usize),
    Block(usize),
}

fn legend(svg: &mut String, entries: &[(&str, Swatch)]) {
    for (row, (name, swatch)) in entries.iter().enumerate() {
        let y = PLOT_TOP + 8.0 + row as f64 * 20.0;
        match swatch {
            Swatch::Line(i) => {
                let _ = writeln!(
                    svg,
                    "<line x1=\"{LEGEND_LEFT}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"2\"{}/>",
                    LEGEND_LEFT + 26.0,
                    PALETTE[i % PALETTE.len()],
                    dash_attr(*i)
                );
            }
            Swatch::Block(k) => {
                let _ = writeln!(
                    svg,
                    "<rect x=\"{}\" y=\"{:.1}\" width=\"14\" height=\"14\" fill=\"{}\"/>",
                    LEGEND_LEFT + 6.0,
                    y - 7.0,
                    PALETTE[k % PALETTE.len()]
                );
            }
        }
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\">{}</text>",
            LEGEND_LEFT + 34.0,
            y + 4.0,
            escape(&truncate(name, LEGEND_MAX_CHARS))
        );
    }
}

fn no_data(svg: &mut String) {
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#888888\">no data</text>",
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        (PLOT_TOP + PLOT_BOTTOM) / 2.0
    );
}

fn dash_attr(i: usize) -> String {
    match DASHES[(i / PALETTE.len() + i) % DASHES.len()] {
        "" => String::new(),
        d => format!(" stroke-dasharray=\"{d}\""),
    }
}

fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.1e}")
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max_chars.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Escapes text for XML content and attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if c.is_control() && c != '\t' && c != '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_five() {
        assert_eq!(nice_step(0.17), 0.2);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(120.0), 200.0);
    }

    #[test]
    fn cdf_axis_runs_zero_to_one() {
        let a = Axis::linear(Some((0.0, 1.0)), true);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
    }

    #[test]
    fn log_time_axis_uses_human_units() {
        let a = Axis::log(Some((1.0, 300_000.0)), true);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(
            labels,
            ["1 s", "10 s", "1 min", "10 min", "1 h", "1 d", "1 wk"]
        );
    }
}
