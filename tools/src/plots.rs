//! Charts for the simulator's pages and the accounting report, drawn with the `plotters` crate's
//! SVG backend: line charts (JCT CDFs on a log time axis, power or energy over time) and
//! stacked bars (energy by category per policy, energy per user).
//!
//! Each function returns one standalone SVG document (720 x 420) with a title, axes with "nice"
//! ticks, grid lines, axis labels and a legend right of the plot. plotters is built without its
//! font features, so text is written as SVG `<text>` (sans-serif) and laid out with plotters'
//! own size estimate: no font files and no fontconfig are needed. Colours come from the
//! Okabe-Ito palette (and a grey), which stays readable for colour-blind readers; lines of up to
//! 400 points also differ by dash pattern so a greyscale print still tells them apart.
//!
//! These functions never panic and never write `NaN`: non-finite points are dropped, negative
//! bar values count as zero, and empty input gives an empty chart saying "no data". They do not
//! thin large series themselves: call [`downsample`] first.

use std::error::Error;

use plotters::coord::Shift;
use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const WIDTH_PX: u32 = 720;
const HEIGHT_PX: u32 = 420;
const LEGEND_WIDTH_PX: u32 = 176;
const LEGEND_MAX_CHARS: usize = 20;
/// Series of more points are drawn solid: a dash pattern is not visible on a jagged line, and
/// plotters writes every dash as its own element.
const DASHED_POINTS_MAX: usize = 400;
/// Series of at most this many points get a marker at each point.
const MARKED_POINTS_MAX: usize = 16;
const FONT: &str = "sans-serif";

/// Okabe-Ito, without the yellow that vanishes on white paper, and a grey.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0x99, 0x99, 0x99),
];
/// (dash, gap) in pixels; `None` is a solid line.
const DASHES: [Option<(u32, u32)>; 4] = [None, Some((7, 4)), Some((2, 3)), Some((10, 3))];
const GRID: RGBColor = RGBColor(0xE3, 0xE3, 0xE3);
const AXIS: RGBColor = RGBColor(0x33, 0x33, 0x33);
const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);
const MUTED: RGBColor = RGBColor(0x88, 0x88, 0x88);

type DrawResult = Result<(), Box<dyn Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

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
    // Points in chart coordinates: on a log axis, x is its exponent of ten.
    let drawable: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!log_x || x > 0.0))
                .map(|(x, y)| (if log_x { x.log10() } else { x }, y))
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
    let legend: Vec<(String, Swatch)> = series
        .iter()
        .enumerate()
        .zip(&drawable)
        .map(|((i, s), points)| (s.name.clone(), Swatch::Line(i, line_dash(i, points.len()))))
        .collect();
    let empty = drawable.iter().all(Vec::is_empty);
    render(title, &legend, |area| {
        let mut chart = cartesian(area, &x_axis, &y_axis, x_label, y_label)?;
        for (i, points) in drawable.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let style = colour.stroke_width(2);
            match (points.as_slice(), line_dash(i, points.len())) {
                ([], _) => {}
                ([only], _) => {
                    chart.draw_series(std::iter::once(Circle::new(*only, 3, colour.filled())))?;
                }
                (_, None) => {
                    chart.draw_series(LineSeries::new(points.iter().copied(), style))?;
                }
                (_, Some((on, off))) => {
                    chart.draw_series(DashedLineSeries::new(points.iter().copied(), on, off, style))?;
                }
            }
            // A short series is a set of measured points (a frontier): mark each one.
            if (2..=MARKED_POINTS_MAX).contains(&points.len()) {
                chart.draw_series(points.iter().map(|p| Circle::new(*p, 2.5, colour.filled())))?;
            }
        }
        if empty {
            no_data(&chart)?;
        }
        Ok(())
    })
}

/// A stacked bar chart: one bar per `(label, values)`, `values[k]` being the height of the
/// segment named `stack_names[k]` (stacked bottom-up in that order). Missing values count as
/// zero and values beyond `stack_names` are ignored, as are negative and non-finite ones.
/// Each bar carries its total above it.
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
    let slot_px = f64::from(WIDTH_PX - LEGEND_WIDTH_PX) / bars.len().max(1) as f64;
    let max_chars = ((slot_px / 7.5) as usize).max(3);
    let x_axis = Axis {
        lo: 0.0,
        hi: bars.len().max(1) as f64,
        ticks: bars
            .iter()
            .enumerate()
            .map(|(i, (label, _))| (i as f64 + 0.5, truncate(label, max_chars)))
            .collect(),
    };
    // Top segment first, as the eye reads the bars.
    let legend: Vec<(String, Swatch)> = stack_names
        .iter()
        .enumerate()
        .rev()
        .map(|(k, name)| (name.to_string(), Swatch::Block(k)))
        .collect();
    let half_width = (0.3f64).min(45.0 / slot_px);
    render(title, &legend, |area| {
        let mut chart = cartesian(area, &x_axis, &y_axis, "", y_label)?;
        for (i, ((_, values), total)) in bars.iter().zip(&totals).enumerate() {
            let centre = i as f64 + 0.5;
            let (left, right) = (centre - half_width, centre + half_width);
            let mut base = 0.0;
            for k in 0..stack_names.len() {
                let v = value(values, k);
                if v <= 0.0 {
                    continue;
                }
                let colour = PALETTE[k % PALETTE.len()];
                chart.draw_series([
                    Rectangle::new([(left, base), (right, base + v)], colour.filled()),
                    Rectangle::new([(left, base), (right, base + v)], WHITE.stroke_width(1)),
                ])?;
                base += v;
            }
            let style = text_style(14.0, INK).pos(Pos::new(HPos::Center, VPos::Bottom));
            chart.draw_series(std::iter::once(Text::new(fmt_value(*total), (centre, *total), style)))?;
        }
        if bars.is_empty() || max_total <= 0.0 {
            no_data(&chart)?;
        }
        Ok(())
    })
}

/// A bar chart of one value per bar, e.g. energy per user: a [`stacked_bar_svg`] with a single
/// stack named `value_name`.
pub fn bar_svg(title: &str, y_label: &str, value_name: &str, bars: &[(String, f64)]) -> String {
    let bars: Vec<(String, Vec<f64>)> = bars.iter().map(|(l, v)| (l.clone(), vec![*v])).collect();
    stacked_bar_svg(title, y_label, &[value_name], &bars)
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

/// Draws the page: white background, title, the chart `draw` puts left, the legend right.
/// A drawing error (none is expected with an in-memory SVG) gives a chart saying so.
fn render(
    title: &str,
    legend_entries: &[(String, Swatch)],
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> String {
    let mut svg = String::with_capacity(16 * 1024);
    let result = (|| -> DrawResult {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE)?;
        let title_style = TextStyle::from((FONT, 22).into_font().style(FontStyle::Bold)).color(&INK);
        let body = root.titled(&clean_text(title), title_style)?;
        let (plot, legend_area) = body.split_horizontally(WIDTH_PX - LEGEND_WIDTH_PX);
        draw(&plot)?;
        legend(&legend_area, legend_entries)?;
        root.present()?;
        Ok(())
    })();
    match result {
        Ok(()) => svg,
        Err(e) => error_svg(title, &e.to_string()),
    }
}

/// The plot area's chart: axes at the given ticks, light grid lines, axis labels.
fn cartesian<'a, 'b>(
    area: &'b Area<'a>,
    x: &Axis,
    y: &Axis,
    x_label: &str,
    y_label: &str,
) -> Result<ChartContext<'b, SVGBackend<'a>, Cartesian2d<Axis, Axis>>, Box<dyn Error>> {
    let mut chart = ChartBuilder::on(area)
        .margin_top(6)
        .margin_left(6)
        .margin_bottom(4)
        .margin_right(12)
        .x_label_area_size(if x_label.is_empty() { 28 } else { 46 })
        .y_label_area_size(70)
        .build_cartesian_2d(x.clone(), y.clone())?;
    let mut mesh = chart.configure_mesh();
    mesh.bold_line_style(GRID.stroke_width(1))
        .light_line_style(TRANSPARENT)
        .axis_style(AXIS.stroke_width(1))
        .x_labels(x.ticks.len().max(1))
        .y_labels(y.ticks.len().max(1))
        .label_style(text_style(15.0, INK))
        .axis_desc_style(text_style(16.0, INK));
    if !x_label.is_empty() {
        mesh.x_desc(clean_text(x_label));
    }
    if !y_label.is_empty() {
        mesh.y_desc(clean_text(y_label));
    }
    mesh.draw()?;
    Ok(chart)
}

fn no_data<DB: DrawingBackend>(chart: &ChartContext<'_, DB, Cartesian2d<Axis, Axis>>) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let (xr, yr) = (chart.x_range(), chart.y_range());
    let centre = ((xr.start + xr.end) / 2.0, (yr.start + yr.end) / 2.0);
    let style = text_style(15.0, MUTED).pos(Pos::new(HPos::Center, VPos::Center));
    chart
        .plotting_area()
        .draw(&Text::new("no data", centre, style))
        .map_err(|e| e.to_string())?;
    Ok(())
}

enum Swatch {
    /// Colour index and dash pattern.
    Line(usize, Option<(u32, u32)>),
    Block(usize),
}

fn legend(area: &Area<'_>, entries: &[(String, Swatch)]) -> DrawResult {
    for (row, (name, swatch)) in entries.iter().enumerate() {
        let y = 16 + row as i32 * 20;
        match swatch {
            Swatch::Line(i, dash) => {
                let style = PALETTE[i % PALETTE.len()].stroke_width(2);
                match dash {
                    None => area.draw(&PathElement::new([(4, y), (30, y)], style))?,
                    Some((on, off)) => {
                        let mut x = 4;
                        while x < 30 {
                            let end = (x + *on as i32).min(30);
                            area.draw(&PathElement::new([(x, y), (end, y)], style))?;
                            x = end + *off as i32;
                        }
                    }
                }
            }
            Swatch::Block(k) => {
                let colour = PALETTE[k % PALETTE.len()];
                area.draw(&Rectangle::new([(10, y - 7), (24, y + 7)], colour.filled()))?;
            }
        }
        let style = text_style(14.0, INK).pos(Pos::new(HPos::Left, VPos::Center));
        area.draw(&Text::new(truncate(&clean_text(name), LEGEND_MAX_CHARS), (36, y), style))?;
    }
    Ok(())
}

fn text_style(size: f64, colour: RGBColor) -> TextStyle<'static> {
    (FONT, size).into_font().color(&colour)
}

fn line_dash(i: usize, points: usize) -> Option<(u32, u32)> {
    if points > DASHED_POINTS_MAX { None } else { dash(i) }
}

fn dash(i: usize) -> Option<(u32, u32)> {
    // Series that repeat a colour (every 8th) get another dash pattern.
    DASHES[(i % PALETTE.len() + i / PALETTE.len()) % DASHES.len()]
}

/// A chart that says why it could not be drawn (well-formed, like every other output).
fn error_svg(title: &str, error: &str) -> String {
    let esc = |s: &str| {
        clean_text(s)
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    format!(
        "<svg width=\"{WIDTH_PX}\" height=\"{HEIGHT_PX}\" viewBox=\"0 0 {WIDTH_PX} {HEIGHT_PX}\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <text x=\"20\" y=\"40\" font-family=\"{FONT}\">{}: chart not drawn: {}</text>\n</svg>\n",
        esc(title),
        esc(error)
    )
}

/// An axis in chart coordinates (for a log axis: exponents of ten) with its ticks
/// (position, label); plotters draws it as a linear coordinate with exactly these ticks.
#[derive(Clone)]
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
}

impl Axis {
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
        // Keep the domain's span finite, so that every position stays finite.
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
        Axis { lo, hi, ticks }
    }

    /// `range` holds exponents of ten (the data's log10); `seconds` labels ticks in time units.
    fn log(range: Option<(f64, f64)>, seconds: bool) -> Self {
        let (min, max) = range.unwrap_or((0.0, 1.0));
        let lo = min.floor().max(-300.0);
        let mut hi = max.ceil().min(300.0);
        if hi <= lo {
            hi = lo + 1.0;
        }
        let mut ticks = Vec::new();
        if seconds {
            ticks = TIME_TICKS
                .iter()
                .map(|&(s, label)| (s.log10(), label.to_string()))
                .filter(|(k, _)| (lo..=hi).contains(k))
                .collect();
        }
        if ticks.len() < 2 {
            let stride = ((hi - lo) / 8.0).ceil().max(1.0);
            let mut k = lo;
            ticks.clear();
            while k <= hi {
                ticks.push((k, power_of_ten_label(k as i32)));
                k += stride;
            }
        }
        Axis { lo, hi, ticks }
    }

    /// The label of the tick at `position` (plotters asks for each key point).
    fn label_at(&self, position: f64) -> String {
        let tolerance = (self.hi - self.lo).abs() * 1e-9;
        self.ticks
            .iter()
            .find(|(p, _)| (p - position).abs() <= tolerance)
            .map(|(_, label)| label.clone())
            .unwrap_or_default()
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let fraction = (value - self.lo) / (self.hi - self.lo);
        let fraction = if fraction.is_nan() { 0.0 } else { fraction.clamp(-0.5, 1.5) };
        let span = f64::from(limit.1) - f64::from(limit.0);
        (f64::from(limit.0) + fraction * span).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.iter().map(|t| t.0).collect()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, value: &f64) -> String {
        self.label_at(*value)
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

/// `10^k` as text: plain for small exponents, else with a superscript exponent.
fn power_of_ten_label(k: i32) -> String {
    if (-2..=4).contains(&k) {
        format!("{}", 10f64.powi(k))
    } else {
        const SUPERSCRIPTS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
        let mut label = String::from("10");
        if k < 0 {
            label.push('⁻');
        }
        for digit in k.unsigned_abs().to_string().bytes() {
            label.push(SUPERSCRIPTS[usize::from(digit - b'0')]);
        }
        label
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

pub(crate) fn fmt_value(v: f64) -> String {
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

/// Control characters are not allowed in XML 1.0 (plotters escapes the markup characters).
fn clean_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
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
        assert_eq!(a.label_at(0.4), "0.4");
        assert_eq!(a.label_at(0.5), "");
    }

    #[test]
    fn log_time_axis_uses_human_units() {
        let a = Axis::log(Some((0.0, 300_000f64.log10())), true);
        let labels: Vec<&str> = a.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(
            labels,
            ["1 s", "10 s", "1 min", "10 min", "1 h", "1 d", "1 wk"]
        );
    }

    #[test]
    fn no_two_of_the_first_sixteen_series_look_alike() {
        let looks: std::collections::BTreeSet<(usize, Option<(u32, u32)>)> = (0..16).map(|i| (i % PALETTE.len(), dash(i))).collect();
        assert_eq!(looks.len(), 16);
    }

    #[test]
    fn large_powers_of_ten_use_superscripts() {
        assert_eq!(power_of_ten_label(3), "1000");
        assert_eq!(power_of_ten_label(12), "10¹²");
        assert_eq!(power_of_ten_label(-7), "10⁻⁷");
    }
}
